package fat_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgegate/edgegate/firmware/fat"
)

// disk is a scenario's image file, damaged with raw writes.
type disk struct {
	t    *testing.T
	tb   toolbox
	path string
	f    *os.File
	g    geometry
	// reads are contents the damage decided files must read back with, by path.
	reads map[string][]byte
}

// slotLoc is where an entry's short entry and long-name slots are.
type slotLoc struct {
	off int64
	lfn []int64
}

func (d *disk) read(off int64, n int) []byte {
	d.t.Helper()
	b := make([]byte, n)
	if _, err := d.f.ReadAt(b, off); err != nil {
		d.t.Fatal(err)
	}
	return b
}

func (d *disk) write(off int64, b []byte) {
	d.t.Helper()
	if _, err := d.f.WriteAt(b, off); err != nil {
		d.t.Fatal(err)
	}
}

func (d *disk) chain(p string) []uint32 {
	d.t.Helper()
	c := d.tb.chain(d.t, d.path, p)
	if len(c) == 0 {
		d.t.Fatalf("%s has no clusters", p)
	}
	return c
}

// setFAT writes cluster cl's entry in every FAT copy, as a torn update of both would.
func (d *disk) setFAT(cl, v uint32) {
	for k := int64(0); k < d.g.numFATs; k++ {
		d.write(d.g.fatOffset(k, cl), binary.LittleEndian.AppendUint32(nil, v))
	}
}

func (d *disk) fatEntry(k int64, cl uint32) uint32 {
	return binary.LittleEndian.Uint32(d.read(d.g.fatOffset(k, cl), 4))
}

// entry finds a file's or directory's slots in its parent by its first cluster.
func (d *disk) entry(p string) slotLoc {
	d.t.Helper()
	first := d.chain(p)[0]
	var slots []int64
	for _, cl := range d.chain(path.Dir(p)) {
		for i := int64(0); i < d.g.clusterSize; i += 32 {
			slots = append(slots, d.g.clusterOffset(cl)+i)
		}
	}
	for i, off := range slots {
		s := d.read(off, 32)
		if s[0] == 0 || s[0] == 0xE5 || s[11] == 0x0F {
			continue
		}
		if uint32(binary.LittleEndian.Uint16(s[20:]))<<16|uint32(binary.LittleEndian.Uint16(s[26:])) != first {
			continue
		}
		loc := slotLoc{off: off}
		for j := i - 1; j >= 0; j-- {
			if s := d.read(slots[j], 32); s[0] == 0xE5 || s[11] != 0x0F {
				break
			}
			loc.lfn = append(loc.lfn, slots[j])
		}
		return loc
	}
	d.t.Fatalf("no entry for %s in %s", p, path.Dir(p))
	return slotLoc{}
}

// point makes an entry use another one's chain and size, as a rename over an existing
// file does before the old entry is removed.
func (d *disk) point(p, to string) {
	src := d.read(d.entry(to).off, 32)
	dst := d.entry(p).off
	d.write(dst+20, src[20:22])
	d.write(dst+26, src[26:32])
}

func (d *disk) setSize(p string, size uint32) {
	d.write(d.entry(p).off+28, binary.LittleEndian.AppendUint32(nil, size))
}

func (d *disk) deleteEntry(p string) {
	d.write(d.entry(p).off, []byte{0xE5})
}

// writeImage writes the fixture to a file, sparse: most of it is zeros.
func writeImage(t testing.TB, fx *fixture) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "esp.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(len(fx.image))); err != nil {
		t.Fatal(err)
	}
	for _, off := range fx.chunks {
		if _, err := f.WriteAt(fx.image[off:off+imageChunk], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// found is a finding as the scenarios expect it: what, and where.
type found struct {
	Problem fat.Problem
	Path    string
}

func founds(r fat.Report) []found {
	var fs []found
	for _, f := range r.Findings {
		fs = append(fs, found{f.Problem, f.Path})
	}
	return sortFounds(fs)
}

func sortFounds(fs []found) []found {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b found) int {
		if a.Problem != b.Problem {
			return int(a.Problem - b.Problem)
		}
		return strings.Compare(a.Path, b.Path)
	})
	return fs
}

