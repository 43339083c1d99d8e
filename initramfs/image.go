// Package initramfs builds edgegate's initramfs: a gzip-compressed newc cpio archive with
// the static edgegate binary as /init, the board's kernel modules with their
// dependencies resolved from the modules' own metadata, the module load order, the
// board name and optional config, manifests and test binary (see the firmware contract
// in notes/firmware-contract.md). Nothing else: no shell, no busybox.
//
// Builds are reproducible: the same inputs give the same bytes, because entries are
// sorted, every timestamp, owner and inode number is zero, and the gzip header carries
// no name and no time.
package initramfs

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/u-root/mkuimage/cpio"
)

// Image is the content of an initramfs: regular files at absolute paths. Directories are
// implied by the files' paths.
type Image struct {
	files map[string]file
}

type file struct {
	data []byte
	perm fs.FileMode
}

// NewImage returns an empty image.
func NewImage() *Image {
	return &Image{files: map[string]file{}}
}

// Add puts a regular file at name (an absolute, clean path). Adding a path twice is an
// error: two sources for one file is a build mistake, not something to settle silently.
func (im *Image) Add(name string, data []byte, perm fs.FileMode) error {
	if !path.IsAbs(name) || path.Clean(name) != name || name == "/" {
		return fmt.Errorf("initramfs path %q: want an absolute clean file path", name)
	}
	if perm&^fs.ModePerm != 0 {
		return fmt.Errorf("initramfs path %s: mode %v: want permission bits only", name, perm)
	}
	if _, dup := im.files[name]; dup {
		return fmt.Errorf("initramfs path %s: added twice", name)
	}
	for dir := path.Dir(name); dir != "/"; dir = path.Dir(dir) {
		if _, clash := im.files[dir]; clash {
			return fmt.Errorf("initramfs path %s: %s is a file", name, dir)
		}
	}
	for other := range im.files {
		if strings.HasPrefix(other, name+"/") {
			return fmt.Errorf("initramfs path %s: is a directory of %s", name, other)
		}
	}
	im.files[name] = file{data: data, perm: perm}
	return nil
}

// Paths returns the image's file paths, sorted.
func (im *Image) Paths() []string {
	paths := make([]string, 0, len(im.files))
	for p := range im.files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return paths
}

// WriteTo writes the image as a gzip-compressed newc cpio archive.
func (im *Image) WriteTo(w io.Writer) (int64, error) {
	counter := &countingWriter{w: w}
	// A zero gzip.Header: no file name, no modification time. The default level: the
	// best one takes three times as long for 0.3% less.
	zw := gzip.NewWriter(counter)
	rw := cpio.Newc.Writer(zw)
	for _, rec := range im.records() {
		if err := rw.WriteRecord(cpio.MakeReproducible(rec)); err != nil {
			return counter.n, fmt.Errorf("initramfs: %s: %w", rec.Name, err)
		}
	}
	if err := cpio.WriteTrailer(rw); err != nil {
		return counter.n, fmt.Errorf("initramfs: %w", err)
	}
	if err := zw.Close(); err != nil {
		return counter.n, fmt.Errorf("initramfs: %w", err)
	}
	return counter.n, nil
}

// Bytes returns the archive WriteTo writes.
func (im *Image) Bytes() ([]byte, error) {
	var buf bytes.Buffer
	if _, err := im.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// records returns a directory record for every parent directory and a file record for
// every file, sorted by path. The kernel's unpacker does not create missing parent
// directories, and a sorted path list puts each directory before what it holds.
func (im *Image) records() []cpio.Record {
	dirs := map[string]bool{}
	for name := range im.files {
		for dir := path.Dir(name); dir != "/"; dir = path.Dir(dir) {
			dirs[dir] = true
		}
	}
	paths := im.Paths()
	for dir := range dirs {
		paths = append(paths, dir)
	}
	slices.Sort(paths)
	recs := make([]cpio.Record, 0, len(paths))
	for _, p := range paths {
		name := strings.TrimPrefix(p, "/")
		if dirs[p] {
			recs = append(recs, cpio.Directory(name, 0o755))
			continue
		}
		f := im.files[p]
		recs = append(recs, cpio.StaticRecord(f.data, cpio.Info{Name: name, Mode: cpio.S_IFREG | uint64(f.perm)}))
	}
	return recs
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
