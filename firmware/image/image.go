// Package image builds edgegate's bootable disk images: a GPT disk whose first partition
// is the EFI system partition of firmware/layout (systemd-boot as the removable-media boot
// loader, loader.conf, the two firmware slots and their Boot Loader Specification entries)
// and whose second is the persistent data partition (ext4).
//
// Nothing is mounted and nothing needs root: the partition table is written here, the FAT
// file system is made and filled with dosfstools and mtools and the ext4 one with mke2fs,
// each in a file of its own that is then copied into the disk at its partition's offset,
// skipping zeros so that the image stays sparse.
package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
)

// Partition sizes and alignment.
const (
	// DefaultESPSize holds two slots of about 27 MB each today (a 14 MB kernel, a 12.5 MB
	// initramfs) with room for both to grow to three times that.
	DefaultESPSize = 192 << 20
	// DefaultDataSize holds the daemon's state, the configuration and the update history.
	DefaultDataSize = 64 << 20
	// Align is where partitions start and what their sizes are multiples of: 1 MiB, the
	// alignment every partitioning tool uses, right for any flash erase block.
	Align = 1 << 20
	// MinESPSize keeps the ESP FAT32 (the UEFI specification's file system for it): with
	// 512-byte clusters FAT32 needs at least 65525 clusters, 32 MiB, and two slots need more.
	MinESPSize = 64 << 20
	// MinDataSize leaves room for ext4's journal and some state.
	MinDataSize = 16 << 20
)

// Spec is a disk image to build.
type Spec struct {
	// Board gives the architecture (the boot loader's file name) and the kernel arguments
	// every entry starts with (board.KernelArgs).
	Board board.Board
	// BootLoader is systemd-boot for the board's architecture (FetchBootLoader).
	BootLoader BootLoader
	// ESPSize and DataSize are the partitions' sizes in bytes, multiples of Align; zero
	// means DefaultESPSize and DefaultDataSize.
	ESPSize, DataSize int64
	// DataDir, when set, is a directory whose content becomes the data partition's root
	// (mke2fs -d): a gateway's configuration, for example.
	DataDir string
	// A and B are the slots' contents; nil leaves a slot empty, without an entry. A
	// gateway's first image has A only.
	A, B *Slot
}

// Slot is what one slot holds and how its entry boots it.
type Slot struct {
	// Bundle is a signed update bundle (firmware/bundle) whose kernel, initramfs,
	// manifest and signature go into the slot, after it was verified with Keys and checked
	// to be for the board. Its version names the firmware.
	Bundle string
	Keys   []bundle.PublicKey
	// Kernel and Initramfs are raw files to use instead of a bundle (test images: a slot
	// that was never verified, with no manifest); Firmware then names the version shown in
	// the entry's title.
	Kernel, Initramfs, Firmware string
	// Generation is the entry's version: the slot with the highest boots first. At least 1.
	Generation uint64
	// Tries is the entry's boot counter (systemd-boot's +LEFT-DONE); nil for a committed
	// slot, +0-DONE for a slot on trial (layout.Trial), which boots only when the one-shot
	// variable names it. Tries left are refused: such an entry boots by default, and a
	// torn rename of its counter can boot it forever (firmware/layout).
	Tries *layout.Tries
	// Options are kernel arguments added after the board's; layout.SlotParam follows them.
	Options []string
}

// Info is what an image holds, as Build wrote it (mkimage's image.json).
type Info struct {
	Board string `json:"board"`
	// Size is the disk's size in bytes.
	Size       int64      `json:"size"`
	Table      Table      `json:"table"`
	BootLoader BootLoader `json:"bootLoader"`
	// BootPath is the boot loader's path on the ESP.
	BootPath string     `json:"bootPath"`
	Slots    []SlotInfo `json:"slots"`
}

// SlotInfo is one slot Build filled.
type SlotInfo struct {
	// Entry is the slot's entry, EntryFile its file name and EntryText its content as
	// written (what image.json shows: layout.Entry has no JSON form of its own).
	Entry     layout.Entry `json:"-"`
	EntryFile string       `json:"entryFile"`
	EntryText string       `json:"entry"`
	// Manifest is the bundle's verified manifest; nil for a slot from raw files.
	Manifest *bundle.Manifest `json:"manifest,omitempty"`
}

