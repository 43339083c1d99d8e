package provision

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
)

// Target is a disk that holds the image's partitions: an image file, or a whole-disk block
// device the image was written to.
type Target struct {
	Path string
	// Device says Path is a block device.
	Device bool
	// Data is the data partition.
	Data image.Partition
}

// Open finds the data partition of the disk at path (its primary GPT: an image written to
// a larger disk has its backup GPT where the image ended) and checks that it holds ext4. A
// block device must be a whole disk that nothing uses: no mounted partition, no holder
// (device mapper, RAID), so that the machine's own disk is never written.
func Open(path string, sys System) (Target, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Target{}, err
	}
	t := Target{Path: path}
	switch {
	case st.Mode().IsRegular():
	case st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0:
		t.Device = true
		if err := sys.checkUnused(path); err != nil {
			return Target{}, err
		}
	default:
		return Target{}, fmt.Errorf("%s: neither an image file nor a block device", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return Target{}, err
	}
	defer f.Close()
	table, err := image.ReadPrimaryTable(f)
	if err != nil {
		return Target{}, fmt.Errorf("%s: no edgegate disk image on it (make image, then write disk.img to it): %w", path, err)
	}
	data, ok := table.Partition(layout.DataPartName)
	if !ok {
		return Target{}, fmt.Errorf("%s: no partition named %s", path, layout.DataPartName)
	}
	magic := make([]byte, 2)
	if _, err := f.ReadAt(magic, data.Offset()+1024+56); err != nil {
		return Target{}, fmt.Errorf("%s: partition %d: %w", path, data.Number, err)
	}
	if binary.LittleEndian.Uint16(magic) != 0xEF53 {
		return Target{}, fmt.Errorf("%s: partition %d (%s) holds no ext4 file system", path, data.Number, layout.DataPartName)
	}
	t.Data = data
	return t, nil
}

// fsSpec is how e2fsprogs reaches the file system: the disk with the partition's offset
// as an I/O option.
func (t Target) fsSpec() string {
	return fmt.Sprintf("%s?offset=%d", t.Path, t.Data.Offset())
}

// Write writes files into the data partition's root directory, replacing files of the
// same names (nothing else on the partition changes: the gateway's cache and update
// history stay), owned by root with each file's mode, and reads every file back.
func (t Target) Write(ctx context.Context, files []File) error {
	debugfs, err := image.LookTool("debugfs")
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "provision")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var script strings.Builder
	for _, f := range files {
		if strings.ContainsAny(f.Name, "/ \t\n") || f.Name == "" {
			return fmt.Errorf("file name %q: want a plain name", f.Name)
		}
		src := filepath.Join(tmp, f.Name)
		if err := os.WriteFile(src, f.Data, 0o600); err != nil {
			return err
		}
		// rm fails harmlessly when the file is not there yet.
		fmt.Fprintf(&script, "rm /%s\nwrite %s /%s\nsif /%s mode 0%o\nsif /%s uid 0\nsif /%s gid 0\n",
			f.Name, src, f.Name, f.Name, 0o100000|uint32(f.Mode.Perm()), f.Name, f.Name)
	}
	scriptFile := filepath.Join(tmp, "script")
	if err := os.WriteFile(scriptFile, []byte(script.String()), 0o600); err != nil {
		return err
	}
	// debugfs exits 0 whatever its commands did: the read-back is the check.
	if out, err := exec.CommandContext(ctx, debugfs, "-w", "-f", scriptFile, t.fsSpec()).CombinedOutput(); err != nil {
		return fmt.Errorf("debugfs: %w: %s", err, bytes.TrimSpace(out))
	}
	for _, f := range files {
		got, mode, err := t.read(ctx, debugfs, f.Name)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, f.Data) || mode != f.Mode.Perm() {
			return fmt.Errorf("%s: read back %d bytes with mode %o, wrote %d bytes with mode %o", f.Name, len(got), mode, len(f.Data), f.Mode.Perm())
		}
	}
	return nil
}

