package ipt

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/edgegate/edgegate/daemon/model"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// Fake is an in-memory Ruleset for tests of the layers above the kernel: it keeps what was
// applied and dumps it as text; FailNext makes the next Apply fail like a refused batch.
type Fake struct {
	mu       sync.Mutex
	plans    map[model.Family]*iptplan.Tables
	dirty    bool
	Applies  []Stats
	FailNext error
}

var _ Ruleset = (*Fake)(nil)

// NewFake returns an empty Fake.
func NewFake() *Fake { return &Fake{plans: map[model.Family]*iptplan.Tables{}, dirty: true} }

// Apply implements Ruleset. Like the kernel backend, a failure leaves the previous plans
// and makes the next apply full; rules that the kernel backend could not encode fail here
// too.
func (f *Fake) Apply(plans []*iptplan.Tables, full bool) (Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Stats{Full: full || f.dirty}
	if err := f.FailNext; err != nil {
		f.FailNext = nil
		f.dirty = true
		return st, err
	}
	next := map[model.Family]*iptplan.Tables{}
	for _, p := range plans {
		if err := encodable(p, &st); err != nil {
			f.dirty = true
			return st, err
		}
		next[p.Family] = p
	}
	f.plans = next
	f.dirty = false
	f.Applies = append(f.Applies, st)
	return st, nil
}

// encodable checks that every rule of a plan has an encoding and counts them as a full
// apply would write them.
func encodable(p *iptplan.Tables, st *Stats) error {
	enc := encoder{family: p.Family}
	for _, t := range p.Tables {
		chains := slices.Clone(t.Chains)
		for _, hook := range iptplan.BuiltinChains(t.Name) {
			if rules := t.Builtin[hook]; len(rules) > 0 {
				chains = append(chains, &iptplan.Chain{Name: hook, Rules: rules})
			}
		}
		for _, c := range chains {
			for i, r := range c.Rules {
				if _, err := enc.rule(r); err != nil {
					return fmt.Errorf("%s %s chain %s rule %d: %w", p.Family, t.Name, c.Name, i, err)
				}
			}
			st.Chains++
			st.Rules += len(c.Rules)
		}
	}
	return nil
}

// Cleanup implements Ruleset.
func (f *Fake) Cleanup() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plans = map[model.Family]*iptplan.Tables{}
	f.dirty = true
	return nil
}

// Dump returns the applied plans, IPv4 first, in iptplan.Tables.Dump's form.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, fam := range families {
		if p, ok := f.plans[fam]; ok {
			b.WriteString(p.Dump())
		}
	}
	return b.String()
}
