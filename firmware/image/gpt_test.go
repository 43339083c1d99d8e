package image

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testTable is the default image's table: a 192 MiB ESP at 1 MiB, 64 MiB of data after it.
func testTable(t *testing.T) Table {
	t.Helper()
	tb, err := plan(DefaultESPSize, DefaultDataSize)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// smallTable is a 4 MiB disk with the two partitions of 1 MiB each: the tests that read a
// whole disk into memory use it.
func smallTable(t *testing.T) Table {
	t.Helper()
	tb := testTable(t)
	tb.Sectors = 4 << 20 / SectorSize
	tb.Partitions[0].LastLBA = 2*2048 - 1
	tb.Partitions[1].FirstLBA, tb.Partitions[1].LastLBA = 2*2048, 3*2048-1
	return tb
}

// writeTestDisk writes tb to a sparse file of its size and returns the file's path.
func writeTestDisk(t *testing.T, tb Table) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(tb.Sectors) * SectorSize); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(f, tb); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestPlan(t *testing.T) {
	tb := testTable(t)
	esp, data := tb.Partitions[0], tb.Partitions[1]
	if esp.Offset() != 1<<20 || esp.Size() != DefaultESPSize || esp.Name != "edgegate-esp" || esp.Type != ESPType || esp.Number != 1 {
		t.Errorf("ESP %+v: want partition 1 at 1 MiB, 192 MiB, named edgegate-esp, of the ESP type", esp)
	}
	if data.Offset() != esp.Offset()+esp.Size() || data.Size() != DefaultDataSize || data.Name != "edgegate-data" ||
		data.Type != LinuxFilesystemType || data.Number != 2 {
		t.Errorf("data %+v: want partition 2 right after the ESP, 64 MiB, named edgegate-data, Linux file system", data)
	}
	// 1 MiB before the ESP, 1 MiB after the data partition for the backup GPT.
	if size := int64(tb.Sectors) * SectorSize; size != (1+192+64+1)<<20 {
		t.Errorf("disk of %d bytes, want 258 MiB", size)
	}
	for _, p := range tb.Partitions {
		if p.Offset()%Align != 0 || p.Size()%Align != 0 {
			t.Errorf("partition %d at %d, %d bytes: not aligned to 1 MiB", p.Number, p.Offset(), p.Size())
		}
	}
	if tb.DiskGUID == esp.GUID || esp.GUID == data.GUID || tb.DiskGUID == (GUID{}) {
		t.Errorf("GUIDs not unique: disk %s, ESP %s, data %s", tb.DiskGUID, esp.GUID, data.GUID)
	}
	if again := testTable(t); again.DiskGUID == tb.DiskGUID {
		t.Error("two plans share a disk GUID")
	}
}

func TestGUID(t *testing.T) {
	// The ESP type as every GPT on disk spells it (mixed endian).
	onDisk := []byte{0x28, 0x73, 0x2A, 0xC1, 0x1F, 0xF8, 0xD2, 0x11, 0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E, 0xC9, 0x3B}
	if got := ESPType.encode(); !bytes.Equal(got[:], onDisk) {
		t.Errorf("ESP type on disk % x, want % x", got, onDisk)
	}
	if got := decodeGUID(onDisk); got != ESPType {
		t.Errorf("decoded %s, want %s", got, ESPType)
	}
	if s := ESPType.String(); s != "C12A7328-F81F-11D2-BA4B-00A0C93EC93B" {
		t.Errorf("String() = %s", s)
	}
	if g, err := ParseGUID("c12a7328-f81f-11d2-ba4b-00a0c93ec93b"); err != nil || g != ESPType {
		t.Errorf("ParseGUID lower case = %s, %v", g, err)
	}
	for _, bad := range []string{"", "C12A7328F81F11D2BA4B00A0C93EC93B", "C12A7328-F81F-11D2-BA4B-00A0C93EC93", "G12A7328-F81F-11D2-BA4B-00A0C93EC93B"} {
		if _, err := ParseGUID(bad); err == nil {
			t.Errorf("ParseGUID(%q) succeeded", bad)
		}
	}
	g, err := NewGUID()
	if err != nil {
		t.Fatal(err)
	}
	if s := g.String(); s[14] != '4' || !strings.ContainsRune("89AB", rune(s[19])) {
		t.Errorf("NewGUID() = %s: not a version 4 variant 1 GUID", s)
	}
}

func TestTableRoundTrip(t *testing.T) {
	for _, tb := range []Table{testTable(t), smallTable(t)} {
		got, err := ReadDiskTable(writeTestDisk(t, tb))
		if err != nil {
			t.Fatal(err)
		}
		if got.DiskGUID != tb.DiskGUID || got.Sectors != tb.Sectors || len(got.Partitions) != 2 {
			t.Fatalf("read back %+v, wrote %+v", got, tb)
		}
		for i, p := range got.Partitions {
			if p != tb.Partitions[i] {
				t.Errorf("partition %d read back as %+v, wrote %+v", i+1, p, tb.Partitions[i])
			}
		}
	}
}

func TestTableBytes(t *testing.T) {
	tb := smallTable(t)
	disk := writeTestDisk(t, tb)
	raw, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	// The protective MBR: one partition of type 0xEE from LBA 1 over the whole disk.
	if raw[510] != 0x55 || raw[511] != 0xAA || raw[446+4] != 0xEE ||
		binary.LittleEndian.Uint32(raw[446+8:]) != 1 || binary.LittleEndian.Uint32(raw[446+12:]) != uint32(tb.Sectors-1) {
		t.Errorf("protective MBR entry % x", raw[446:462])
	}
	// The name as UTF-16LE in the first entry.
	if name := raw[2*SectorSize+56 : 2*SectorSize+56+24]; !bytes.Equal(name, utf16le("edgegate-esp")) {
		t.Errorf("first entry's name % x", name)
	}
	// The backup header at the last LBA points back at the primary and at its own entries.
	backup := raw[len(raw)-SectorSize:]
	if !bytes.Equal(backup[:8], []byte("EFI PART")) || binary.LittleEndian.Uint64(backup[24:]) != tb.Sectors-1 ||
		binary.LittleEndian.Uint64(backup[32:]) != 1 || binary.LittleEndian.Uint64(backup[72:]) != tb.Sectors-33 {
		t.Errorf("backup header % x", backup[:92])
	}
}

