package fat_test

import (
	"io"
	"os"
	"slices"

	"github.com/edgegate/edgegate/firmware/fat"
)

var (
	_ fat.Device = (*memDevice)(nil)
	_ fat.Device = (*countingFile)(nil)
)

const sector = 512

// memDevice is a volume in memory: writes go to an overlay of 512-byte sectors over a
// shared image, so that hundreds of damaged copies of one image cost little. It keeps a
// log of its writes, each with the number of Syncs before it, to replay a power cut.
type memDevice struct {
	base  []byte
	over  map[int64][]byte
	log   []sectorWrite
	syncs int
}

type sectorWrite struct {
	sector int64
	data   []byte
	epoch  int // Syncs before the write
}

func newMemDevice(base []byte) *memDevice {
	return &memDevice{base: base, over: map[int64][]byte{}}
}

// clone is a copy of the device's content, without its log.
func (d *memDevice) clone() *memDevice {
	c := newMemDevice(d.base)
	for s, b := range d.over {
		c.over[s] = slices.Clone(b)
	}
	return c
}

func (d *memDevice) size() int64 { return int64(len(d.base)) }

func (d *memDevice) sector(s int64) []byte {
	if b, ok := d.over[s]; ok {
		return b
	}
	return d.base[s*sector : (s+1)*sector]
}

func (d *memDevice) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= d.size() {
			return n, io.EOF
		}
		n += copy(p[n:], d.sector(pos / sector)[pos%sector:])
	}
	return n, nil
}

func (d *memDevice) WriteAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		if pos >= d.size() {
			return n, io.ErrShortWrite
		}
		s := pos / sector
		b := slices.Clone(d.sector(s))
		n += copy(b[pos%sector:], p[n:])
		d.over[s] = b
		d.log = append(d.log, sectorWrite{sector: s, data: slices.Clone(b), epoch: d.syncs})
	}
	return n, nil
}

func (d *memDevice) Sync() error {
	d.syncs++
	return nil
}

// countingFile is an image file that counts the writes and syncs Repair makes. Its Sync
// issues no fsync: the tools that check the image read the page cache.
type countingFile struct {
	*os.File
	writes, syncs int
}

func (f *countingFile) WriteAt(p []byte, off int64) (int, error) {
	f.writes++
	return f.File.WriteAt(p, off)
}

func (f *countingFile) Sync() error {
	f.syncs++
	return nil
}
