package nbddisk

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// testCache is a cache over a zeroed image of n sectors in a temporary directory.
func testCache(t *testing.T, sectors int) (*cache, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, make([]byte, sectors*SectorSize), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return newCache(f, int64(sectors*SectorSize)), path
}

// fill is n bytes of b.
func fill(b byte, n int) []byte { return bytes.Repeat([]byte{b}, n) }

// sectorBytes reads the file and returns the first byte of each sector: what each sector
// holds, for data written a sector at a time with one byte value.
func sectorBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(b)/SectorSize)
	for i := range out {
		out[i] = b[i*SectorSize]
	}
	return out
}

func mustWrite(t *testing.T, c *cache, sector int, data []byte, fua bool) {
	t.Helper()
	if err := c.write(int64(sector*SectorSize), data, fua); err != nil {
		t.Fatal(err)
	}
}

func TestWritesStayInCacheUntilFlush(t *testing.T) {
	c, path := testCache(t, 8)
	mustWrite(t, c, 1, fill(0xa1, 2*SectorSize), false)
	mustWrite(t, c, 2, fill(0xb2, SectorSize), false) // overlaps the first write's second sector
	if got, want := sectorBytes(t, path), make([]byte, 8); !bytes.Equal(got, want) {
		t.Errorf("file before the flush = %x, want nothing written", got)
	}
	got, err := c.read(0, 4*SectorSize)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Concat(fill(0, SectorSize), fill(0xa1, SectorSize), fill(0xb2, SectorSize), fill(0, SectorSize))
	if !bytes.Equal(got, want) {
		t.Errorf("read sees %x..., want the newest cached data over the file", got[:8])
	}
	if len(c.pending) != 2 || c.bytes != 3*SectorSize {
		t.Errorf("pending %d writes, %d bytes; want 2, %d", len(c.pending), c.bytes, 3*SectorSize)
	}
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := sectorBytes(t, path), []byte{0, 0xa1, 0xb2, 0, 0, 0, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("file after the flush = %x, want %x (writes in arrival order)", got, want)
	}
	if len(c.pending) != 0 || c.bytes != 0 || len(c.newest) != 0 {
		t.Errorf("cache after the flush: %d writes, %d bytes", len(c.pending), c.bytes)
	}
}

func TestUnalignedWriteCoversWholeSectors(t *testing.T) {
	c, path := testCache(t, 4)
	mustWrite(t, c, 0, fill(0x11, 4*SectorSize), true)
	if err := c.write(SectorSize+100, fill(0x22, SectorSize), false); err != nil {
		t.Fatal(err)
	}
	w := c.pending[0]
	if w.Offset != SectorSize || w.Sectors() != 2 {
		t.Fatalf("pending write %v, want sectors 1 and 2", w)
	}
	want := slices.Concat(fill(0x11, 100), fill(0x22, SectorSize), fill(0x11, SectorSize-100))
	if !bytes.Equal(w.Data, want) {
		t.Errorf("the cached sectors do not hold the write over the sectors' old data")
	}
	if _, err := c.cut(func(p []PendingWrite) []Keep { return []Keep{{Write: 0, Sectors: []int{1}}} }); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Equal(b[SectorSize:3*SectorSize], slices.Concat(fill(0x11, SectorSize), want[SectorSize:])) {
		t.Errorf("a torn unaligned write: only its second sector should have reached the file")
	}
}

func TestFUAWriteIsDurableAndNotUndoneByOlderWrites(t *testing.T) {
	c, path := testCache(t, 4)
	mustWrite(t, c, 0, fill(0xa0, 3*SectorSize), false) // pending: sectors 0-2
	mustWrite(t, c, 1, fill(0xf1, SectorSize), true)    // FUA over sector 1
	mustWrite(t, c, 2, fill(0xc2, SectorSize), false)   // newer than the FUA write, pending
	if got, want := sectorBytes(t, path), []byte{0, 0xf1, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("file after the FUA write = %x, want %x: only the FUA write, not the older pending one", got, want)
	}
	if c.bytes != 3*SectorSize {
		t.Errorf("pending bytes %d, want %d (sector 1 of the first write is superseded)", c.bytes, 3*SectorSize)
	}
	// Keep everything, the oldest write last: its copy of sector 1 is gone from the cache,
	// so the FUA write's data stays; its sector 2 lands over the newer write's, which a
	// device that wrote sector 2 of the old write back and lost power before the new one
	// also shows.
	r, err := c.cut(func(p []PendingWrite) []Keep { return []Keep{{Write: 1}, {Write: 0}} })
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sectorBytes(t, path), []byte{0xa0, 0xf1, 0xa0, 0}; !bytes.Equal(got, want) {
		t.Errorf("file after the cut = %x, want %x", got, want)
	}
	if r.Count(Kept) != 2 || r.Outcomes[0].Order != 2 || r.Outcomes[1].Order != 1 {
		t.Errorf("report:\n%v", r)
	}
}

