package image

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"unicode/utf16"
)

// The GUID Partition Table (UEFI specification 2.10, chapter 5), written for 512-byte
// sectors: a protective MBR in LBA 0, the primary header in LBA 1 and its 128 partition
// entries of 128 bytes in LBAs 2-33; the backup entries in the 32 LBAs before the last one
// and the backup header in the last LBA.
const (
	SectorSize = 512

	gptEntries     = 128
	gptEntrySize   = 128
	gptHeaderSize  = 92
	gptEntrySects  = gptEntries * gptEntrySize / SectorSize // 32
	gptRevision    = 0x00010000
	gptNameLen     = 36 // UTF-16 code units
	mbrTypeGPTProt = 0xEE
)

var gptSignature = []byte("EFI PART")

// GUID is a GUID in its text form's byte order (as printed: 00112233-4455-...). On disk
// the first three fields are little-endian (UEFI's "mixed endian").
type GUID [16]byte

// Partition type GUIDs.
var (
	// ESPType is the EFI system partition's.
	ESPType = MustParseGUID("C12A7328-F81F-11D2-BA4B-00A0C93EC93B")
	// LinuxFilesystemType is Linux's generic file system data partition's.
	LinuxFilesystemType = MustParseGUID("0FC63DAF-8483-4772-8E79-3D69D8477DE4")
)

// ParseGUID parses the text form, either case.
func ParseGUID(s string) (GUID, error) {
	var g GUID
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return g, fmt.Errorf("GUID %q: want the form 01234567-89ab-cdef-0123-456789abcdef", s)
	}
	raw, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil {
		return g, fmt.Errorf("GUID %q: %w", s, err)
	}
	copy(g[:], raw)
	return g, nil
}

// MustParseGUID is ParseGUID for constants.
func MustParseGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// NewGUID returns a random (version 4) GUID.
func NewGUID() (GUID, error) {
	var g GUID
	if _, err := rand.Read(g[:]); err != nil {
		return g, fmt.Errorf("random GUID: %w", err)
	}
	g[6] = g[6]&0x0f | 0x40
	g[8] = g[8]&0x3f | 0x80
	return g, nil
}

