package update

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/edgegate/edgegate/firmware/layout"
)

// ESP is the mounted EFI system partition. It stays read-only while nothing is written:
// FAT has no journal, and a file system that is not being written cannot be damaged by a
// power cut.
type ESP interface {
	// Root is the mount point.
	Root() string
	// Writable runs fn with the partition writable, then flushes it to the disk and makes
	// it read-only again.
	Writable(fn func() error) error
}

// DirESP is an ESP that is a plain directory, always writable: a test's, or a host's whose
// partition is mounted read-write by someone else.
type DirESP string

// Root is the directory.
func (d DirESP) Root() string { return string(d) }

// Writable runs fn.
func (d DirESP) Writable(fn func() error) error { return fn() }

// slotEntry is one entry file on the ESP.
type slotEntry struct {
	file  string // its name in layout.EntriesDir
	entry layout.Entry
}

// readEntries reads the slot entries. Files that are no slot entry are left alone (an
// operator's own entries); slot entries that do not parse are returned as problems by name:
// they are not booted as ours, and the updater never writes over them silently.
func readEntries(root string) (entries []slotEntry, problems []string, err error) {
	dir := filepath.Join(root, layout.EntriesDir)
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s: %w", layout.EntriesDir, err)
	}
	names := make([]string, 0, len(des))
	for _, de := range des {
		names = append(names, de.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		if _, _, err := layout.ParseFileName(name); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", layout.EntryPath(name), err))
			continue
		}
		e, err := layout.ParseEntry(name, b)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", layout.EntriesDir, err))
			continue
		}
		entries = append(entries, slotEntry{file: name, entry: e})
	}
	return entries, problems, nil
}

// entryFor returns the slot's entry, if any; with several (a power cut between writing a
// new one and removing the old), the one systemd-boot would pick.
func entryFor(entries []slotEntry, slot layout.Slot) (slotEntry, bool) {
	var mine []layout.Entry
	byName := map[string]slotEntry{}
	for _, e := range entries {
		if e.entry.Slot == slot {
			mine = append(mine, e.entry)
			byName[e.entry.FileName()] = e
		}
	}
	if len(mine) == 0 {
		return slotEntry{}, false
	}
	return byName[layout.Order(mine)[0].FileName()], true
}

// writeFileSync writes data to path through a temporary file in the same directory, syncs
// it, renames it into place and syncs the directory: after a power cut the file is either
// the old one or the new one, whole.
func writeFileSync(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		// FAT has no modes; Chmod there succeeds or is unsupported, never a real problem.
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir flushes a directory's entries (a rename or removal in it) to the disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// renameSync renames a file within one directory and syncs the directory.
func renameSync(dir, from, to string) error {
	if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
		return err
	}
	return syncDir(dir)
}

// removeSync removes files from one directory (missing ones are fine) and syncs it.
func removeSync(dir string, names ...string) error {
	for _, n := range names {
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return syncDir(dir)
}