// volume-wide findings the scenarios expect.
var (
	freeCount = found{fat.FreeCount, ""}
	lost      = found{fat.LostClusters, ""}
)

const (
	entries  = "/loader/entries"
	edgeA    = "/EFI/edgegate/a"
	vmlinuz  = "/EDGEGATE/A/vmlinuz"
	initrdA  = "/EDGEGATE/A/initramfs.cpio.gz"
	initrdB  = "/EDGEGATE/B/initramfs.cpio.gz"
	initrdBn = "/EDGEGATE/B/initramfs.cpio.gz.new"
	tmpConf  = entries + "/.tmp-edgegate-b+3.conf-12345"
	realConf = entries + "/edgegate-b+3.conf"
	confB    = entries + "/edgegate-b+2-1.conf"
)

type scenario struct {
	name   string
	damage func(d *disk)
	loser  func(a, b fat.Entry) bool
	want   []found
	// after turns the files of the fixture into what must read back after the repair.
	after func(files map[string][]byte)
}

func gone(paths ...string) func(map[string][]byte) {
	return func(files map[string][]byte) {
		for _, p := range paths {
			delete(files, p)
		}
	}
}

// renamed is the files after a torn rename of from over to was repaired: to has from's
// content, from is gone.
func renamed(from, to string) func(map[string][]byte) {
	return func(files map[string][]byte) {
		files[to] = files[from]
		delete(files, from)
	}
}

