package nbddisk

import (
	"fmt"
	"os"
)

// SectorSize is the device's sector: the unit a write is torn at, and the alignment of
// every cached write.
const SectorSize = 512

// PendingWrite is a write the disk has acknowledged but not yet made durable: it sits in the
// volatile cache until a flush, and a cut may lose it, keep it or tear it.
type PendingWrite struct {
	// Seq numbers the writes since power-on, from 1, FUA writes included.
	Seq uint64
	// Offset is the byte offset of its first sector.
	Offset int64
	// Data is the whole sectors it wrote: a write that began or ended inside a sector holds
	// the rest of that sector as the disk showed it then. Shared with the cache: read only.
	Data []byte
	// dead marks sectors a later FUA write put on the file: the device's cache no longer
	// holds this older copy, so no cut may write it over the newer one.
	dead []bool
}

// Sectors is the number of sectors the write covers.
func (w PendingWrite) Sectors() int { return len(w.Data) / SectorSize }

func (w PendingWrite) String() string {
	if w.Sectors() == 1 {
		return fmt.Sprintf("#%d at sector %d", w.Seq, w.Offset/SectorSize)
	}
	return fmt.Sprintf("#%d at sectors %d-%d", w.Seq, w.Offset/SectorSize, w.Offset/SectorSize+int64(w.Sectors())-1)
}

// sectorRef finds the newest cached copy of one sector: sector i of a pending write.
type sectorRef struct {
	w *PendingWrite
	i int
}

// cache is the device's volatile write cache over its backing file. Reads see the cache
// over the file; only a flush, a FUA write or a cut writes the file. Not safe for
// concurrent use: the Disk's mutex guards it.
type cache struct {
	file    *os.File
	size    int64
	seq     uint64
	pending []*PendingWrite     // in arrival order
	newest  map[int64]sectorRef // sector number -> newest cached copy
	bytes   int64               // cached bytes not superseded
}

func newCache(f *os.File, size int64) *cache {
	return &cache{file: f, size: size, newest: map[int64]sectorRef{}}
}

// read returns length bytes at off as the disk shows them: the file, and over it the
// newest cached copy of each sector.
func (c *cache) read(off int64, length int) ([]byte, error) {
	b := make([]byte, length)
	if _, err := c.file.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("read at %d: %w", off, err)
	}
	if len(c.newest) == 0 {
		return b, nil
	}
	for s := off / SectorSize; s*SectorSize < off+int64(length); s++ {
		ref, ok := c.newest[s]
		if !ok {
			continue
		}
		sector := ref.w.Data[ref.i*SectorSize : (ref.i+1)*SectorSize]
		// Copy the overlap of sector s with [off, off+length).
		lo, hi := max(s*SectorSize, off), min((s+1)*SectorSize, off+int64(length))
		copy(b[lo-off:hi-off], sector[lo-s*SectorSize:hi-s*SectorSize])
	}
	return b, nil
}

// write takes data at off into the cache, widened to whole sectors; with fua it goes to the
// file instead, and is durable when write returns.
func (c *cache) write(off int64, data []byte, fua bool) error {
	first := off / SectorSize
	end := (off + int64(len(data)) + SectorSize - 1) / SectorSize
	whole := data
	if off%SectorSize != 0 || len(data)%SectorSize != 0 {
		var err error
		if whole, err = c.read(first*SectorSize, int((end-first)*SectorSize)); err != nil {
			return err
		}
		copy(whole[off-first*SectorSize:], data)
	} else {
		whole = append([]byte(nil), data...)
	}
	c.seq++
	if fua {
		if _, err := c.file.WriteAt(whole, first*SectorSize); err != nil {
			return fmt.Errorf("FUA write at %d: %w", first*SectorSize, err)
		}
		if err := c.file.Sync(); err != nil {
			return fmt.Errorf("FUA write: %w", err)
		}
		c.supersede(first, end)
		return nil
	}
	w := &PendingWrite{Seq: c.seq, Offset: first * SectorSize, Data: whole, dead: make([]bool, end-first)}
	c.pending = append(c.pending, w)
	for s := first; s < end; s++ {
		c.newest[s] = sectorRef{w, int(s - first)}
	}
	c.bytes += int64(len(whole))
	return nil
}

// supersede drops every cached copy of sectors [first, end): the file holds newer data.
func (c *cache) supersede(first, end int64) {
	for s := first; s < end; s++ {
		delete(c.newest, s)
	}
	for _, w := range c.pending {
		ws := w.Offset / SectorSize
		for s := max(first, ws); s < min(end, ws+int64(w.Sectors())); s++ {
			if !w.dead[s-ws] {
				w.dead[s-ws] = true
				c.bytes -= SectorSize
			}
		}
	}
}

// flush writes every cached write to the file in arrival order, then syncs the file.
func (c *cache) flush() error {
	for _, w := range c.pending {
		if err := c.apply(w, nil); err != nil {
			return err
		}
	}
	if err := c.file.Sync(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	c.drop()
	return nil
}

// apply writes the listed sectors of w (all of them for nil) to the file, skipping
// superseded ones; runs of adjacent sectors go in one write.
func (c *cache) apply(w *PendingWrite, sectors []int) error {
	if sectors == nil {
		sectors = make([]int, w.Sectors())
		for i := range sectors {
			sectors[i] = i
		}
	}
	for i := 0; i < len(sectors); {
		if w.dead[sectors[i]] {
			i++
			continue
		}
		j := i + 1
		for j < len(sectors) && sectors[j] == sectors[j-1]+1 && !w.dead[sectors[j]] {
			j++
		}
		lo, hi := sectors[i]*SectorSize, (sectors[j-1]+1)*SectorSize
		if _, err := c.file.WriteAt(w.Data[lo:hi], w.Offset+int64(lo)); err != nil {
			return fmt.Errorf("write back #%d: %w", w.Seq, err)
		}
		i = j
	}
	return nil
}

// drop empties the cache: after a flush, or at a cut once the kept writes are on the file.
func (c *cache) drop() {
	c.pending = nil
	clear(c.newest)
	c.bytes = 0
}

// snapshot returns the pending writes, oldest first, for a policy or a test to look at.
func (c *cache) snapshot() []PendingWrite {
	out := make([]PendingWrite, len(c.pending))
	for i, w := range c.pending {
		out[i] = *w
	}
	return out
}