// String is the upper-case text form, as sfdisk and the UEFI specification print it.
func (g GUID) String() string {
	h := strings.ToUpper(hex.EncodeToString(g[:]))
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// MarshalText makes GUIDs print in their text form in JSON.
func (g GUID) MarshalText() ([]byte, error) { return []byte(g.String()), nil }

// UnmarshalText parses the text form.
func (g *GUID) UnmarshalText(b []byte) error {
	v, err := ParseGUID(string(b))
	*g = v
	return err
}

// encode returns the on-disk byte order.
func (g GUID) encode() [16]byte {
	var b [16]byte
	b[0], b[1], b[2], b[3] = g[3], g[2], g[1], g[0]
	b[4], b[5] = g[5], g[4]
	b[6], b[7] = g[7], g[6]
	copy(b[8:], g[8:])
	return b
}

func decodeGUID(b []byte) GUID {
	var g GUID
	g[0], g[1], g[2], g[3] = b[3], b[2], b[1], b[0]
	g[4], g[5] = b[5], b[4]
	g[6], g[7] = b[7], b[6]
	copy(g[8:], b[8:16])
	return g
}

// Partition is one GPT partition entry.
type Partition struct {
	// Number is the partition's 1-based index in the entry array (vda1, vda2).
	Number int `json:"number"`
	// Type is the partition type GUID.
	Type GUID `json:"type"`
	// GUID is the partition's unique GUID.
	GUID GUID `json:"guid"`
	// Name is the GPT partition name (what the kernel shows as PARTNAME).
	Name string `json:"name"`
	// FirstLBA and LastLBA are its first and last sector, inclusive.
	FirstLBA uint64 `json:"firstLBA"`
	LastLBA  uint64 `json:"lastLBA"`
}

// Offset is the partition's start in bytes.
func (p Partition) Offset() int64 { return int64(p.FirstLBA) * SectorSize }

// Size is the partition's length in bytes.
func (p Partition) Size() int64 { return int64(p.LastLBA-p.FirstLBA+1) * SectorSize }

// Table is a disk's partition table.
type Table struct {
	// DiskGUID identifies the disk.
	DiskGUID GUID `json:"diskGUID"`
	// Sectors is the disk's size in sectors.
	Sectors uint64 `json:"sectors"`
	// Partitions are the used entries, by number.
	Partitions []Partition `json:"partitions"`
}

// firstUsable and lastUsable are the sectors partitions may use: after the primary GPT,
// before the backup.
func firstUsable() uint64 { return 2 + gptEntrySects }

func (t Table) lastUsable() uint64 { return t.Sectors - 2 - gptEntrySects }

// Partition returns the partition named name.
func (t Table) Partition(name string) (Partition, bool) {
	for _, p := range t.Partitions {
		if p.Name == name {
			return p, true
		}
	}
	return Partition{}, false
}

func (t Table) validate() error {
	if t.Sectors < 2*(2+gptEntrySects)+1 {
		return fmt.Errorf("gpt: disk of %d sectors is too small for a partition table", t.Sectors)
	}
	for i, p := range t.Partitions {
		switch {
		case p.Number < 1 || p.Number > gptEntries:
			return fmt.Errorf("gpt: partition %q: number %d outside 1..%d", p.Name, p.Number, gptEntries)
		case p.Type == GUID{}:
			return fmt.Errorf("gpt: partition %d: no type GUID (the zero type marks an unused entry)", p.Number)
		case len(utf16.Encode([]rune(p.Name))) > gptNameLen:
			return fmt.Errorf("gpt: partition %d: name %q is longer than %d UTF-16 units", p.Number, p.Name, gptNameLen)
		case p.FirstLBA < firstUsable() || p.LastLBA > t.lastUsable() || p.LastLBA < p.FirstLBA:
			return fmt.Errorf("gpt: partition %d: sectors %d-%d outside the usable %d-%d",
				p.Number, p.FirstLBA, p.LastLBA, firstUsable(), t.lastUsable())
		}
		for _, q := range t.Partitions[:i] {
			if q.Number == p.Number {
				return fmt.Errorf("gpt: partition number %d used twice", p.Number)
			}
			if p.FirstLBA <= q.LastLBA && q.FirstLBA <= p.LastLBA {
				return fmt.Errorf("gpt: partitions %d and %d overlap", q.Number, p.Number)
			}
		}
	}
	return nil
}

// WriteTable writes the protective MBR, the primary and the backup GPT of t to a disk of
// t.Sectors sectors. It writes only the table's sectors: the partitions' data is left as
// it is.
func WriteTable(w io.WriterAt, t Table) error {
	if err := t.validate(); err != nil {
		return err
	}
	entries := make([]byte, gptEntries*gptEntrySize)
	for _, p := range t.Partitions {
		e := entries[(p.Number-1)*gptEntrySize:][:gptEntrySize]
		typ, id := p.Type.encode(), p.GUID.encode()
		copy(e[0:16], typ[:])
		copy(e[16:32], id[:])
		binary.LittleEndian.PutUint64(e[32:], p.FirstLBA)
		binary.LittleEndian.PutUint64(e[40:], p.LastLBA)
		// Attributes (e[48:56]) stay 0: firmware needs none of them to boot the ESP.
		for i, u := range utf16.Encode([]rune(p.Name)) {
			binary.LittleEndian.PutUint16(e[56+2*i:], u)
		}
	}
	last := t.Sectors - 1
	entriesCRC := crc32.ChecksumIEEE(entries)
	primary := t.header(1, last, 2, entriesCRC)
	backup := t.header(last, 1, last-gptEntrySects, entriesCRC)
	for _, s := range []struct {
		lba  uint64
		data []byte
	}{
		{0, protectiveMBR(t.Sectors)},
		{1, primary},
		{2, entries},
		{last - gptEntrySects, entries},
		{last, backup},
	} {
		if _, err := w.WriteAt(s.data, int64(s.lba)*SectorSize); err != nil {
			return fmt.Errorf("gpt: write LBA %d: %w", s.lba, err)
		}
	}
	return nil
}

// header is one GPT header sector.
func (t Table) header(my, alternate, entriesLBA uint64, entriesCRC uint32) []byte {
	h := make([]byte, SectorSize)
	copy(h, gptSignature)
	binary.LittleEndian.PutUint32(h[8:], gptRevision)
	binary.LittleEndian.PutUint32(h[12:], gptHeaderSize)
	binary.LittleEndian.PutUint64(h[24:], my)
	binary.LittleEndian.PutUint64(h[32:], alternate)
	binary.LittleEndian.PutUint64(h[40:], firstUsable())
	binary.LittleEndian.PutUint64(h[48:], t.lastUsable())
	disk := t.DiskGUID.encode()
	copy(h[56:72], disk[:])
	binary.LittleEndian.PutUint64(h[72:], entriesLBA)
	binary.LittleEndian.PutUint32(h[80:], gptEntries)
	binary.LittleEndian.PutUint32(h[84:], gptEntrySize)
	binary.LittleEndian.PutUint32(h[88:], entriesCRC)
	// The header's CRC covers its 92 bytes with the CRC field itself zero.
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:gptHeaderSize]))
	return h
}