var scenarios = []scenario{
	{
		name:   "clean volume",
		damage: func(d *disk) {},
	},
	{
		// The power-cut case: the directory entry is durable, the FAT chain is not.
		name: "entry on free clusters",
		damage: func(d *disk) {
			for _, cl := range d.chain(initrdBn) {
				d.setFAT(cl, 0)
			}
		},
		want:  []found{{fat.FreeCluster, initrdBn}, freeCount},
		after: gone(initrdBn),
	},
	{
		name:   "temporary boot entry on a free cluster",
		damage: func(d *disk) { d.setFAT(d.chain(tmpConf)[0], 0) },
		want:   []found{{fat.FreeCluster, tmpConf}, freeCount},
		after:  gone(tmpConf),
	},
	{
		name:   "chain cut short by a free cluster",
		damage: func(d *disk) { d.setFAT(d.chain(initrdA)[100], 0) },
		want:   []found{{fat.FreeCluster, initrdA}, lost, freeCount},
		after:  gone(initrdA),
	},
	{
		name:   "chain ends before the size",
		damage: func(d *disk) { d.setFAT(d.chain(vmlinuz)[9], 0x0FFFFFFF) },
		want:   []found{{fat.ShortChain, vmlinuz}, lost, freeCount},
		after:  gone(vmlinuz),
	},
	{
		name: "chain loops",
		damage: func(d *disk) {
			c := d.chain(vmlinuz)
			d.setFAT(c[20], c[5])
		},
		want:  []found{{fat.Loop, vmlinuz}, lost, freeCount},
		after: gone(vmlinuz),
	},
	{
		name:   "chain runs into a bad cluster",
		damage: func(d *disk) { d.setFAT(d.chain(vmlinuz)[3], 0x0FFFFFF7) },
		want:   []found{{fat.BadCluster, vmlinuz}, lost, freeCount},
		after:  gone(vmlinuz),
	},
	{
		name: "start cluster out of range",
		damage: func(d *disk) {
			off := d.entry(edgeA + "/s513").off
			d.write(off+20, []byte{0xFF, 0x0F})
		},
		want:  []found{{fat.OutOfRange, edgeA + "/s513"}, lost, freeCount},
		after: gone(edgeA + "/s513"),
	},
	{
		// The other power-cut case: the FAT chain is durable, the directory entry not.
		name:   "lost chain",
		damage: func(d *disk) { d.deleteEntry(vmlinuz) },
		want:   []found{lost, freeCount},
		after:  gone(vmlinuz),
	},
	{
		// A rename over an existing file points the existing entry at the new chain and
		// then deletes the temporary entry; power failed in between.
		name:   "torn rename, temporary name first",
		damage: func(d *disk) { d.point(realConf, tmpConf) },
		want:   []found{{fat.CrossLink, tmpConf}, lost, freeCount},
		after:  renamed(tmpConf, realConf),
	},
	{
		name:   "torn rename, real name first",
		damage: func(d *disk) { d.point(initrdB, initrdBn) },
		want:   []found{{fat.CrossLink, initrdBn}, lost, freeCount},
		after:  renamed(initrdBn, initrdB),
	},
	{
		name:   "shared chain, the entry met first keeps it",
		damage: func(d *disk) { d.point(edgeA+"/s513", edgeA+"/s512") },
		want:   []found{{fat.CrossLink, edgeA + "/s513"}, lost, freeCount},
		after:  gone(edgeA + "/s513"),
	},
	{
		name:   "shared chain, Options.Loser decides",
		damage: func(d *disk) { d.point(edgeA+"/s513", edgeA+"/s512") },
		loser:  func(a, b fat.Entry) bool { return a.Path == edgeA+"/s512" && b.Path == edgeA+"/s513" },
		want:   []found{{fat.CrossLink, edgeA + "/s512"}, lost, freeCount},
		after:  renamed(edgeA+"/s512", edgeA+"/s513"),
	},
	{
		name: "directory points at its ancestor",
		damage: func(d *disk) {
			src := d.read(d.entry("/EFI").off, 32)
			off := d.entry(edgeA).off
			d.write(off+20, src[20:22])
			d.write(off+26, src[26:28])
		},
		want:  []found{{fat.CrossLink, edgeA}, lost, freeCount},
		after: gone(edgeA+"/one", edgeA+"/s512", edgeA+"/s513", edgeA+"/empty"),
	},
	{
		// The directory met first loses (Options.Loser says so) after its subtree was
		// walked: everything below it goes with it.
		name: "directory loses a cross-link to a later file",
		damage: func(d *disk) {
			dir := d.entry(edgeA).off
			conf := d.entry("/loader/loader.conf").off
			d.write(conf+20, d.read(dir+20, 2))
			d.write(conf+26, d.read(dir+26, 2))
			d.write(conf+28, binary.LittleEndian.AppendUint32(nil, 512))
			d.reads["/loader/loader.conf"] = d.read(d.g.clusterOffset(d.chain(edgeA)[0]), 512)
		},
		loser: func(a, b fat.Entry) bool { return a.Dir },
		want:  []found{{fat.CrossLink, edgeA}, lost, freeCount},
		after: gone(edgeA+"/one", edgeA+"/s512", edgeA+"/s513", edgeA+"/empty"),
	},
	{
		// A truncate whose entry is durable and whose freed clusters are not.
		name:   "chain longer than the size",
		damage: func(d *disk) { d.setSize(vmlinuz, 1000) },
		want:   []found{{fat.LongChain, vmlinuz}, freeCount},
		after:  func(files map[string][]byte) { files[vmlinuz] = files[vmlinuz][:1000] },
	},
	{
		// Another file already took clusters behind the cut (met first in the walk, and
		// itself over-long): each chain is cut, neither loses a cluster the other owns.
		name: "chain longer than the size, the tail another file's",
		damage: func(d *disk) {
			c := d.chain(vmlinuz)
			d.setSize(vmlinuz, 1000)
			off := d.entry(edgeA + "/s513").off
			d.write(off+20, binary.LittleEndian.AppendUint16(nil, uint16(c[10]>>16)))
			d.write(off+26, binary.LittleEndian.AppendUint16(nil, uint16(c[10])))
			data := d.read(d.g.clusterOffset(c[10]), 1024)
			if c[11] != c[10]+1 {
				d.t.Fatal("vmlinuz is not contiguous")
			}
			d.reads[edgeA+"/s513"] = data[:513]
		},
		want:  []found{{fat.LongChain, vmlinuz}, {fat.LongChain, edgeA + "/s513"}, lost, freeCount},
		after: func(files map[string][]byte) { files[vmlinuz] = files[vmlinuz][:1000] },
	},
	{
		name:   "empty file with a cluster",
		damage: func(d *disk) { d.setSize(edgeA+"/one", 0) },
		want:   []found{{fat.LongChain, edgeA + "/one"}, lost, freeCount},
		after:  func(files map[string][]byte) { files[edgeA+"/one"] = []byte{} },
	},
	{
		name: "FAT 2 differs from FAT 1",
		damage: func(d *disk) {
			d.write(d.g.fatStart+d.g.fatSize+sector, make([]byte, 3*sector))
		},
		want: []found{{fat.FATMismatch, ""}},
	},
	{
		name: "FAT 1 damaged, FAT 2 intact",
		damage: func(d *disk) {
			d.write(d.g.fatOffset(0, d.chain(initrdBn)[0]), []byte{0, 0, 0, 0})
		},
		want:  []found{{fat.FreeCluster, initrdBn}, {fat.FATMismatch, ""}, lost, freeCount},
		after: gone(initrdBn),
	},
	{
		name:   "dirty flag",
		damage: func(d *disk) { d.write(0x41, []byte{d.read(0x41, 1)[0] | 1}) },
		want:   []found{{fat.Dirty, ""}},
	},
	{
		name: "clean-shutdown bit of FAT[1] clear",
		damage: func(d *disk) {
			for k := int64(0); k < d.g.numFATs; k++ {
				d.write(d.g.fatOffset(k, 1), binary.LittleEndian.AppendUint32(nil, d.fatEntry(k, 1)&^0x08000000))
			}
		},
		want: []found{{fat.Dirty, ""}},
	},
	{
		name:   "FSInfo free count wrong",
		damage: func(d *disk) { d.write(d.g.fsInfo+488, binary.LittleEndian.AppendUint32(nil, 12345)) },
		want:   []found{freeCount},
	},
	{
		// The short entry of a long name was deleted, its long-name slots were not.
		name:   "orphaned long name",
		damage: func(d *disk) { d.deleteEntry(confB) },
		want:   []found{{fat.OrphanLFN, entries}, lost, freeCount},
		after:  gone(confB),
	},
	{
		// Linux and fsck.fat read past a 0x00 slot; UEFI firmware and mtools stop there and
		// would not see the boot loader.
		name: "end-of-directory mark before live entries",
		damage: func(d *disk) {
			off := d.entry("/EFI/BOOT/BOOTX64.EFI").off - 32
			if d.read(off, 1)[0] != 0xE5 {
				d.t.Fatalf("the slot before BOOTX64.EFI is not old.efi's deleted entry")
			}
			d.write(off, []byte{0})
		},
		want: []found{{fat.EndMarker, "/EFI/BOOT"}},
	},
	{
		name:   "root directory's cluster marked free",
		damage: func(d *disk) { d.setFAT(2, 0) },
		want:   []found{{fat.RootChain, "/"}},
	},
}