func TestFlushMakesEarlierWritesSurviveACut(t *testing.T) {
	c, path := testCache(t, 4)
	mustWrite(t, c, 0, fill(0x01, SectorSize), false)
	if err := c.flush(); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, c, 0, fill(0x02, SectorSize), false)
	mustWrite(t, c, 1, fill(0x03, SectorSize), false)
	r, err := c.cut(KeepNone)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sectorBytes(t, path), []byte{0x01, 0, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("file after a cut that keeps nothing = %x, want %x: what the flush made durable", got, want)
	}
	if r.Count(Lost) != 2 || len(r.Outcomes) != 2 {
		t.Errorf("report:\n%v", r)
	}
}

// cutWith writes one write per row of a 16-sector disk (write i fills its sectors with
// byte i+1), cuts with the policy and returns the file's sectors and the report.
func cutWith(t *testing.T, policy Policy) ([]byte, *Report) {
	t.Helper()
	c, path := testCache(t, 16)
	for i, w := range []struct{ sector, n int }{{0, 4}, {4, 4}, {8, 1}, {9, 4}, {2, 4}} {
		mustWrite(t, c, w.sector, fill(byte(i+1), w.n*SectorSize), false)
	}
	r, err := c.cut(policy)
	if err != nil {
		t.Fatal(err)
	}
	return sectorBytes(t, path), r
}

func TestCutPolicies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Policy
		want   []byte
	}{
		{"none", KeepNone, make([]byte, 16)},
		{"all, in order", KeepAll, []byte{1, 1, 5, 5, 5, 5, 2, 2, 3, 4, 4, 4, 4, 0, 0, 0}},
		{"first two", KeepPrefix(2), []byte{1, 1, 1, 1, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"last write first", func(p []PendingWrite) []Keep { return []Keep{{Write: 4}, {Write: 0}} },
			[]byte{1, 1, 1, 1, 5, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, r := cutWith(t, tc.policy)
			if !bytes.Equal(got, tc.want) {
				t.Errorf("sectors after the cut = %v, want %v\n%v", got, tc.want, r)
			}
		})
	}
}

func TestKeepRandomIsSeededAndTears(t *testing.T) {
	first, r := cutWith(t, KeepRandom(7))
	again, _ := cutWith(t, KeepRandom(7))
	if !bytes.Equal(first, again) {
		t.Errorf("seed 7 gave %v, then %v", first, again)
	}
	t.Logf("seed 7: sectors %v\n%v", first, r)
	// Over a few seeds every fate turns up, and a torn write keeps some of its sectors only.
	fates := map[Fate]int{}
	for seed := range uint64(20) {
		_, r := cutWith(t, KeepRandom(seed))
		for _, o := range r.Outcomes {
			fates[o.Fate]++
			if o.Fate == Torn && (len(o.Sectors) == 0 || len(o.Sectors) >= o.Write.Sectors()) {
				t.Errorf("seed %d: torn write %v kept sectors %v", seed, o.Write, o.Sectors)
			}
		}
	}
	if fates[Lost] == 0 || fates[Kept] == 0 || fates[Torn] == 0 {
		t.Errorf("fates over 20 seeds: %v, want each of lost, kept and torn", fates)
	}
}

func TestTornWriteKeepsOnlyItsSectors(t *testing.T) {
	got, r := cutWith(t, func(p []PendingWrite) []Keep {
		return []Keep{{Write: 1, Sectors: []int{3, 0}}, {Write: 3, Sectors: []int{}}}
	})
	if want := []byte{0, 0, 0, 0, 2, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("sectors = %v, want %v", got, want)
	}
	if o := r.Outcomes[1]; o.Fate != Torn || !slices.Equal(o.Sectors, []int{0, 3}) || o.Order != 1 {
		t.Errorf("torn write's outcome %+v", o)
	}
	if o := r.Outcomes[3]; o.Fate != Lost || o.Order != 0 {
		t.Errorf("a write kept with no sectors: %+v, want lost", o)
	}
	t.Log(r)
}

func TestCutRefusesABadPolicy(t *testing.T) {
	for name, keep := range map[string][]Keep{
		"no such write":  {{Write: 5}},
		"a write twice":  {{Write: 0}, {Write: 0}},
		"no such sector": {{Write: 2, Sectors: []int{1}}},
	} {
		t.Run(name, func(t *testing.T) {
			c, path := testCache(t, 16)
			for i, w := range []struct{ sector, n int }{{0, 4}, {4, 4}, {8, 1}} {
				mustWrite(t, c, w.sector, fill(byte(i+1), w.n*SectorSize), false)
			}
			if _, err := c.cut(func([]PendingWrite) []Keep { return keep }); err == nil {
				t.Error("cut took the bad policy")
			}
			if got := sectorBytes(t, path); !bytes.Equal(got, make([]byte, 16)) {
				t.Errorf("a bad policy kept %v, want nothing", got)
			}
		})
	}
}