// Build writes the image described by spec to out, replacing out only once the image is
// complete.
func Build(ctx context.Context, log *slog.Logger, out string, spec Spec) (Info, error) {
	if spec.ESPSize == 0 {
		spec.ESPSize = DefaultESPSize
	}
	if spec.DataSize == 0 {
		spec.DataSize = DefaultDataSize
	}
	if err := spec.validate(); err != nil {
		return Info{}, err
	}
	bootPath, err := BootPath(spec.Board.Arch)
	if err != nil {
		return Info{}, err
	}
	table, err := plan(spec.ESPSize, spec.DataSize)
	if err != nil {
		return Info{}, err
	}
	// The work files go beside out, on the same file system, so the image moves into
	// place with a rename.
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".mkimage-")
	if err != nil {
		return Info{}, fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(tmp)

	info := Info{Board: spec.Board.Name, Size: int64(table.Sectors) * SectorSize, Table: table,
		BootLoader: spec.BootLoader, BootPath: bootPath, Slots: []SlotInfo{}}
	staging := filepath.Join(tmp, "esp")
	if err := copyFile(spec.BootLoader.File, filepath.Join(staging, filepath.FromSlash(bootPath))); err != nil {
		return Info{}, fmt.Errorf("image: boot loader: %w", err)
	}
	if err := writeFile(filepath.Join(staging, filepath.FromSlash(layout.LoaderConfPath)), []byte(layout.LoaderConf)); err != nil {
		return Info{}, err
	}
	if err := os.MkdirAll(filepath.Join(staging, filepath.FromSlash(layout.EntriesDir)), 0o755); err != nil {
		return Info{}, fmt.Errorf("image: %w", err)
	}
	for _, s := range []struct {
		slot    layout.Slot
		content *Slot
	}{{layout.SlotA, spec.A}, {layout.SlotB, spec.B}} {
		// Both slot directories exist, so the updater finds the layout it writes into.
		if err := os.MkdirAll(filepath.Join(staging, filepath.FromSlash(s.slot.Dir())), 0o755); err != nil {
			return Info{}, fmt.Errorf("image: %w", err)
		}
		if s.content == nil {
			continue
		}
		si, err := stageSlot(staging, spec.Board, s.slot, *s.content)
		if err != nil {
			return Info{}, fmt.Errorf("image: slot %s: %w", s.slot, err)
		}
		log.Info("slot", "slot", s.slot, "firmware", si.Entry.Firmware, "entry", si.EntryFile)
		info.Slots = append(info.Slots, si)
	}

	esp, _ := table.Partition(layout.ESPPartName)
	data, _ := table.Partition(layout.DataPartName)
	espImage := filepath.Join(tmp, "esp.img")
	if err := makeESP(ctx, espImage, esp, staging); err != nil {
		return Info{}, err
	}
	dataImage := filepath.Join(tmp, "data.img")
	if err := makeData(ctx, dataImage, data.Size(), spec.DataDir); err != nil {
		return Info{}, err
	}
	disk := filepath.Join(tmp, "disk.img")
	if err := writeDisk(disk, table, map[int]string{esp.Number: espImage, data.Number: dataImage}); err != nil {
		return Info{}, err
	}
	if err := os.Rename(disk, out); err != nil {
		return Info{}, fmt.Errorf("image: %w", err)
	}
	log.Info("disk image written", "file", out, "bytes", info.Size, "boot_loader", spec.BootLoader.Package.Version)
	return info, nil
}

