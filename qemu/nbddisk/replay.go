package nbddisk

import (
	"fmt"
	"os"
	"slices"
)

// Op is one write or flush a recording Disk received (Options.Record), in order.
type Op struct {
	Flush bool
	// Off, Data and FUA are a write's.
	Off  int64
	Data []byte
	FUA  bool
}

// Trace returns what the disk received since it started, when it records.
func (d *Disk) Trace() []Op {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.trace)
}

// FlushPoints are the positions in ops of its flushes. A cut just before a flush loses (or
// keeps, tears and reorders, as a policy says) what the guest wrote since the flush before:
// one cut point per step the guest made durable.
func FlushPoints(ops []Op) []int {
	var at []int
	for i, op := range ops {
		if op.Flush {
			at = append(at, i)
		}
	}
	return at
}

// Replay turns image, a copy of the image a recording disk started from, into what a cut
// just before ops[cut] would have left: the ops before it go through a volatile cache as
// they did on the disk (flushed writes and FUA writes reach the file), then policy decides
// which of the writes still pending reach it too, whole, torn or not at all.
func Replay(image string, ops []Op, cut int, policy Policy) (*Report, error) {
	if cut < 0 || cut > len(ops) {
		return nil, fmt.Errorf("nbd: replay: cut at %d of %d ops", cut, len(ops))
	}
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("nbd: replay: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("nbd: replay: %w", err)
	}
	c := newCache(f, st.Size())
	for i, op := range ops[:cut] {
		if op.Flush {
			err = c.flush()
		} else {
			err = c.write(op.Off, op.Data, op.FUA)
		}
		if err != nil {
			return nil, fmt.Errorf("nbd: replay: op %d: %w", i, err)
		}
	}
	return c.cut(policy)
}
