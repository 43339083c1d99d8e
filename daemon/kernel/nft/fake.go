package nft

import (
	"errors"
	"maps"
	"strings"
	"sync"

	"github.com/edgegate/edgegate/daemon/model"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// Fake is an in-memory Ruleset for tests of the layers above the kernel: it keeps what was
// applied and dumps it as text; FailNext makes the next Apply fail like a refused batch.
type Fake struct {
	mu       sync.Mutex
	tables   map[model.Family][]*nftplan.Table
	dirty    bool
	Applies  []Stats
	FailNext error
}

var _ Ruleset = (*Fake)(nil)

// NewFake returns an empty Fake.
func NewFake() *Fake { return &Fake{tables: map[model.Family][]*nftplan.Table{}, dirty: true} }

// Apply implements Ruleset. Like the kernel backend, a failure leaves the previous tables and
// makes the next apply full.
func (f *Fake) Apply(tables []*nftplan.Table, full bool) (Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Stats{Full: full || f.dirty}
	if err := f.FailNext; err != nil {
		f.FailNext = nil
		f.dirty = true
		return st, err
	}
	for _, t := range tables {
		if err := t.Validate(); err != nil {
			f.dirty = true
			return st, errors.New("invalid plan: " + err.Error())
		}
	}
	applied := map[model.Family][]*nftplan.Table{}
	for _, t := range tables {
		applied[t.Family] = append(applied[t.Family], t)
		st.Chains += len(t.Chains)
	}
	maps.Copy(f.tables, applied)
	f.dirty = false
	f.Applies = append(f.Applies, st)
	return st, nil
}

// Cleanup implements Ruleset.
func (f *Fake) Cleanup() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables = map[model.Family][]*nftplan.Table{}
	f.dirty = true
	return nil
}

// Dump returns the applied tables, IPv4 first, each family's in the order applied, in
// nftplan.Table.Dump's form.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, fam := range []model.Family{model.IPv4, model.IPv6} {
		for _, t := range f.tables[fam] {
			b.WriteString(t.Dump())
		}
	}
	return b.String()
}
