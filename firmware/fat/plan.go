package fat

import (
	"encoding/binary"
	"fmt"
)

// tailMark owns a cluster behind a cut: freed, but counted for its file.
const tailMark = -1

// edit is bytes to put at a byte offset of the device.
type edit struct {
	off  int64
	data []byte
}

// plan is every change the repair makes, by phase.
type plan struct {
	c *checker
	// entries are phase 1's changes to short entries, slots its changes to long-name and
	// free slots: made durable one after the other, so that an entry never loses its long
	// name (and with it, maybe, the temporary name that makes it lose a cross-link)
	// before the entry itself is deleted.
	entries, slots []edit
	// summary is phase 3's changes to FSInfo and the boot sector.
	summary []edit
	// markClean sets FAT[1]'s clean-shutdown bit in phase 3.
	markClean bool
}

// plan turns what the walk decided into changes and findings.
func (c *checker) plan() (*plan, error) {
	p := &plan{c: c}
	lost, first := c.planFAT()
	c.planEntries(p)
	if lost > 0 {
		c.rep.add(Finding{Problem: LostClusters, Cluster: first, Detail: fmt.Sprintf("%d clusters allocated but used by no entry, the first %d", lost, first), Action: FreeClusters})
	}
	for k, diffs := range c.fat.mirrorDiffs {
		if len(diffs) > 0 {
			c.rep.add(Finding{Problem: FATMismatch, Detail: fmt.Sprintf("FAT %d differs from FAT 1 in %d sectors, the first FAT sector %d", k+2, len(diffs), diffs[0]), Action: CopyFAT})
		}
	}
	if err := c.planSummary(p); err != nil {
		return nil, err
	}
	return p, nil
}

// planFAT cuts the chains that go on behind what their entry needs and frees every
// cluster no entry owns, counting the clusters free as read. It returns the count of
// lost clusters (not behind a cut) freed and the first of them.
func (c *checker) planFAT() (lost, first uint32) {
	cut := func(at uint32) (freed uint32) {
		next := c.fat.entry(at)
		c.fat.set(at, eocEntry)
		for cl := next; c.vol.valid(cl) && c.ownerOf(cl) == noOwner; cl = c.fat.entry(cl) {
			c.owner[cl] = tailMark
			if v := c.fat.entry(cl); v != 0 && v != badEntry {
				freed++
			}
		}
		return freed
	}
	if c.rootCut != 0 {
		c.rep.Freed += cut(c.rootCut)
	}
	for i := range c.nodes {
		if n := &c.nodes[i]; n.state == kept && n.cut != 0 {
			n.freed = cut(n.cut)
			c.rep.Freed += n.freed
		}
	}
	for cl := uint32(2); cl < c.vol.clusters+2; cl++ {
		if n := c.fat.freeRun(cl); n > 0 {
			c.free += n
			cl += n - 1
			continue
		}
		v := c.fat.entry(cl)
		if v == 0 {
			c.free++
		}
		o := c.ownerOf(cl)
		if o >= 0 || v == 0 || v == badEntry {
			continue
		}
		c.fat.set(cl, 0)
		if o == behindCut {
			continue
		}
		if lost == 0 {
			first = cl
		}
		lost++
	}
	c.rep.Freed += lost
	return lost, first
}