// TestRepairScenarios damages the fixture the ways a power cut does, one way at a time,
// and checks that Repair reports the damage, that fsck.fat finds nothing afterwards, that
// every surviving file reads back byte-identical with mtools, that a second Repair finds
// nothing and writes nothing, and that DryRun plans the same and changes no byte.
func TestRepairScenarios(t *testing.T) {
	fx := esp(t)
	tb := needTools(t)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			img := writeImage(t, fx)
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			d := &disk{t: t, tb: tb, path: img, f: f, g: readGeometry(t, f), reads: map[string][]byte{}}
			sc.damage(d)
			size := int64(len(fx.image))
			opts := fat.Options{Loser: sc.loser}

			// Device has no way to change a byte but WriteAt.
			dry := opts
			dry.DryRun = true
			dryDev := &countingFile{File: f}
			planned, err := fat.Repair(dryDev, size, dry)
			if err != nil {
				t.Fatalf("dry run: %v", err)
			}
			if dryDev.writes != 0 || dryDev.syncs != 0 {
				t.Fatalf("the dry run made %d writes, %d syncs", dryDev.writes, dryDev.syncs)
			}
			checked, err := fat.Check(io.NewSectionReader(f, 0, size), size, opts)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if diff := cmp.Diff(planned, checked); diff != "" {
				t.Errorf("Check's report differs from the dry run's (-dry run +Check):\n%s", diff)
			}

			dev := &countingFile{File: f}
			rep, err := fat.Repair(dev, size, opts)
			if err != nil {
				t.Fatalf("Repair: %v", err)
			}
			for _, x := range rep.Findings {
				t.Log(x)
			}
			t.Log(rep)
			if diff := cmp.Diff(sortFounds(sc.want), founds(rep)); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(withoutDryRun(planned), withoutDryRun(rep)); diff != "" {
				t.Errorf("the dry run's report differs from the repair's (-dry +repair):\n%s", diff)
			}
			if len(sc.want) == 0 && (dev.writes != 0 || dev.syncs != 0) {
				t.Errorf("a clean volume got %d writes, %d syncs", dev.writes, dev.syncs)
			}

			tb.fsckClean(t, img)
			want := maps.Clone(fx.files)
			if sc.after != nil {
				sc.after(want)
			}
			maps.Copy(want, d.reads)
			if diff := cmp.Diff(summarize(want), summarize(tb.readTree(t, img))); diff != "" {
				t.Errorf("files read back (-want +got):\n%s", diff)
			}

			again := &countingFile{File: f}
			rep2, err := fat.Repair(again, size, opts)
			if err != nil || !rep2.Clean() || again.writes != 0 || again.syncs != 0 || rep2.SectorsWritten != 0 {
				t.Errorf("second Repair: %v, %d writes, %d syncs, findings %v", err, again.writes, again.syncs, rep2.Findings)
			}
		})
	}
}

