package nft

import (
	"maps"
	"reflect"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Planner plans one family's table as Build does, but reuses what it planned for each
// service port that has not changed since its last plan: the tracker hands out the same
// *ServicePort for an unchanged port, so a pointer comparison finds them. The reused
// chains are the same *Chain values as in the table planned before, which the nftables
// backend's diff recognises without comparing their rules. At 10,000 Services planning
// everything for one changed endpoint took most of a second.
//
// A planner is not safe for concurrent use.
type Planner struct {
	Family model.Family

	cfg   plan.Config
	frags map[model.ServicePortName]*fragment
	last  *Table
	// refs counts, for each shared set (sharedSets), the service ports holding each
	// element: those sets are kept up to date from the changed fragments alone.
	refs map[string]map[Key]int
	// claims counts every fragment's calls of Table.AddElem for the other sets, per key:
	// while the keys a change touches are claimed by one owner with one verdict, the
	// change's elements follow from the counts, and the other service ports' calls need
	// not be replayed (at 10,000 Services, most of a one-endpoint change's planning).
	claims map[string]map[Key]claim
	// lineage and gen name the snapshot planned last (see model.Snapshot.Lineage).
	lineage, gen uint64
	// protected counts the protected service ports (Protected): the protection's base
	// chains exist while there are any.
	protected int
}

// claim counts the calls of Table.AddElem for one key of one set: n in all, same of them
// with owner and v (the first caller's). While n == same they all agree, and the plan
// holds the element exactly when n > 0.
type claim struct {
	n, same int
	owner   model.ServicePortName
	v       Verdict
}

func (c claim) agreed() bool { return c.n == c.same }

type setKey struct {
	set string
	key Key
}

// fragment is what one service port adds to the table.
type fragment struct {
	sp     *model.ServicePort
	chains []*Chain
	sets   []*Set
	// elems are its calls of Table.AddElem, in order: replayed into the whole table, they
	// settle conflicts between service ports exactly as a plan from scratch does.
	elems []elemCall
}

type elemCall struct {
	set   string
	key   Key
	v     Verdict
	owner model.ServicePortName
}

// New returns a planner for family f.
func New(f model.Family) *Planner { return &Planner{Family: f} }

// Plan returns the table for snap; it equals Build(snap, p.Family, cfg). After the first
// plan with a config, the table carries a Delta from the one before.
func (p *Planner) Plan(snap *model.Snapshot, cfg plan.Config) *Table {
	if p.last == nil || !reflect.DeepEqual(cfg, p.cfg) {
		return p.planAll(snap, cfg)
	}
	last := p.last
	// Only one step back is ever compared: a chain of Deltas would keep every table
	// planned since the start alive.
	last.Delta = nil
	t := &Table{Family: p.Family, Name: TableName,
		Chains: maps.Clone(last.Chains), Sets: maps.Clone(last.Sets)}
	d := &Delta{From: last, Chains: map[string]bool{}, Sets: map[string]bool{}}
	t.Delta = d
	var dropped []*fragment
	drop := func(f *fragment) {
		dropped = append(dropped, f)
		for _, c := range f.chains {
			delete(t.Chains, c.Name)
			d.Chains[c.Name] = true
		}
		for _, s := range f.sets {
			delete(t.Sets, s.Name)
			d.Sets[s.Name] = true
		}
	}
	// next is p.frags, changed in place where snap differs.
	next := p.frags
	var fresh []*fragment
	visit := func(name model.ServicePortName, sp *model.ServicePort) {
		f := next[name]
		if f != nil && f.sp == sp {
			return
		}
		if f != nil {
			drop(f)
			delete(next, name)
			if Protected(f.sp) {
				p.protected--
			}
		}
		if sp != nil {
			if Protected(sp) {
				p.protected++
			}
			f = planFragment(sp, p.Family, cfg)
			next[name] = f
			fresh = append(fresh, f)
		}
	}
	if p.follows(snap) {
		for name := range snap.Changed {
			visit(name, snap.Port(name))
		}
	} else {
		for name, sp := range snap.Ports.All() {
			visit(name, sp)
		}
		for name := range next {
			if _, ok := snap.Ports.Get(name); !ok {
				visit(name, nil)
			}
		}
	}
	if _, had := last.Chains[ChainProtectCheck]; had != (p.protected > 0) {
		// The protection's base chains come or go: the whole table is planned again.
		return p.planAll(snap, cfg)
	}
	for _, f := range fresh {
		for _, c := range f.chains {
			t.Chains[c.Name] = c
			d.Chains[c.Name] = true
		}
		for _, s := range f.sets {
			t.Sets[s.Name] = s
			d.Sets[s.Name] = true
		}
	}
	touched := p.claim(dropped, fresh)
	if len(last.Conflicts) > 0 || !p.agreed(touched) {
		// A key claimed twice: the maps are filled again from every service port's calls,
		// in order, so that conflicts settle as in a plan from scratch.
		shared := newTable(p.Family)
		shared.base(cfg)
		if p.protected > 0 {
			shared.protectionBase(cfg)
		}
		for name, s := range shared.Sets {
			if !sharedSets[name] {
				t.Sets[name] = s
				d.Sets[name] = true
			}
		}
		for _, sp := range snap.Sorted() {
			for _, e := range next[sp.Name].elems {
				if !sharedSets[e.set] {
					t.AddElem(e.set, e.key, e.v, e.owner)
				}
			}
		}
		p.claims = claimsOf(next) // the first callers may have gone: count afresh
	} else {
		p.updateClaimed(t, touched)
	}
	// The shared sets (sharedSets) have no conflicts.
	for name := range sharedSets {
		p.updateShared(name, t, dropped, fresh)
	}
	t.planned()
	p.frags, p.last = next, t
	p.seen(snap)
	return t
}

// follows reports whether snap differs from the snapshot planned last only in the ports
// it lists as changed.
func (p *Planner) follows(snap *model.Snapshot) bool {
	return snap.Lineage != 0 && snap.Lineage == p.lineage && (snap.From == p.gen || snap.Generation == p.gen)
}

// seen records snap as the snapshot planned last.
func (p *Planner) seen(snap *model.Snapshot) { p.lineage, p.gen = snap.Lineage, snap.Generation }

// updateShared carries a shared set over from last to t, less the elements the dropped
// fragments were the last to hold and plus those the fresh ones brought first, and lists
// both in t's Delta. An unchanged set stays the very same value (t.Chains and t.Sets start
// as copies of last's).
func (p *Planner) updateShared(name string, t *Table, dropped, fresh []*fragment) {
	refs := p.refs[name]
	gone := map[Key]bool{}
	for _, f := range dropped {
		for _, e := range f.elems {
			if e.set == name {
				if refs[e.key]--; refs[e.key] == 0 {
					delete(refs, e.key)
					gone[e.key] = true
				}
			}
		}
	}
	var ch ElemChanges
	for _, f := range fresh {
		for _, e := range f.elems {
			if e.set == name {
				if refs[e.key]++; refs[e.key] == 1 {
					if gone[e.key] {
						delete(gone, e.key) // dropped and brought back: unchanged
					} else {
						ch.Add = append(ch.Add, Elem{Key: e.key, Verdict: e.v})
					}
				}
			}
		}
	}
	if len(gone) == 0 && len(ch.Add) == 0 {
		return
	}
	for k := range gone {
		ch.Del = append(ch.Del, Elem{Key: k})
	}
	t.replaceElems(name, ch)
}

// claim updates the claims with the calls of the dropped and the fresh fragments, and
// returns the claims the keys they touched had before.
func (p *Planner) claim(dropped, fresh []*fragment) map[setKey]claim {
	touched := map[setKey]claim{}
	touch := func(e elemCall) map[Key]claim {
		m := p.claims[e.set]
		if m == nil {
			m = map[Key]claim{}
			p.claims[e.set] = m
		}
		if _, ok := touched[setKey{e.set, e.key}]; !ok {
			touched[setKey{e.set, e.key}] = m[e.key]
		}
		return m
	}
	// Drops first: a key that changes hands within one plan is then counted afresh.
	for _, f := range dropped {
		for _, e := range f.elems {
			if sharedSets[e.set] {
				continue
			}
			m := touch(e)
			c := m[e.key]
			c.n--
			if c.owner == e.owner && c.v == e.v {
				c.same--
			}
			if c.n == 0 {
				delete(m, e.key)
			} else {
				m[e.key] = c
			}
		}
	}
	for _, f := range fresh {
		for _, e := range f.elems {
			if !sharedSets[e.set] {
				m := touch(e)
				m[e.key] = addClaim(m[e.key], e)
			}
		}
	}
	return touched
}

func addClaim(c claim, e elemCall) claim {
	if c.n == 0 {
		c = claim{owner: e.owner, v: e.v}
	}
	c.n++
	if c.owner == e.owner && c.v == e.v {
		c.same++
	}
	return c
}

// agreed reports whether every touched key is claimed by one owner with one verdict,
// in its set and in the sets that share its key space (siblingMaps).
func (p *Planner) agreed(touched map[setKey]claim) bool {
	for k := range touched {
		c, ok := p.claims[k.set][k.key]
		if !ok {
			continue
		}
		if !c.agreed() {
			return false
		}
		for _, sib := range siblingMaps[k.set] {
			if o, ok := p.claims[sib][k.key]; ok && (!o.agreed() || o.owner != c.owner) {
				return false
			}
		}
	}
	return true
}

// updateClaimed carries the claimed sets over from the last table to t with the touched
// keys' elements changed as their claims say, and lists the changes in t's Delta.
func (p *Planner) updateClaimed(t *Table, touched map[setKey]claim) {
	changes := map[string]*ElemChanges{}
	for k, before := range touched {
		after := p.claims[k.set][k.key]
		had, has := before.n > 0, after.n > 0
		if had == has && (!had || before.v == after.v) {
			continue
		}
		ch := changes[k.set]
		if ch == nil {
			ch = &ElemChanges{}
			changes[k.set] = ch
		}
		if had {
			ch.Del = append(ch.Del, Elem{Key: k.key, Verdict: before.v})
		}
		if has {
			ch.Add = append(ch.Add, Elem{Key: k.key, Verdict: after.v})
		}
	}
	for name, ch := range changes {
		t.replaceElems(name, *ch)
	}
}

// replaceElems gives t a copy of set name less ch.Del and plus ch.Add (t.Sets starts as
// a copy of the last table's map: its sets are shared with it) and lists ch in t's Delta.
func (t *Table) replaceElems(name string, ch ElemChanges) {
	gone := make(map[Key]bool, len(ch.Del))
	for _, e := range ch.Del {
		gone[e.Key] = true
	}
	old := t.Sets[name]
	s := *old
	s.Elems = make([]Elem, 0, len(old.Elems)-len(ch.Del)+len(ch.Add))
	for _, e := range old.Elems {
		if !gone[e.Key] {
			s.Elems = append(s.Elems, e)
		}
	}
	s.Elems = append(s.Elems, ch.Add...)
	t.Sets[name] = &s
	t.Delta.Sets[name] = true
	if t.Delta.Elems == nil {
		t.Delta.Elems = map[string]ElemChanges{}
	}
	t.Delta.Elems[name] = ch
}

// claimsOf counts the calls of the fragments for the sets that are not shared.
func claimsOf(frags map[model.ServicePortName]*fragment) map[string]map[Key]claim {
	claims := map[string]map[Key]claim{}
	for _, f := range frags {
		for _, e := range f.elems {
			if sharedSets[e.set] {
				continue
			}
			m := claims[e.set]
			if m == nil {
				m = map[Key]claim{}
				claims[e.set] = m
			}
			m[e.key] = addClaim(m[e.key], e)
		}
	}
	return claims
}

// planAll plans every service port afresh.
func (p *Planner) planAll(snap *model.Snapshot, cfg plan.Config) *Table {
	if p.last != nil {
		p.last.Delta = nil
	}
	t := newTable(p.Family)
	t.base(cfg)
	p.protected = 0
	for _, sp := range snap.Ports.All() {
		if Protected(sp) {
			p.protected++
		}
	}
	if p.protected > 0 {
		t.protectionBase(cfg)
	}
	next := make(map[model.ServicePortName]*fragment, snap.Ports.Len())
	refs := map[string]map[Key]int{}
	for name := range sharedSets {
		refs[name] = map[Key]int{}
	}
	for _, sp := range snap.Sorted() {
		f := planFragment(sp, p.Family, cfg)
		next[sp.Name] = f
		t.add(f)
		for _, e := range f.elems {
			if sharedSets[e.set] {
				refs[e.set][e.key]++
			}
		}
	}
	t.planned()
	p.frags, p.last, p.cfg, p.refs, p.claims = next, t, cfg, refs, claimsOf(next)
	p.seen(snap)
	return t
}

func newTable(f model.Family) *Table {
	return &Table{Family: f, Name: TableName, Chains: map[string]*Chain{}, Sets: map[string]*Set{}}
}

// planFragment plans one service port into a table of its own that records its shared
// map elements instead of adding them.
func planFragment(sp *model.ServicePort, f model.Family, cfg plan.Config) *fragment {
	fr := &fragment{sp: sp}
	pol, ok := plan.Policy(sp, f, cfg)
	if !ok {
		return fr
	}
	t := newTable(f)
	t.record = &fr.elems
	t.servicePort(&pol, cfg)
	for _, name := range sortedKeys(t.Chains) {
		fr.chains = append(fr.chains, t.Chains[name])
	}
	for _, name := range sortedKeys(t.Sets) {
		fr.sets = append(fr.sets, t.Sets[name])
	}
	return fr
}

// add merges a fragment into the table.
func (t *Table) add(f *fragment) {
	for _, c := range f.chains {
		t.Chains[c.Name] = c
	}
	for _, s := range f.sets {
		t.Sets[s.Name] = s
	}
	for _, e := range f.elems {
		t.AddElem(e.set, e.key, e.v, e.owner)
	}
}