// planEntries reports, in walk order, what happens to each entry and directory, and
// plans the directory writes.
func (c *checker) planEntries(p *plan) {
	mark := []byte{slotDeleted}
	for i := range c.nodes {
		if d := c.nodes[i].dir; d != nil {
			d.lastLive = d.lastFixed
		}
	}
	for i := 1; i < len(c.nodes); i++ {
		n := &c.nodes[i]
		if d := c.nodes[n.parent].dir; n.state == kept && n.index > d.lastLive {
			d.lastLive = n.index
		}
	}
	for i := range c.nodes {
		n := &c.nodes[i]
		if i > 0 && c.nodes[n.parent].state != kept {
			continue // nothing below a deleted directory is written
		}
		if n.why != nil && n.state != gone {
			c.rep.add(*n.why)
		}
		if n.state == deleted {
			c.rep.Deleted++
			p.entries = append(p.entries, edit{n.off, mark})
			for _, off := range n.lfn {
				p.slots = append(p.slots, edit{off, mark})
			}
			continue
		}
		if n.state != kept {
			continue
		}
		path := func() string { return c.path(int32(i)) }
		if !n.short.isDir() && n.short.size == 0 && n.short.start != 0 && i > 0 {
			c.rep.add(Finding{Problem: LongChain, Path: path(), Cluster: n.short.start, Detail: fmt.Sprintf("empty file starts at cluster %d", n.short.start), Action: ClearStart})
			p.entries = append(p.entries, edit{n.off + 20, []byte{0, 0}}, edit{n.off + 26, []byte{0, 0}})
		}
		if n.cut != 0 {
			c.rep.add(Finding{Problem: LongChain, Path: path(), Cluster: n.cut, Detail: fmt.Sprintf("size %d bytes needs %d clusters, the chain goes on behind cluster %d; %d clusters freed", n.short.size, n.length, n.cut, n.freed), Action: CutChain})
		}
		if n.dir == nil {
			continue
		}
		for _, o := range n.dir.orphans {
			c.rep.add(Finding{Problem: OrphanLFN, Path: path(), Detail: fmt.Sprintf("%d slots of %q", len(o.slots), o.name), Action: DeleteSlots})
			for _, off := range o.slots {
				p.slots = append(p.slots, edit{off, mark})
			}
		}
		early := 0
		for _, z := range n.dir.zeros {
			if z.index < n.dir.lastLive {
				p.slots = append(p.slots, edit{z.off, mark})
				early++
			}
		}
		if early > 0 {
			c.rep.add(Finding{Problem: EndMarker, Path: path(), Detail: fmt.Sprintf("%d slots marked end-of-directory before the live slot %d", early, n.dir.lastLive), Action: DeleteSlots})
		}
	}
}

// planSummary corrects FSInfo and clears the dirty flags: the volume is consistent once
// phases 1 and 2 are done.
func (c *checker) planSummary(p *plan) error {
	free := c.free
	for cl, v := range c.fat.changes {
		if !c.vol.valid(cl) {
			continue
		}
		switch was, is := c.fat.entry(cl) == 0, v&entryMask == 0; {
		case is && !was:
			free++
		case was && !is:
			free--
		}
	}
	c.rep.Free = free
	switch {
	case c.vol.fsInfo != 0:
		buf := make([]byte, c.vol.sectorSize)
		if _, err := c.r.ReadAt(buf, c.vol.fsInfo); err != nil {
			return fmt.Errorf("read FSInfo sector: %w", err)
		}
		count, hint := binary.LittleEndian.Uint32(buf[fsiFreeCount:]), binary.LittleEndian.Uint32(buf[fsiNextFree:])
		var detail string
		if count != free {
			detail = fmt.Sprintf("FSInfo counts %d free clusters, there are %d", count, free)
		} else if hint != fsiUnknown && !c.vol.valid(hint) {
			detail = fmt.Sprintf("FSInfo's next-free hint %d is outside 2..%d", hint, c.vol.clusters+1)
		}
		if detail != "" {
			c.rep.add(Finding{Problem: FreeCount, Detail: detail, Action: SetFreeCount})
			p.summary = append(p.summary, edit{c.vol.fsInfo + fsiFreeCount, le32(free)}, edit{c.vol.fsInfo + fsiNextFree, le32(fsiUnknown)})
		}
	case c.vol.fsInfoProblem != "":
		c.rep.add(Finding{Problem: FSInfoInvalid, Detail: c.vol.fsInfoProblem, Action: LeaveAlone})
	}
	var dirty []string
	if s := c.vol.boot[bpbState]; s&stateDirty != 0 {
		dirty = append(dirty, "boot sector's state flag set")
		p.summary = append(p.summary, edit{bpbState, []byte{s &^ stateDirty}})
	}
	if c.fat.planned(1)&cleanShutdown == 0 {
		dirty = append(dirty, "FAT[1]'s clean-shutdown bit clear")
		p.markClean = true
	}
	if len(dirty) > 0 {
		detail := dirty[0]
		if len(dirty) > 1 {
			detail += ", " + dirty[1]
		}
		c.rep.add(Finding{Problem: Dirty, Detail: detail, Action: MarkClean})
	}
	return nil
}

func le32(v uint32) []byte {
	return binary.LittleEndian.AppendUint32(nil, v)
}