func (s Spec) validate() error {
	if _, err := BootPath(s.Board.Arch); err != nil {
		return fmt.Errorf("image: board %q: %w", s.Board.Name, err)
	}
	if s.BootLoader.File == "" {
		return errors.New("image: no boot loader (FetchBootLoader)")
	}
	if a := s.BootLoader.Package.Arch; a != s.Board.Arch {
		return fmt.Errorf("image: boot loader %s is for %q, board %s is %s", s.BootLoader.File, a, s.Board.Name, s.Board.Arch)
	}
	for _, p := range []struct {
		name      string
		size, min int64
	}{{"ESP", s.ESPSize, MinESPSize}, {"data partition", s.DataSize, MinDataSize}} {
		if p.size < p.min || p.size%Align != 0 {
			return fmt.Errorf("image: %s size %d: want a multiple of %d, at least %d", p.name, p.size, Align, p.min)
		}
	}
	for _, sl := range []struct {
		slot layout.Slot
		s    *Slot
	}{{layout.SlotA, s.A}, {layout.SlotB, s.B}} {
		if sl.s == nil {
			continue
		}
		if err := sl.s.validate(); err != nil {
			return fmt.Errorf("image: slot %s: %w", sl.slot, err)
		}
	}
	return nil
}

func (s Slot) validate() error {
	raw := s.Kernel != "" || s.Initramfs != ""
	switch {
	case s.Bundle != "" && raw:
		return errors.New("both a bundle and raw kernel/initramfs files: give one")
	case s.Bundle != "" && len(s.Keys) == 0:
		return fmt.Errorf("bundle %s: no keys to verify it with", s.Bundle)
	case s.Bundle != "" && s.Firmware != "":
		return fmt.Errorf("bundle %s: the firmware version is the bundle's; Firmware %q is for raw files", s.Bundle, s.Firmware)
	case s.Bundle == "" && (s.Kernel == "" || s.Initramfs == ""):
		return errors.New("want a bundle, or both a kernel and an initramfs")
	case raw && (s.Firmware == "" || strings.ContainsAny(s.Firmware, " \t\n")):
		return fmt.Errorf("firmware %q: raw files need a version for the entry's title, one word", s.Firmware)
	case s.Generation == 0:
		return errors.New("generation 0: want at least 1")
	}
	if t := s.Tries; t != nil && (t.Left != 0 || t.Done < 0 || t.Done > 9999) {
		return fmt.Errorf("tries +%d-%d: want +0 and 0 to 9999 done (a trial slot; tries left would boot by default)", t.Left, t.Done)
	}
	for _, o := range s.Options {
		if o == "" || strings.ContainsAny(o, " \t\n\"") {
			return fmt.Errorf("option %q: want one kernel argument, without spaces or quotes", o)
		}
		if k, _, _ := strings.Cut(o, "="); k == layout.SlotParam {
			return fmt.Errorf("option %q: the builder sets %s to the slot itself", o, layout.SlotParam)
		}
	}
	return nil
}

// stageSlot writes the slot's files and entry into the staging tree of the ESP.
func stageSlot(staging string, b board.Board, slot layout.Slot, s Slot) (SlotInfo, error) {
	dir := filepath.Join(staging, filepath.FromSlash(slot.Dir()))
	si := SlotInfo{}
	firmware := s.Firmware
	if s.Bundle != "" {
		m, err := unpackBundle(dir, b.Name, s.Bundle, s.Keys)
		if err != nil {
			return SlotInfo{}, err
		}
		si.Manifest, firmware = &m, m.Version
	} else {
		for _, f := range []struct{ src, name string }{{s.Kernel, layout.KernelFile}, {s.Initramfs, layout.InitramfsFile}} {
			if err := copyFile(f.src, filepath.Join(dir, f.name)); err != nil {
				return SlotInfo{}, err
			}
		}
	}
	si.Entry = layout.Entry{
		Slot: slot, Tries: s.Tries, Generation: s.Generation, Firmware: firmware,
		Options: layout.WithSlot(append(b.KernelArgs(), s.Options...), slot),
	}
	si.EntryFile, si.EntryText = si.Entry.FileName(), string(si.Entry.Render())
	entry := filepath.Join(staging, filepath.FromSlash(layout.EntryPath(si.EntryFile)))
	if err := writeFile(entry, []byte(si.EntryText)); err != nil {
		return SlotInfo{}, err
	}
	return si, nil
}