// protectiveMBR marks the whole disk as one partition of type 0xEE, so that MBR-only tools
// see a disk in use rather than an empty one.
func protectiveMBR(sectors uint64) []byte {
	m := make([]byte, SectorSize)
	e := m[446:462]
	// CHS 0/0/2 at the start; the end is the largest CHS value, as the specification
	// allows for every disk too big for CHS (all of them here).
	e[1], e[2], e[3] = 0x00, 0x02, 0x00
	e[4] = mbrTypeGPTProt
	e[5], e[6], e[7] = 0xFF, 0xFF, 0xFF
	binary.LittleEndian.PutUint32(e[8:], 1)
	binary.LittleEndian.PutUint32(e[12:], uint32(min(sectors-1, 0xFFFFFFFF)))
	m[510], m[511] = 0x55, 0xAA
	return m
}

// ErrNoGPT is returned by ReadTable for a disk without a valid GUID partition table.
var ErrNoGPT = errors.New("no valid GPT")

// ReadTable reads the partition table of a disk of size bytes and checks it: the
// protective MBR, both headers and both entry arrays with their CRC32s, which must agree.
// A disk whose backup does not match its primary is refused, not repaired: the image
// builder wrote both, so a difference means the image is damaged.
func ReadTable(r io.ReaderAt, size int64) (Table, error) {
	if size%SectorSize != 0 || size < SectorSize*(2*(2+gptEntrySects)+1) {
		return Table{}, fmt.Errorf("disk of %d bytes: not a whole number of sectors large enough for a GPT: %w", size, ErrNoGPT)
	}
	t := Table{Sectors: uint64(size / SectorSize)}
	last := t.Sectors - 1
	mbr := make([]byte, SectorSize)
	if _, err := r.ReadAt(mbr, 0); err != nil {
		return Table{}, fmt.Errorf("gpt: read MBR: %w", err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xAA || mbr[446+4] != mbrTypeGPTProt {
		return Table{}, fmt.Errorf("LBA 0: no protective MBR (boot signature %02x%02x, first type %02x): %w",
			mbr[510], mbr[511], mbr[446+4], ErrNoGPT)
	}
	primary, pEntries, err := readHeader(r, 1, last)
	if err != nil {
		return Table{}, err
	}
	backup, bEntries, err := readHeader(r, last, 1)
	if err != nil {
		return Table{}, err
	}
	if !bytes.Equal(pEntries, bEntries) {
		return Table{}, fmt.Errorf("the backup partition entries differ from the primary ones: %w", ErrNoGPT)
	}
	for _, f := range []struct {
		name string
		off  int
	}{{"first usable LBA", 40}, {"last usable LBA", 48}, {"disk GUID", 56}} {
		if !bytes.Equal(primary[f.off:f.off+8], backup[f.off:f.off+8]) {
			return Table{}, fmt.Errorf("the backup header's %s differs from the primary's: %w", f.name, ErrNoGPT)
		}
	}
	if got, want := binary.LittleEndian.Uint64(primary[40:]), firstUsable(); got != want {
		return Table{}, fmt.Errorf("first usable LBA %d, want %d: %w", got, want, ErrNoGPT)
	}
	if got, want := binary.LittleEndian.Uint64(primary[48:]), t.lastUsable(); got != want {
		return Table{}, fmt.Errorf("last usable LBA %d, want %d for a disk of %d sectors: %w", got, want, t.Sectors, ErrNoGPT)
	}
	t.DiskGUID = decodeGUID(primary[56:72])
	t.Partitions = parseEntries(pEntries)
	if err := t.validate(); err != nil {
		return Table{}, fmt.Errorf("%w: %w", err, ErrNoGPT)
	}
	return t, nil
}

// ReadPrimaryTable reads the primary GPT alone, checked by its CRC32s: what the kernel
// reads on a disk the image was copied onto, whose backup GPT is where the image ended,
// not at the end of the disk. Sectors is left 0: the disk's size is not read.
func ReadPrimaryTable(r io.ReaderAt) (Table, error) {
	h, entries, err := readHeader(r, 1, anyLBA)
	if err != nil {
		return Table{}, err
	}
	return Table{DiskGUID: decodeGUID(h[56:72]), Partitions: parseEntries(entries)}, nil
}

// parseEntries returns the used entries of a partition entry array.
func parseEntries(entries []byte) []Partition {
	var parts []Partition
	for i := range gptEntries {
		e := entries[i*gptEntrySize:][:gptEntrySize]
		typ := decodeGUID(e[0:16])
		if typ == (GUID{}) {
			continue
		}
		units := make([]uint16, 0, gptNameLen)
		for j := 0; j < gptNameLen; j++ {
			u := binary.LittleEndian.Uint16(e[56+2*j:])
			if u == 0 {
				break
			}
			units = append(units, u)
		}
		parts = append(parts, Partition{
			Number: i + 1, Type: typ, GUID: decodeGUID(e[16:32]), Name: string(utf16.Decode(units)),
			FirstLBA: binary.LittleEndian.Uint64(e[32:]), LastLBA: binary.LittleEndian.Uint64(e[40:]),
		})
	}
	return parts
}

// anyLBA, as readHeader's alternate, accepts the alternate the header names.
const anyLBA = ^uint64(0)

// readHeader reads and checks the header at lba, which must point at alternate (unless
// that is anyLBA), and returns it with its entry array.
func readHeader(r io.ReaderAt, lba, alternate uint64) (header, entries []byte, err error) {
	which := "primary"
	if lba != 1 {
		which = "backup"
	}
	h := make([]byte, SectorSize)
	if _, err := r.ReadAt(h, int64(lba)*SectorSize); err != nil {
		return nil, nil, fmt.Errorf("gpt: read the %s header: %w", which, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s GPT header (LBA %d): %s: %w", which, lba, fmt.Sprintf(format, args...), ErrNoGPT)
	}
	if !bytes.Equal(h[:8], gptSignature) {
		return nil, nil, bad("signature %q", h[:8])
	}
	if size := binary.LittleEndian.Uint32(h[12:]); size != gptHeaderSize {
		return nil, nil, bad("header size %d, want %d", size, gptHeaderSize)
	}
	sum := binary.LittleEndian.Uint32(h[16:])
	check := bytes.Clone(h[:gptHeaderSize])
	binary.LittleEndian.PutUint32(check[16:], 0)
	if got := crc32.ChecksumIEEE(check); got != sum {
		return nil, nil, bad("header CRC32 %08x, computed %08x", sum, got)
	}
	if my, alt := binary.LittleEndian.Uint64(h[24:]), binary.LittleEndian.Uint64(h[32:]); my != lba || (alternate != anyLBA && alt != alternate) {
		return nil, nil, bad("says it is at LBA %d with its alternate at %d, want %d and %d", my, alt, lba, alternate)
	}
	if n, size := binary.LittleEndian.Uint32(h[80:]), binary.LittleEndian.Uint32(h[84:]); n != gptEntries || size != gptEntrySize {
		return nil, nil, bad("%d entries of %d bytes, want %d of %d", n, size, gptEntries, gptEntrySize)
	}
	entries = make([]byte, gptEntries*gptEntrySize)
	at := binary.LittleEndian.Uint64(h[72:])
	if _, err := r.ReadAt(entries, int64(at)*SectorSize); err != nil {
		return nil, nil, fmt.Errorf("gpt: read the %s partition entries at LBA %d: %w", which, at, err)
	}
	if sum, got := binary.LittleEndian.Uint32(h[88:]), crc32.ChecksumIEEE(entries); got != sum {
		return nil, nil, bad("partition entries CRC32 %08x, computed %08x", sum, got)
	}
	return h, entries, nil
}
