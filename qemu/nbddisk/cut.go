package nbddisk

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
)

// Keep says what of one pending write reaches the file at a cut.
type Keep struct {
	// Write is the write's index in the pending list (oldest first).
	Write int
	// Sectors, when not nil, are the only sectors of the write that reach the file (indexes
	// into the write, 0 for its first sector): a torn write. Nil keeps the whole write.
	Sectors []int
}

// Policy decides a cut: given the pending writes, oldest first, it returns the ones that
// reach the file, in the order they are written there. A write it does not list is lost.
// The order matters where writes overlap: the one written last wins each shared sector.
type Policy func(pending []PendingWrite) []Keep

// KeepNone loses every pending write: the file is as at the last flush, FUA writes aside.
func KeepNone(pending []PendingWrite) []Keep { return nil }

// KeepAll keeps every pending write in arrival order, as if the cut came just after a flush.
func KeepAll(pending []PendingWrite) []Keep { return KeepPrefix(len(pending))(pending) }

// KeepPrefix keeps the first n pending writes whole, in arrival order, and loses the rest:
// a device that writes its cache back in order.
func KeepPrefix(n int) Policy {
	return func(pending []PendingWrite) []Keep {
		keep := make([]Keep, 0, min(n, len(pending)))
		for i := range min(n, len(pending)) {
			keep = append(keep, Keep{Write: i})
		}
		return keep
	}
}

// KeepRandom is a seeded arbitrary device: each pending write is lost, kept whole or torn
// (a random non-empty proper subset of its sectors) with equal odds, and the survivors reach
// the file in a random order. The same seed and the same pending writes give the same cut.
func KeepRandom(seed uint64) Policy {
	return func(pending []PendingWrite) []Keep {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		var keep []Keep
		for _, i := range r.Perm(len(pending)) {
			n := pending[i].Sectors()
			switch fate := r.IntN(3); {
			case fate == 0:
			case fate == 1 || n == 1:
				keep = append(keep, Keep{Write: i})
			default:
				sectors := r.Perm(n)[:1+r.IntN(n-1)]
				slices.Sort(sectors)
				keep = append(keep, Keep{Write: i, Sectors: sectors})
			}
		}
		return keep
	}
}

// Fate is what became of one pending write at a cut.
type Fate int

const (
	Lost Fate = iota
	Kept
	Torn
)

func (f Fate) String() string {
	return [...]string{"lost", "kept", "torn"}[f]
}

// Outcome is one pending write's fate at a cut.
type Outcome struct {
	Write PendingWrite
	Fate  Fate
	// Sectors are the sectors of a torn write that reached the file.
	Sectors []int
	// Order is its place in the order the kept writes reached the file, from 1; 0 if lost.
	Order int
}

// Report is what a cut did, for a test's log.
type Report struct {
	// Outcomes has one entry per pending write, oldest first.
	Outcomes []Outcome
}

// Count returns how many pending writes met the fate.
func (r *Report) Count(f Fate) int {
	n := 0
	for _, o := range r.Outcomes {
		if o.Fate == f {
			n++
		}
	}
	return n
}

// String is the report as text: a summary line, then one line per pending write.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cut with %d writes pending: %d kept, %d torn, %d lost",
		len(r.Outcomes), r.Count(Kept), r.Count(Torn), r.Count(Lost))
	for _, o := range r.Outcomes {
		fmt.Fprintf(&b, "\n  %v: %v", o.Write, o.Fate)
		if o.Fate == Torn {
			fmt.Fprintf(&b, ", sectors %v reached the file", o.Sectors)
		}
		if o.Order > 0 {
			fmt.Fprintf(&b, " (order %d)", o.Order)
		}
	}
	return b.String()
}

// checkKeeps refuses a policy's answer that names a write or sector that does not exist,
// or one twice.
func checkKeeps(pending []PendingWrite, keep []Keep) error {
	seen := make([]bool, len(pending))
	for _, k := range keep {
		if k.Write < 0 || k.Write >= len(pending) || seen[k.Write] {
			return fmt.Errorf("nbd: cut policy: write %d of %d pending is out of range or named twice", k.Write, len(pending))
		}
		seen[k.Write] = true
		sectors := map[int]bool{}
		for _, s := range k.Sectors {
			if s < 0 || s >= pending[k.Write].Sectors() || sectors[s] {
				return fmt.Errorf("nbd: cut policy: write %v: sector %d is out of range or named twice", pending[k.Write], s)
			}
			sectors[s] = true
		}
	}
	return nil
}

// errPolicy wraps a policy's bad answer: the cut still happens and keeps nothing.
var errPolicy = errors.New("nothing was kept")

// cut ends the cache as a power loss does: the writes the policy keeps reach the file in
// its order, the file is synced, and the rest is gone.
func (c *cache) cut(policy Policy) (*Report, error) {
	pending := c.snapshot()
	keep := policy(pending)
	var policyErr error
	if err := checkKeeps(pending, keep); err != nil {
		policyErr = fmt.Errorf("%w, %w", err, errPolicy)
		keep = nil
	}
	r := &Report{Outcomes: make([]Outcome, len(pending))}
	for i, w := range pending {
		r.Outcomes[i] = Outcome{Write: w}
	}
	defer c.drop()
	order := 0
	for _, k := range keep {
		var sectors []int // nil: the whole write
		if k.Sectors != nil {
			if len(k.Sectors) == 0 {
				continue
			}
			sectors = slices.Sorted(slices.Values(k.Sectors))
		}
		order++
		o := &r.Outcomes[k.Write]
		o.Order, o.Fate = order, Kept
		if sectors != nil && len(sectors) < pending[k.Write].Sectors() {
			o.Fate, o.Sectors = Torn, sectors
		}
		if err := c.apply(c.pending[k.Write], sectors); err != nil {
			return r, err
		}
	}
	if err := c.file.Sync(); err != nil {
		return r, fmt.Errorf("cut: %w", err)
	}
	return r, policyErr
}