// unpackBundle verifies a bundle and writes its parts, manifest and signature into dir.
func unpackBundle(dir, boardName, file string, keys []bundle.PublicKey) (bundle.Manifest, error) {
	f, err := os.Open(file)
	if err != nil {
		return bundle.Manifest{}, fmt.Errorf("bundle: %w", err)
	}
	defer f.Close()
	// Force: an image has no running firmware for the version to be newer than. The
	// board, the key, the signature and the digests are checked all the same.
	r, err := bundle.Open(f, bundle.Policy{Board: boardName, Keys: keys, Force: true})
	if err != nil {
		return bundle.Manifest{}, fmt.Errorf("bundle %s: %w", file, err)
	}
	for _, part := range []struct {
		name string
		copy func(io.Writer) (int64, error)
	}{{layout.KernelFile, r.CopyKernel}, {layout.InitramfsFile, r.CopyInitramfs}} {
		if err := writeWith(filepath.Join(dir, part.name), part.copy); err != nil {
			return bundle.Manifest{}, fmt.Errorf("bundle %s: %w", file, err)
		}
	}
	if err := writeFile(filepath.Join(dir, layout.ManifestFile), r.RawManifest()); err != nil {
		return bundle.Manifest{}, err
	}
	if err := writeFile(filepath.Join(dir, layout.SignatureFile), r.Signature()); err != nil {
		return bundle.Manifest{}, err
	}
	return r.Manifest(), nil
}

// plan lays the two partitions out: the ESP at 1 MiB, the data partition after it, and
// 1 MiB at the end for the backup GPT.
func plan(espSize, dataSize int64) (Table, error) {
	disk, err := NewGUID()
	if err != nil {
		return Table{}, err
	}
	espID, err := NewGUID()
	if err != nil {
		return Table{}, err
	}
	dataID, err := NewGUID()
	if err != nil {
		return Table{}, err
	}
	espFirst := uint64(Align / SectorSize)
	espLast := espFirst + uint64(espSize/SectorSize) - 1
	dataLast := espLast + uint64(dataSize/SectorSize)
	t := Table{
		DiskGUID: disk,
		Sectors:  dataLast + 1 + Align/SectorSize,
		Partitions: []Partition{
			{Number: 1, Type: ESPType, GUID: espID, Name: layout.ESPPartName, FirstLBA: espFirst, LastLBA: espLast},
			{Number: 2, Type: LinuxFilesystemType, GUID: dataID, Name: layout.DataPartName, FirstLBA: espLast + 1, LastLBA: dataLast},
		},
	}
	return t, t.validate()
}

// makeESP makes the FAT32 file system of partition p in file and copies the staging tree
// into it.
func makeESP(ctx context.Context, file string, p Partition, staging string) error {
	if err := sparseFile(file, p.Size()); err != nil {
		return err
	}
	// -h: the sectors before the partition, which the FAT boot sector records; -S: the
	// disk's sector size, whatever the host's default.
	if _, err := run(ctx, "mkfs.vfat", "-F", "32", "-S", fmt.Sprint(SectorSize), "-h", fmt.Sprint(p.FirstLBA),
		"-n", layout.ESPLabel, file); err != nil {
		return fmt.Errorf("image: ESP: %w", err)
	}
	top, err := os.ReadDir(staging)
	if err != nil {
		return fmt.Errorf("image: ESP: %w", err)
	}
	args := []string{"-s", "-Q", "-i", file}
	for _, e := range top {
		args = append(args, filepath.Join(staging, e.Name()))
	}
	if _, err := run(ctx, "mcopy", append(args, "::/")...); err != nil {
		return fmt.Errorf("image: ESP: %w", err)
	}
	for _, dir := range writtenDirs {
		if err := presize(ctx, file, dir); err != nil {
			return fmt.Errorf("image: ESP: %w", err)
		}
	}
	return nil
}

// writtenDirs are the ESP's directories that the updater and systemd-boot write entries
// into after the image is made.
var writtenDirs = []string{"loader", layout.EntriesDir, layout.SlotsDir, layout.SlotA.Dir(), layout.SlotB.Dir()}

