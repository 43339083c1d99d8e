package route

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Fake is an in-memory Table for tests of the layers above the kernel. Like
// the kernel one it applies what it can: a destination in Foreign (a route someone else
// owns) is refused, and FailNext fails the next Apply as a whole.
type Fake struct {
	mu       sync.Mutex
	routes   map[netip.Prefix]Route
	Foreign  map[netip.Prefix]bool
	FailNext error
	Applies  int
}

var _ Table = (*Fake)(nil)

// NewFake returns an empty Fake.
func NewFake() *Fake {
	return &Fake{routes: map[netip.Prefix]Route{}, Foreign: map[netip.Prefix]bool{}}
}

// Apply implements Table.
func (f *Fake) Apply(want []Route) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.FailNext; err != nil {
		f.FailNext = nil
		return err
	}
	f.Applies++
	keep := map[netip.Prefix]bool{}
	var errs []error
	for _, r := range want {
		if f.Foreign[r.Dst] {
			errs = append(errs, fmt.Errorf("route to %s: a route not edgegate's exists; left alone", r.Dst))
			continue
		}
		keep[r.Dst] = true
		f.routes[r.Dst] = r
	}
	for dst := range f.routes {
		if !keep[dst] {
			delete(f.routes, dst)
		}
	}
	return errors.Join(errs...)
}

// List implements Table.
func (f *Fake) List() ([]Route, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Route, 0, len(f.routes))
	for _, r := range f.routes {
		out = append(out, r)
	}
	slices.SortFunc(out, Compare)
	return out, nil
}

// Dump returns the routes one per line, as ip route prints them.
func (f *Fake) Dump() string {
	rs, _ := f.List()
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.String() + " proto edgegate\n")
	}
	return b.String()
}
