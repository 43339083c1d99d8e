// Package fat checks and repairs the FAT32 file system of the EFI system partition before
// it is mounted.
//
// The ESP holds the A/B firmware slots and the boot loader's entries, and the updater
// writes it while power may fail. A disk whose write cache loses, keeps or tears unflushed
// sectors in any order leaves directory entries whose cluster chains never became durable,
// chains no entry points to, and entries that share a chain after a torn rename. When
// Linux later deletes or overwrites such a file it frees clusters another file uses or
// that are already free, and the ESP degrades until a slot no longer boots. The initramfs
// has no fsck, so PID 1 calls Repair on the ESP's block device at every boot, before
// mounting it.
//
// Repair is deliberately small: it understands FAT32 only, refuses (writing nothing) any
// boot sector it does not understand, and makes the smallest changes that make the volume
// consistent, in three phases that are each made durable before the next, so that a power
// cut during the repair leaves a state the next run repairs:
//
//  1. directory entries whose chain is broken, or that lose a cross-link, are marked
//     deleted (nothing in the FAT is touched for them: their clusters may be another
//     file's), and orphaned long-name slots are deleted;
//  2. clusters no entry uses are freed and over-long chains are cut, in every FAT copy;
//  3. FSInfo's free count is corrected and the volume's dirty flags are cleared.
package fat

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Device is the volume: a block device or an image file, opened read-write.
type Device interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
}

// ErrUnsupported is returned, with nothing written, for a volume Repair does not
// understand: not FAT32, a geometry that does not fit the device, a root directory that
// starts on a bad cluster.
var ErrUnsupported = errors.New("unsupported volume")

// ErrLimit is returned, with nothing written, when the volume needs more work than a
// consistent ESP ever can: directories nested too deep, too many entries, chains walked
// too often. Garbage on the disk must not hang or exhaust PID 1.
var ErrLimit = errors.New("limit exceeded")

// Limits on the walk. An ESP holds a few dozen files a few directories deep; the limits
// keep the memory for the entries (about 200 bytes each) to a dozen MiB.
const (
	maxDepth   = 64
	maxEntries = 1 << 16
)

// Entry is a directory entry as Options.Loser sees it.
type Entry struct {
	// Path is the entry's path from the root with long names: "/loader/entries/x.conf".
	Path string
	// Name is the last element of Path; ShortName the 8.3 name ("EDGEGA~1.CON").
	Name, ShortName string
	Dir             bool
	Size            uint32
	// Cluster is the first cluster of the entry's chain.
	Cluster  uint32
	Modified time.Time
}

// Options tune Repair.
type Options struct {
	// DryRun writes nothing; the report says what Repair would do.
	DryRun bool
	// Loser decides a cross-link: it reports whether a, the entry the walk met first,
	// gives the shared chain up to b. The loser's entry is deleted. Nil means
	// DefaultLoser. An entry never wins against the root or a directory containing it.
	Loser func(a, b Entry) bool
}

// DefaultLoser makes an entry with a temporary name lose against one without, so that a
// rename torn between creating the new name and deleting the old one keeps the real
// name; otherwise the entry met first keeps the chain.
func DefaultLoser(a, b Entry) bool {
	return Temporary(a.Name) && !Temporary(b.Name)
}

// Temporary reports whether a file name is one of the updater's names for a file being
// written: suffix ".new" or prefix ".tmp-".
func Temporary(name string) bool {
	n := strings.ToLower(name)
	return strings.HasSuffix(n, ".new") || strings.HasPrefix(n, ".tmp-")
}

// Repair checks the FAT32 volume on dev, size bytes long, and repairs what it finds; the
// volume must not be mounted. (Stat reports a block device's size as 0: seek to its end.)
// The error is set when the volume cannot be checked (ErrUnsupported, ErrLimit, a read
// error: nothing was written) or a write failed (the report holds what was found and the
// volume is left in a state the next Repair repairs).
func Repair(dev Device, size int64, opts Options) (Report, error) {
	return run(dev, dev, size, opts)
}

// Check is Repair with DryRun on a device opened read-only.
func Check(r io.ReaderAt, size int64, opts Options) (Report, error) {
	opts.DryRun = true
	return run(r, nil, size, opts)
}

func run(r io.ReaderAt, dev Device, size int64, opts Options) (Report, error) {
	rep := Report{DryRun: opts.DryRun}
	vol, err := readVolume(r, size)
	if err != nil {
		return rep, fmt.Errorf("fat: %w", err)
	}
	rep.Clusters = vol.clusters
	tab, err := readTable(r, vol)
	if err != nil {
		return rep, fmt.Errorf("fat: %w", err)
	}
	c := newChecker(r, vol, tab, opts, &rep)
	if err := c.walk(); err != nil {
		return rep, fmt.Errorf("fat: %w", err)
	}
	p, err := c.plan()
	if err != nil {
		return rep, fmt.Errorf("fat: %w", err)
	}
	w := &writer{r: r, dev: dev, sectorSize: vol.sectorSize, dryRun: opts.DryRun || dev == nil, rep: &rep}
	if err := p.apply(w); err != nil {
		return rep, fmt.Errorf("fat: %w", err)
	}
	return rep, nil
}
