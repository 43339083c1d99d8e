package fat_test

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/firmware/fat"
)

// TestRefusesWhatItDoesNotUnderstand gives Repair boot sectors it must not guess about
// and checks that it refuses with ErrUnsupported and writes nothing: PID 1 then logs the
// error and mounts the ESP as it is.
func TestRefusesWhatItDoesNotUnderstand(t *testing.T) {
	fx := smallESP(t)
	total := binary.LittleEndian.Uint32(fx.image[32:])
	le16 := func(off int, v uint16) func(b []byte) {
		return func(b []byte) { binary.LittleEndian.PutUint16(b[off:], v) }
	}
	le32 := func(off int, v uint32) func(b []byte) {
		return func(b []byte) { binary.LittleEndian.PutUint32(b[off:], v) }
	}
	for _, tc := range []struct {
		name string
		boot func(b []byte)
		dev  func(d *memDevice)
		size int64
	}{
		{name: "no 0x55AA signature", boot: func(b []byte) { b[510] = 0 }},
		{name: "256 bytes per sector", boot: le16(11, 256)},
		{name: "8192 bytes per sector", boot: le16(11, 8192)},
		{name: "768 bytes per sector", boot: le16(11, 768)},
		{name: "no sectors per cluster", boot: func(b []byte) { b[13] = 0 }},
		{name: "3 sectors per cluster", boot: func(b []byte) { b[13] = 3 }},
		{name: "no reserved sectors", boot: le16(14, 0)},
		{name: "no FAT", boot: func(b []byte) { b[16] = 0 }},
		{name: "3 FATs", boot: func(b []byte) { b[16] = 3 }},
		{name: "media byte", boot: func(b []byte) { b[21] = 0x12 }},
		{name: "FAT16 root directory", boot: le16(17, 512)},
		{name: "FAT16 FAT size", boot: le16(22, 200)},
		{name: "FAT size 0", boot: le32(36, 0)},
		{name: "FAT too small for the clusters", boot: le32(36, 10)},
		{name: "FATs larger than the volume", boot: le32(36, total)},
		{name: "FAT32 version 1.0", boot: le16(42, 0x100)},
		{name: "volume larger than the device", boot: le32(32, 2*total)},
		{name: "root cluster 0", boot: le32(44, 0)},
		{name: "root cluster beyond the volume", boot: le32(44, total)},
		{name: "device smaller than the volume", size: int64(len(fx.image)) / 2},
		{name: "device smaller than a sector", size: 100},
		{name: "garbage boot sector", boot: func(b []byte) {
			rng := rand.New(rand.NewPCG(7, 7))
			for i := range 510 {
				b[i] = byte(rng.Uint32())
			}
		}},
		{name: "root directory starts with a bad cluster", dev: func(d *memDevice) {
			g := readGeometry(t, d)
			for k := int64(0); k < g.numFATs; k++ {
				s := g.fatOffset(k, 2) / sector
				b := bytesOf(d.sector(s))
				binary.LittleEndian.PutUint32(b[8:], 0x0FFFFFF7)
				d.over[s] = b
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newMemDevice(fx.image)
			if tc.boot != nil {
				b := bytesOf(dev.sector(0))
				tc.boot(b)
				dev.over[0] = b
			}
			if tc.dev != nil {
				tc.dev(dev)
			}
			size := tc.size
			if size == 0 {
				size = dev.size()
			}
			rep, err := fat.Repair(dev, size, fat.Options{})
			if !errors.Is(err, fat.ErrUnsupported) {
				t.Fatalf("Repair = %v, %v; want ErrUnsupported", err, rep.Findings)
			}
			t.Log(err)
			if len(dev.log) != 0 || dev.syncs != 0 {
				t.Errorf("Repair refused but wrote %d sectors, synced %d times", len(dev.log), dev.syncs)
			}
			if _, err := fat.Check(dev, size, fat.Options{}); !errors.Is(err, fat.ErrUnsupported) {
				t.Errorf("Check = %v; want ErrUnsupported", err)
			}
		})
	}
}

// TestFSInfoLeftAlone checks that an FSInfo sector Repair cannot trust is reported and
// never written, while a volume without one is fine.
func TestFSInfoLeftAlone(t *testing.T) {
	fx := smallESP(t)
	g := readGeometry(t, newMemDevice(fx.image))
	for _, tc := range []struct {
		name  string
		edit  func(d *memDevice)
		found bool
	}{
		{"wrong signature", func(d *memDevice) {
			b := bytesOf(d.sector(g.fsInfo / sector))
			b[0] = 'X'
			binary.LittleEndian.PutUint32(b[488:], 12345) // a wrong count it must not fix
			d.over[g.fsInfo/sector] = b
		}, true},
		{"sector number outside the reserved sectors", func(d *memDevice) {
			b := bytesOf(d.sector(0))
			binary.LittleEndian.PutUint16(b[48:], 0x50)
			d.over[0] = b
		}, true},
		{"no FSInfo sector", func(d *memDevice) {
			b := bytesOf(d.sector(0))
			binary.LittleEndian.PutUint16(b[48:], 0xFFFF)
			d.over[0] = b
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newMemDevice(fx.image)
			tc.edit(dev)
			rep, err := fat.Repair(dev, dev.size(), fat.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.found {
				if f := rep.Findings; len(f) != 1 || f[0].Problem != fat.FSInfoInvalid || f[0].Action != fat.LeaveAlone {
					t.Errorf("findings %v; want one FSInfoInvalid, left alone", rep.Findings)
				}
			} else if !rep.Clean() {
				t.Errorf("findings %v; want none", rep.Findings)
			}
			if len(dev.log) != 0 {
				t.Errorf("wrote %d sectors", len(dev.log))
			}
		})
	}
}

// TestRefusesDeepTrees checks the bound on directory depth: a tree deeper than any ESP
// is refused with ErrLimit before anything is written, rather than walked without end.
func TestRefusesDeepTrees(t *testing.T) {
	tb := needTools(t)
	img := filepath.Join(t.TempDir(), "deep.img")
	tb.run(t, "mkfs.vfat", "-F", "32", "-S", "512", "-s", "1", "-C", img, "36864")
	args := []string{"-i", img}
	p := ""
	for range 70 {
		p += "/d"
		args = append(args, "::"+p)
	}
	tb.run(t, "mmd", args...)
	tb.fsckClean(t, img)
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	dev := newMemDevice(b)
	_, err = fat.Repair(dev, dev.size(), fat.Options{})
	if !errors.Is(err, fat.ErrLimit) || !strings.Contains(err.Error(), "/d/d/d") {
		t.Fatalf("Repair = %v; want ErrLimit naming the path", err)
	}
	if len(dev.log) != 0 {
		t.Errorf("wrote %d sectors", len(dev.log))
	}
}

// TestFindingString shows the log lines PID 1 writes.
func TestFindingString(t *testing.T) {
	for _, tc := range []struct {
		f    fat.Finding
		want string
	}{
		{fat.Finding{Problem: fat.FreeCluster, Path: "/EDGEGATE/B/initramfs.cpio.gz.new", Cluster: 82655, Detail: "cluster 82655 is free, 0 clusters into the chain; size 13797600 bytes", Action: fat.DeleteEntry},
			"/EDGEGATE/B/initramfs.cpio.gz.new: free cluster in chain (cluster 82655 is free, 0 clusters into the chain; size 13797600 bytes): entry deleted"},
		{fat.Finding{Problem: fat.LostClusters, Cluster: 300, Detail: "54657 clusters allocated but used by no entry, the first 300", Action: fat.FreeClusters, DryRun: true},
			"lost clusters (54657 clusters allocated but used by no entry, the first 300): would free clusters"},
		{fat.Finding{Problem: fat.BadName, Path: "/loader/a\nb", Action: fat.DeleteEntry},
			`"/loader/a\nb": bad short name: entry deleted`},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("String() = %q\nwant       %q", got, tc.want)
		}
	}
}