// withoutDryRun is a report with what legitimately differs between a dry run and a
// repair taken out.
func withoutDryRun(r fat.Report) fat.Report {
	r.DryRun = false
	r.Findings = slices.Clone(r.Findings)
	for i := range r.Findings {
		r.Findings[i].DryRun = false
	}
	return r
}

// summarize makes file contents comparable in a readable diff: size and digest.
func summarize(files map[string][]byte) map[string]string {
	s := map[string]string{}
	for p, b := range files {
		s[p] = fmt.Sprintf("%d bytes %x", len(b), sha256.Sum256(b))
	}
	return s
}

// TestRepairFourKiBSectors repairs a volume with 4096-byte sectors (4 KiB native disks):
// the FAT, directory and summary writes must patch whole sectors of that size.
func TestRepairFourKiBSectors(t *testing.T) {
	tb := needTools(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "4k.img")
	tb.run(t, "mkfs.vfat", "-F", "32", "-S", "4096", "-s", "1", "-C", img, "270000")
	tb.run(t, "mmd", "-i", img, "::EFI", "::EFI/edgegate")
	files := map[string][]byte{
		"/EFI/edgegate/initramfs.cpio.gz.new": bytes.Repeat([]byte("edgegate"), 40000),
		"/EFI/edgegate/entry.conf":            []byte("title edgegate\n"),
	}
	for p, b := range files {
		src := filepath.Join(dir, "src")
		if err := os.WriteFile(src, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tb.run(t, "mcopy", "-i", img, src, "::"+p)
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := &disk{t: t, tb: tb, path: img, f: f, g: readGeometry(t, f)}
	for _, cl := range d.chain("/EFI/edgegate/initramfs.cpio.gz.new") {
		d.setFAT(cl, 0)
	}
	d.write(0x41, []byte{1})
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := fat.Repair(&countingFile{File: f}, st.Size(), fat.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []found{{fat.FreeCluster, "/EFI/edgegate/initramfs.cpio.gz.new"}, freeCount, {fat.Dirty, ""}}
	if diff := cmp.Diff(sortFounds(want), founds(rep)); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	tb.fsckClean(t, img)
	delete(files, "/EFI/edgegate/initramfs.cpio.gz.new")
	if diff := cmp.Diff(summarize(files), summarize(tb.readTree(t, img))); diff != "" {
		t.Errorf("files read back (-want +got):\n%s", diff)
	}
	again := &countingFile{File: f}
	if rep, err := fat.Repair(again, st.Size(), fat.Options{}); err != nil || !rep.Clean() || again.writes != 0 {
		t.Errorf("second Repair: %v, %d writes, findings %v", err, again.writes, rep.Findings)
	}
}
