package fat

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// FAT32 entry values: the low 28 bits; the upper 4 are reserved and kept as they are.
const (
	entryMask = 0x0FFFFFFF
	badEntry  = 0x0FFFFFF7
	eocMin    = 0x0FFFFFF8
	eocEntry  = 0x0FFFFFFF
	// cleanShutdown is FAT[1]'s bit that Windows clears while the volume is in use;
	// fsck.fat calls the volume dirty when it is clear.
	cleanShutdown = 0x08000000
)

// table is FAT 1 as read, the entries the repair changes, and where the other copies
// differ from FAT 1.
type table struct {
	vol  *volume
	raw  []byte // FAT 1's sectors holding entries 0..clusters+1, as read
	zero []byte // a sector of zeros
	// changes are the planned entries, all 32 bits, that differ from raw: few, even when a
	// repair frees thousands of clusters, so not worth a second copy of the FAT.
	changes map[uint32]uint32
	// mirrorDiffs[k-1] lists the sectors (counted from the start of the FAT) where copy
	// k+1 differs from FAT 1 as read, in the bytes that hold entries.
	mirrorDiffs [][]int64
}

// readTable reads FAT 1 and compares every other copy with it. Like fsck.fat and Linux,
// the repair trusts FAT 1: a copy that differs is only reported and then overwritten.
func readTable(r io.ReaderAt, v *volume) (*table, error) {
	used := (int64(v.clusters) + 2) * 4
	n := (used + v.sectorSize - 1) / v.sectorSize * v.sectorSize
	t := &table{vol: v, raw: make([]byte, n), zero: make([]byte, v.sectorSize), changes: map[uint32]uint32{}}
	if _, err := r.ReadAt(t.raw, v.fatStart); err != nil {
		return nil, fmt.Errorf("read FAT 1: %w", err)
	}
	chunk := make([]byte, 64*v.sectorSize)
	for k := 1; k < v.numFATs; k++ {
		var diffs []int64
		base := v.fatStart + int64(k)*v.fatSize
		for off := int64(0); off < used; off += int64(len(chunk)) {
			c := chunk[:min(int64(len(chunk)), n-off)]
			if _, err := r.ReadAt(c, base+off); err != nil {
				return nil, fmt.Errorf("read FAT %d: %w", k+1, err)
			}
			for s := int64(0); s < int64(len(c)); s += v.sectorSize {
				lo, hi := off+s, min(off+s+v.sectorSize, used)
				if lo < hi && !bytes.Equal(c[s:s+hi-lo], t.raw[lo:hi]) {
					diffs = append(diffs, (off+s)/v.sectorSize)
				}
			}
		}
		t.mirrorDiffs = append(t.mirrorDiffs, diffs)
	}
	return t, nil
}

// entry is cluster c's FAT entry as read, without the reserved bits.
func (t *table) entry(c uint32) uint32 { return t.rawEntry(c) & entryMask }

func (t *table) rawEntry(c uint32) uint32 {
	return binary.LittleEndian.Uint32(t.raw[4*int64(c):])
}

// planned is cluster c's entry, all 32 bits, as the repair will leave it.
func (t *table) planned(c uint32) uint32 {
	if v, ok := t.changes[c]; ok {
		return v
	}
	return t.rawEntry(c)
}

// set plans cluster c's entry, keeping the upper 4 reserved bits as they are.
func (t *table) set(c, value uint32) {
	t.setAll(c, t.planned(c)&^entryMask|value&entryMask)
}

// setAll plans all 32 bits of an entry (for FAT[1]'s flag bits).
func (t *table) setAll(c, value uint32) {
	if value == t.rawEntry(c) {
		delete(t.changes, c)
		return
	}
	t.changes[c] = value
}

// changedSectors lists, in order, the sectors of the FAT the repair changes.
func (t *table) changedSectors() []int64 {
	per := uint32(t.vol.sectorSize / 4)
	seen := map[int64]bool{}
	var s []int64
	for c := range t.changes {
		if sec := int64(c / per); !seen[sec] {
			seen[sec] = true
			s = append(s, sec)
		}
	}
	slices.Sort(s)
	return s
}

// sector is sector s of the FAT as the repair will leave it.
func (t *table) sector(s int64) []byte {
	ss := t.vol.sectorSize
	b := bytes.Clone(t.raw[s*ss : (s+1)*ss])
	first := uint32(s * ss / 4)
	for i := uint32(0); i < uint32(ss/4); i++ {
		if v, ok := t.changes[first+i]; ok {
			binary.LittleEndian.PutUint32(b[4*i:], v)
		}
	}
	return b
}

// freeRun is how many clusters from cl on a whole FAT sector marks free at once, or 0:
// the scan over every cluster skips most of an ESP, which is free, a sector at a time.
func (t *table) freeRun(cl uint32) uint32 {
	per := uint32(t.vol.sectorSize / 4)
	if cl%per != 0 {
		return 0
	}
	off := 4 * int64(cl)
	if !bytes.Equal(t.raw[off:off+t.vol.sectorSize], t.zero) {
		return 0
	}
	return min(per, t.vol.clusters+2-cl)
}
