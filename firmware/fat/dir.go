package fat

import (
	"encoding/binary"
	"strings"
	"time"
	"unicode/utf16"
)

// Directory slots: 32 bytes, either a short (8.3) entry or one part of a long name.
const (
	slotSize    = 32
	slotFree    = 0x00 // never used; Linux and fsck.fat read past it, UEFI firmware stops
	slotDeleted = 0xE5
	attrVolume  = 0x08
	attrDir     = 0x10
	attrLFN     = 0x0F // a long-name slot has exactly these attribute bits

	lfnLast     = 0x40 // on the first slot in the directory, which holds the name's end
	lfnSeqMask  = 0x1F
	lfnMaxSlots = 20 // 255 characters
	lfnChars    = 13

	// maxDirBytes is the largest directory Linux makes (65536 slots): a longer chain is
	// not a directory anything wrote.
	maxDirBytes = 65536 * slotSize
)

// shortEntry is a decoded short directory entry.
type shortEntry struct {
	name       [11]byte
	attr       byte
	lcase      byte // Windows NT/Linux case flags: 0x08 base and 0x10 extension in lower case
	start      uint32
	size       uint32
	time, date uint16
}

func parseShort(s []byte) shortEntry {
	e := shortEntry{
		attr:  s[11],
		lcase: s[12],
		start: uint32(binary.LittleEndian.Uint16(s[20:]))<<16 | uint32(binary.LittleEndian.Uint16(s[26:])),
		size:  binary.LittleEndian.Uint32(s[28:]),
		time:  binary.LittleEndian.Uint16(s[22:]),
		date:  binary.LittleEndian.Uint16(s[24:]),
	}
	copy(e.name[:], s[:11])
	return e
}

func (e shortEntry) isDir() bool { return e.attr&attrDir != 0 }

// isDot reports whether the entry is a directory's "." or "..".
func (e shortEntry) isDot() bool {
	n := string(e.name[:])
	return n == ".          " || n == "..         "
}

// displayName is the short name as Linux shows it: NAME.EXT, with the case flags applied.
func (e shortEntry) displayName() string {
	base := e.name[:8]
	if base[0] == 0x05 { // a name starting with 0xE5 is stored as 0x05
		base = append([]byte{0xE5}, base[1:]...)
	}
	part := func(b []byte, lower bool) string {
		s := latin1(strings.TrimRight(string(b), " "))
		if lower {
			s = strings.ToLower(s)
		}
		return s
	}
	name := part(base, e.lcase&0x08 != 0)
	if ext := part(e.name[8:], e.lcase&0x10 != 0); ext != "" {
		name += "." + ext
	}
	return name
}

// latin1 turns bytes of a short name into runes one by one, so that any byte prints.
func latin1(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = rune(s[i])
	}
	return string(r)
}

func (e shortEntry) modified() time.Time {
	d, t := int(e.date), int(e.time)
	return time.Date(1980+d>>9, time.Month(d>>5&15), d&31, t>>11, t>>5&63, t&31*2, 0, time.UTC)
}

// badShortName applies fsck.fat's test: a short name with control characters, characters
// no FAT implementation allows, or a leading space was not written by a file system driver
// but is garbage (a torn or stale sector read as directory slots).
func badShortName(name [11]byte) bool {
	for i, b := range name {
		if (b < ' ' && !(i == 0 && b == 0x05)) || b == 0x7F || strings.IndexByte(`*?<>|"\/:.`, b) >= 0 {
			return true
		}
	}
	return name[0] == ' '
}

// checksum is the short name's checksum every long-name slot of the entry carries.
func checksum(name [11]byte) byte {
	var sum byte
	for _, c := range name {
		sum = (sum>>1 | sum<<7) + c
	}
	return sum
}

// slotRef is a slot's byte offset on the device and its index in its directory.
type slotRef struct {
	off   int64
	index int32
}

// lfnRun collects the long-name slots that precede a short entry. They are stored last
// part first; the run is complete when the part numbered 1 has been added.
type lfnRun struct {
	slots []slotRef
	units []uint16
	want  int // the part number the next slot must have; 0 when complete
	sum   byte
}

func (r *lfnRun) active() bool { return len(r.slots) > 0 }

// start begins a run at a slot flagged as the name's last part; it reports false when
// the slot's part number is impossible.
func (r *lfnRun) start(s []byte, ref slotRef) bool {
	n := int(s[0] & lfnSeqMask)
	if n == 0 || n > lfnMaxSlots {
		return false
	}
	*r = lfnRun{slots: []slotRef{ref}, units: make([]uint16, n*lfnChars), want: n - 1, sum: s[13]}
	r.put(n, s)
	return true
}

// add appends the next slot; it reports false when the slot does not continue the run.
func (r *lfnRun) add(s []byte, ref slotRef) bool {
	n := int(s[0] & lfnSeqMask)
	if s[0]&lfnLast != 0 || n != r.want || n == 0 || s[13] != r.sum {
		return false
	}
	r.slots = append(r.slots, ref)
	r.want--
	r.put(n, s)
	return true
}

func (r *lfnRun) put(n int, s []byte) {
	u := r.units[(n-1)*lfnChars:]
	i := 0
	for _, span := range [][2]int{{1, 11}, {14, 26}, {28, 32}} {
		for off := span[0]; off < span[1]; off += 2 {
			u[i] = binary.LittleEndian.Uint16(s[off:])
			i++
		}
	}
}

// name is the long name if the run is complete and belongs to the short entry, else "".
func (r *lfnRun) name(e shortEntry) string {
	if !r.active() || r.want != 0 || r.sum != checksum(e.name) {
		return ""
	}
	u := r.units
	for i, c := range u {
		if c == 0 {
			u = u[:i]
			break
		}
	}
	return string(utf16.Decode(u))
}

// partial is what the run holds of a name, for reporting an orphaned run.
func (r *lfnRun) partial() string {
	var u []uint16
	for _, c := range r.units {
		if c == 0 || c == 0xFFFF {
			continue
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}