// statMode matches debugfs stat's mode field.
var statMode = regexp.MustCompile(`Mode:\s+(0?[0-7]+)`)

// read returns a file of the partition's root and its permission bits.
func (t Target) read(ctx context.Context, debugfs, name string) ([]byte, os.FileMode, error) {
	data, err := exec.CommandContext(ctx, debugfs, "-R", "cat /"+name, t.fsSpec()).Output()
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s back: %w", name, err)
	}
	out, err := exec.CommandContext(ctx, debugfs, "-R", "stat /"+name, t.fsSpec()).Output()
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s back: %w", name, err)
	}
	m := statMode.FindSubmatch(out)
	if m == nil {
		return nil, 0, fmt.Errorf("reading %s back: not on the partition", name)
	}
	mode, _ := strconv.ParseUint(string(m[1]), 8, 32)
	return data, os.FileMode(mode).Perm(), nil
}

// System is where the host's view of its disks is read: "/" but in tests.
type System struct {
	Root string
}

func (s System) path(p string) string {
	if s.Root == "" {
		return p
	}
	return filepath.Join(s.Root, p)
}

// checkUnused refuses a block device that is a partition, or whose disk has a mounted
// partition, a swap area or a holder: the host's own disk, or one in use.
func (s System) checkUnused(dev string) error {
	real, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return err
	}
	name := filepath.Base(real)
	sysDir := s.path(filepath.Join("/sys/class/block", name))
	if _, err := os.Stat(filepath.Join(sysDir, "partition")); err == nil {
		return fmt.Errorf("%s is a partition: give the whole disk", dev)
	}
	// The disk and its partitions, by major:minor.
	numbers := map[string]string{}
	add := func(dir, node string) {
		if b, err := os.ReadFile(filepath.Join(dir, "dev")); err == nil {
			numbers[strings.TrimSpace(string(b))] = node
		}
		if holders, err := os.ReadDir(filepath.Join(dir, "holders")); err == nil && len(holders) > 0 {
			numbers["holder:"+node] = holders[0].Name()
		}
	}
	add(sysDir, name)
	entries, err := os.ReadDir(sysDir)
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(sysDir, e.Name(), "partition")); err == nil {
			add(filepath.Join(sysDir, e.Name()), e.Name())
		}
	}
	for k, v := range numbers {
		if node, ok := strings.CutPrefix(k, "holder:"); ok {
			return fmt.Errorf("%s is in use: %s is held by %s (device mapper, RAID or LVM)", dev, node, v)
		}
	}
	mounts, err := os.Open(s.path("/proc/self/mountinfo"))
	if err != nil {
		return err
	}
	defer mounts.Close()
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 4 {
			if node, ok := numbers[f[2]]; ok {
				return fmt.Errorf("%s is in use: %s is mounted on %s", dev, node, f[4])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	swaps, err := os.ReadFile(s.path("/proc/swaps"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, line := range strings.Split(string(swaps), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 0 {
			for _, node := range numbers {
				if filepath.Base(f[0]) == node {
					return fmt.Errorf("%s is in use: %s is a swap area", dev, node)
				}
			}
		}
	}
	return nil
}

// WriteImage copies the disk image at src onto the block device t (whole, zeros included:
// the file systems rely on what the image leaves zero) and flushes it. The caller opened
// t with Open's checks.
func WriteImage(src string, dev string, sys System) error {
	if err := sys.checkUnused(dev); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dev, os.O_WRONLY|os.O_EXCL, 0)
	if err != nil {
		return err
	}
	defer out.Close()
	size, err := out.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if size < st.Size() {
		return fmt.Errorf("%s holds %d bytes, the image %d", dev, size, st.Size())
	}
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("writing %s: %w", dev, err)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("flushing %s: %w", dev, err)
	}
	return out.Close()
}
