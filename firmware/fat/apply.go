package fat

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"slices"
)

// writer writes whole sectors, and only those whose content changes; under a dry run it
// only counts them.
type writer struct {
	r          io.ReaderAt
	dev        Device
	sectorSize int64
	dryRun     bool
	rep        *Report
	unsynced   bool
}

// apply makes the planned changes phase by phase, each durable before the next begins.
func (p *plan) apply(w *writer) error {
	c := p.c
	if err := w.patch(p.entries); err != nil {
		return fmt.Errorf("directory phase: %w", err)
	}
	if err := w.sync(); err != nil {
		return fmt.Errorf("directory phase: %w", err)
	}
	if err := w.patch(p.slots); err != nil {
		return fmt.Errorf("directory phase: %w", err)
	}
	if err := w.sync(); err != nil {
		return fmt.Errorf("directory phase: %w", err)
	}
	// FAT 1 first: Linux reads only FAT 1, and a copy never gets ahead of it.
	changed := c.fat.changedSectors()
	if err := p.writeFAT(w, 0, changed); err != nil {
		return fmt.Errorf("FAT phase: %w", err)
	}
	if err := w.sync(); err != nil {
		return fmt.Errorf("FAT phase: %w", err)
	}
	for k := 1; k < c.vol.numFATs; k++ {
		sectors := slices.Concat(changed, c.fat.mirrorDiffs[k-1])
		slices.Sort(sectors)
		if err := p.writeFAT(w, k, slices.Compact(sectors)); err != nil {
			return fmt.Errorf("FAT phase: %w", err)
		}
	}
	if err := w.sync(); err != nil {
		return fmt.Errorf("FAT phase: %w", err)
	}
	if p.markClean {
		c.fat.setAll(1, c.fat.planned(1)|cleanShutdown)
		for k := 0; k < c.vol.numFATs; k++ {
			if err := p.writeFAT(w, k, []int64{0}); err != nil {
				return fmt.Errorf("summary phase: %w", err)
			}
		}
	}
	if err := w.patch(p.summary); err != nil {
		return fmt.Errorf("summary phase: %w", err)
	}
	if err := w.sync(); err != nil {
		return fmt.Errorf("summary phase: %w", err)
	}
	return nil
}

// writeFAT writes the planned FAT's sectors to FAT copy k (0 is FAT 1).
func (p *plan) writeFAT(w *writer, k int, sectors []int64) error {
	v := p.c.vol
	for _, s := range sectors {
		if err := w.put(v.fatStart+int64(k)*v.fatSize+s*v.sectorSize, p.c.fat.sector(s)); err != nil {
			return err
		}
	}
	return nil
}

// patch applies edits, none of which crosses a sector boundary, sector by sector.
func (w *writer) patch(edits []edit) error {
	edits = slices.Clone(edits)
	slices.SortStableFunc(edits, func(a, b edit) int { return cmp.Compare(a.off/w.sectorSize, b.off/w.sectorSize) })
	buf := make([]byte, w.sectorSize)
	for i := 0; i < len(edits); {
		sector := edits[i].off / w.sectorSize * w.sectorSize
		if _, err := w.r.ReadAt(buf, sector); err != nil {
			return fmt.Errorf("read sector %d: %w", sector/w.sectorSize, err)
		}
		want := bytes.Clone(buf)
		for ; i < len(edits) && edits[i].off/w.sectorSize*w.sectorSize == sector; i++ {
			copy(want[edits[i].off-sector:], edits[i].data)
		}
		if err := w.write(sector, buf, want); err != nil {
			return err
		}
	}
	return nil
}

// put writes one whole sector at off if it differs from what is there.
func (w *writer) put(off int64, want []byte) error {
	buf := make([]byte, w.sectorSize)
	if _, err := w.r.ReadAt(buf, off); err != nil {
		return fmt.Errorf("read sector %d: %w", off/w.sectorSize, err)
	}
	return w.write(off, buf, want)
}

func (w *writer) write(off int64, have, want []byte) error {
	if bytes.Equal(have, want) {
		return nil
	}
	w.rep.SectorsWritten++
	if w.dryRun {
		return nil
	}
	if _, err := w.dev.WriteAt(want, off); err != nil {
		return fmt.Errorf("write sector %d: %w", off/w.sectorSize, err)
	}
	w.unsynced = true
	return nil
}

// sync makes what was written durable; it issues no flush when nothing was written.
func (w *writer) sync() error {
	if !w.unsynced {
		return nil
	}
	w.unsynced = false
	if err := w.dev.Sync(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	return nil
}