func utf16le(s string) []byte {
	var b []byte
	for _, r := range s {
		b = binary.LittleEndian.AppendUint16(b, uint16(r))
	}
	return b
}

// TestReadTableRefusesDamage: every CRC32 is checked, and a backup that does not match the
// primary is refused.
func TestReadTableRefusesDamage(t *testing.T) {
	tb := smallTable(t)
	last := int64(tb.Sectors-1) * SectorSize
	for name, damage := range map[string]func(b []byte){
		"MBR signature":       func(b []byte) { b[511] = 0 },
		"primary signature":   func(b []byte) { b[SectorSize] = 'X' },
		"primary header CRC":  func(b []byte) { b[SectorSize+40]++ }, // first usable LBA
		"primary entries CRC": func(b []byte) { b[2*SectorSize+56]++ },
		"backup header CRC":   func(b []byte) { b[last+48]++ },
		"backup entries CRC":  func(b []byte) { b[last-32*SectorSize+32]++ },
		"backup entries differ": func(b []byte) {
			// A consistent backup (its CRCs fixed) that describes other partitions.
			e := b[last-32*SectorSize : last]
			e[32]++
			binary.LittleEndian.PutUint32(b[last+88:], crc32.ChecksumIEEE(e))
			h := b[last : last+92]
			binary.LittleEndian.PutUint32(h[16:], 0)
			binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h))
		},
	} {
		t.Run(name, func(t *testing.T) {
			disk := writeTestDisk(t, tb)
			raw, err := os.ReadFile(disk)
			if err != nil {
				t.Fatal(err)
			}
			damage(raw)
			_, err = ReadTable(bytes.NewReader(raw), int64(len(raw)))
			if !errors.Is(err, ErrNoGPT) {
				t.Fatalf("ReadTable = %v, want ErrNoGPT", err)
			}
			t.Log(err)
		})
	}
	if _, err := ReadTable(bytes.NewReader(make([]byte, 1<<20)), 1<<20); !errors.Is(err, ErrNoGPT) {
		t.Errorf("ReadTable of zeros = %v, want ErrNoGPT", err)
	}
}

func TestWriteTableRefusesBadTables(t *testing.T) {
	good := testTable(t)
	for name, edit := range map[string]func(*Table){
		"overlap":       func(tb *Table) { tb.Partitions[1].FirstLBA = tb.Partitions[0].LastLBA },
		"before usable": func(tb *Table) { tb.Partitions[0].FirstLBA = 33 },
		"after usable":  func(tb *Table) { tb.Partitions[1].LastLBA = tb.Sectors - 33 },
		"number twice":  func(tb *Table) { tb.Partitions[1].Number = 1 },
		"number 0":      func(tb *Table) { tb.Partitions[0].Number = 0 },
		"no type":       func(tb *Table) { tb.Partitions[0].Type = GUID{} },
		"long name":     func(tb *Table) { tb.Partitions[0].Name = strings.Repeat("x", 37) },
		"tiny disk":     func(tb *Table) { tb.Sectors = 60; tb.Partitions = nil },
	} {
		t.Run(name, func(t *testing.T) {
			tb := good
			tb.Partitions = append([]Partition(nil), good.Partitions...)
			edit(&tb)
			var w bytes.Buffer
			if err := WriteTable(writerAt{&w}, tb); err == nil {
				t.Fatalf("WriteTable accepted %+v", tb)
			}
			if w.Len() != 0 {
				t.Errorf("a refused table wrote %d bytes", w.Len())
			}
		})
	}
}

type writerAt struct{ b *bytes.Buffer }

func (w writerAt) WriteAt(p []byte, _ int64) (int, error) { return w.b.Write(p) }

// TestReadPrimaryTableOnALargerDisk: an image copied onto a larger disk keeps its backup
// GPT where the image ended; ReadTable refuses that disk, ReadPrimaryTable reads its
// partitions, and still checks the primary's CRC32s.
func TestReadPrimaryTableOnALargerDisk(t *testing.T) {
	tb := smallTable(t)
	raw, err := os.ReadFile(writeTestDisk(t, tb))
	if err != nil {
		t.Fatal(err)
	}
	disk := append(raw, make([]byte, 1<<20)...)
	if _, err := ReadTable(bytes.NewReader(disk), int64(len(disk))); !errors.Is(err, ErrNoGPT) {
		t.Fatalf("ReadTable of the larger disk = %v, want ErrNoGPT", err)
	}
	got, err := ReadPrimaryTable(bytes.NewReader(disk))
	if err != nil {
		t.Fatal(err)
	}
	if got.DiskGUID != tb.DiskGUID || !slices.Equal(got.Partitions, tb.Partitions) {
		t.Errorf("ReadPrimaryTable = %+v, wrote %+v", got, tb)
	}
	disk[2*SectorSize+56]++ // the first entry's name
	if _, err := ReadPrimaryTable(bytes.NewReader(disk)); !errors.Is(err, ErrNoGPT) {
		t.Errorf("ReadPrimaryTable with damaged entries = %v, want ErrNoGPT", err)
	}
}
