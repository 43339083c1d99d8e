package image

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/firmware/layout"
)

// ESP is a disk image's EFI system partition, read with mtools at the partition's offset
// without mounting it: how a test looks at what the boot loader and the firmware did to
// the disk of a VM that has stopped.
type ESP struct {
	// Disk is the disk image file.
	Disk string
	// Partition is the ESP's entry in the disk's partition table.
	Partition Partition
}

// OpenESP reads the disk image's partition table and finds the partition named
// layout.ESPPartName.
func OpenESP(disk string) (ESP, error) {
	t, err := ReadDiskTable(disk)
	if err != nil {
		return ESP{}, err
	}
	p, ok := t.Partition(layout.ESPPartName)
	if !ok {
		return ESP{}, fmt.Errorf("%s: no partition named %s", disk, layout.ESPPartName)
	}
	if p.Type != ESPType {
		return ESP{}, fmt.Errorf("%s: partition %d (%s) has type %s, not the ESP's %s", disk, p.Number, p.Name, p.Type, ESPType)
	}
	return ESP{Disk: disk, Partition: p}, nil
}

// ReadDiskTable reads and checks the partition table of a disk image file.
func ReadDiskTable(disk string) (Table, error) {
	f, err := os.Open(disk)
	if err != nil {
		return Table{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Table{}, err
	}
	t, err := ReadTable(f, st.Size())
	if err != nil {
		return Table{}, fmt.Errorf("%s: %w", disk, err)
	}
	return t, nil
}

// image is mtools' name of the partition: the file and the byte offset.
func (e ESP) image() string {
	return fmt.Sprintf("%s@@%d", e.Disk, e.Partition.Offset())
}

// Files lists everything on the partition, sorted: paths relative to its root with forward
// slashes, directories ending in a slash.
func (e ESP) Files(ctx context.Context) ([]string, error) {
	out, err := run(ctx, "mdir", "-/", "-b", "-i", e.image(), "::/")
	if err != nil {
		return nil, fmt.Errorf("%s: ESP: %w", e.Disk, err)
	}
	var files []string
	for _, l := range strings.Split(string(out), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "::/"); ok && p != "" {
			files = append(files, p)
		}
	}
	slices.Sort(files)
	return files, nil
}

// ReadFile returns the content of the file at name (relative to the root, forward slashes).
func (e ESP) ReadFile(ctx context.Context, name string) ([]byte, error) {
	out, err := run(ctx, "mtype", "-i", e.image(), "::/"+strings.TrimPrefix(path.Clean(name), "/"))
	if err != nil {
		return nil, fmt.Errorf("%s: ESP: %w", e.Disk, err)
	}
	return out, nil
}

// Entries returns the file names in layout.EntriesDir, sorted.
func (e ESP) Entries(ctx context.Context) ([]string, error) {
	files, err := e.Files(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		if dir, name := path.Split(f); dir == layout.EntriesDir+"/" && name != "" {
			names = append(names, name)
		}
	}
	return names, nil
}