// presizeSlots is how many directory entries each of writtenDirs holds before it has to
// grow: a directory that grows takes a new cluster, and its FAT chain and its entries are
// written to different sectors, which a power cut can tear apart (the directory then
// claims a cluster the FAT says is free). A FAT directory never shrinks, so one made this
// large once never grows: a rename or a new entry reuses deleted slots.
const presizeSlots = 64

// presize grows dir to presizeSlots entries: that many empty files with short names are
// copied in and deleted again.
func presize(ctx context.Context, file, dir string) error {
	pads, err := os.MkdirTemp("", "presize-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pads)
	args := []string{"-Q", "-i", file}
	for i := range presizeSlots {
		name := filepath.Join(pads, fmt.Sprintf("PAD%05d.TMP", i))
		if err := os.WriteFile(name, nil, 0o644); err != nil {
			return err
		}
		args = append(args, name)
	}
	target := "::/" + dir + "/"
	if _, err := run(ctx, "mcopy", append(args, target)...); err != nil {
		return fmt.Errorf("presizing %s: %w", dir, err)
	}
	if _, err := run(ctx, "mdel", "-i", file, target+"PAD*.TMP"); err != nil {
		return fmt.Errorf("presizing %s: %w", dir, err)
	}
	return nil
}

// makeData makes the data partition's ext4 file system in file, with dir's content.
func makeData(ctx context.Context, file string, size int64, dir string) error {
	if err := sparseFile(file, size); err != nil {
		return err
	}
	// root_owner: the root directory belongs to root, not to whoever builds the image.
	args := []string{"-q", "-t", "ext4", "-L", layout.DataPartName, "-E", "root_owner=0:0"}
	if dir != "" {
		args = append(args, "-d", dir)
	}
	if _, err := run(ctx, "mke2fs", append(args, file)...); err != nil {
		return fmt.Errorf("image: data partition: %w", err)
	}
	return nil
}

// CreateDisk creates file, which must not exist, as a sparse disk of t.Sectors sectors
// holding the partition table t and nothing else, and returns it open for writing.
func CreateDisk(file string, t Table) (*os.File, error) {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if err := f.Truncate(int64(t.Sectors) * SectorSize); err == nil {
		err = WriteTable(f, t)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("image: %w", err)
	}
	return f, nil
}

// writeDisk writes the partition table and each partition's file system image (by
// partition number) into a new sparse disk image.
func writeDisk(file string, t Table, images map[int]string) error {
	f, err := CreateDisk(file, t)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range t.Partitions {
		if err := copySparse(f, p, images[p.Number]); err != nil {
			return fmt.Errorf("image: partition %d (%s): %w", p.Number, p.Name, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}

// copySparse copies a file system image into partition p of disk, writing only the blocks
// that are not all zeros: the disk was created sparse, so those read as zeros already.
func copySparse(disk *os.File, p Partition, image string) error {
	in, err := os.Open(image)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if st.Size() != p.Size() {
		return fmt.Errorf("%s is %d bytes, the partition %d", image, st.Size(), p.Size())
	}
	buf := make([]byte, 64<<10)
	for off := int64(0); off < st.Size(); {
		n, err := io.ReadFull(in, buf)
		if n > 0 && !allZero(buf[:n]) {
			if _, werr := disk.WriteAt(buf[:n], p.Offset()+off); werr != nil {
				return werr
			}
		}
		off += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func sparseFile(name string, size int64) error {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("image: %w", err)
	}
	return f.Close()
}

func writeFile(name string, data []byte) error {
	return writeWith(name, func(w io.Writer) (int64, error) {
		n, err := w.Write(data)
		return int64(n), err
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeWith(dst, func(w io.Writer) (int64, error) { return io.Copy(w, in) })
}

// writeWith creates name (and its directories) and fills it with fill.
func writeWith(name string, fill func(io.Writer) (int64, error)) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if _, err := fill(f); err != nil {
		f.Close()
		return fmt.Errorf("image: %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	return nil
}
