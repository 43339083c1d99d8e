// Package nft programs edgegate's nftables plan (package plan) into the kernel through
// netlink with google/nftables: one atomic batch per sync, full or incremental.
package nft

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"

	"github.com/edgegate/edgegate/daemon/kernel/nlbatch"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// Ruleset is what the proxy needs from an nftables backend; Kernel and Fake implement it.
type Ruleset interface {
	// Apply makes the kernel hold exactly the given tables. A full apply rewrites every
	// chain and map and removes anything else found in edgegate's tables (repairing edits
	// made by hand); an incremental one sends only what differs from the last apply.
	// On error the kernel keeps its previous rules and the next apply is full.
	Apply(tables []*nftplan.Table, full bool) (Stats, error)
	// Cleanup removes every table edgegate programs, whatever their content.
	Cleanup() error
}

// Stats describes one apply.
type Stats struct {
	Full bool
	// Recreated: a full apply deleted and recreated the tables in its batch (a set had
	// changed type); dynamic sets and counters started afresh.
	Recreated bool
	Chains    int // chains written (added or rewritten)
	Elements  int // map and set elements added or removed
	Deleted   int // chains, sets and named objects deleted
	// Kernel is the time the kernel took over the batch: from its sendmsg to its last
	// acknowledgement read (both batches', when the tables were recreated).
	Kernel time.Duration
}

// Kernel is the netlink-backed Ruleset.
type Kernel struct {
	mu      sync.Mutex
	applied map[tableKey]*nftplan.Table
	dirty   bool
	sock    nlbatch.Socket // opened by the first apply, in its network namespace
}

var _ Ruleset = (*Kernel)(nil)

// New returns a Kernel backend for the current network namespace.
func New() *Kernel { return &Kernel{applied: map[tableKey]*nftplan.Table{}, dirty: true} }

// dial opens a netlink connection for reading the kernel's tables and for small batches
// (Cleanup); a sync's batch goes through nlbatch. A dump of a large table arrives while it
// is read, a few MiB of buffer are plenty (a limit, not an allocation); extended acks name
// the attribute the kernel refused.
func dial() (*nftables.Conn, error) {
	c, err := nftables.New(nftables.WithSockOptions(func(nc *netlink.Conn) error {
		if err := nc.SetReadBuffer(4 << 20); err != nil {
			return err
		}
		return nc.SetOption(netlink.ExtendedAcknowledge, true)
	}))
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	return c, nil
}

func secondsDuration(s uint32) time.Duration { return time.Duration(s) * time.Second }

// Apply implements Ruleset.
func (k *Kernel) Apply(tables []*nftplan.Table, full bool) (Stats, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	full = full || k.dirty
	st, err := k.apply(tables, full, false)
	if err != nil && full {
		// The kernel refused to rewrite a table in place: a set changed type (an upgrade
		// changed a key) in a way the read-back could not show (see sameSetType). Start
		// the tables afresh, still in one batch.
		var again error
		first := st.Kernel
		st, again = k.apply(tables, true, true)
		st.Kernel += first
		if again == nil {
			err = nil
		} else {
			err = fmt.Errorf("%w; recreating the tables: %w", err, again)
		}
	}
	if err != nil {
		k.dirty = true
		return st, err
	}
	// The families written hold exactly their tables now; the others are as they were.
	written := families(tables)
	maps.DeleteFunc(k.applied, func(key tableKey, _ *nftplan.Table) bool { return slices.Contains(written, key.family) })
	for _, t := range tables {
		k.applied[keyOf(t)] = t
	}
	k.dirty = false
	return st, nil
}

// apply sends one batch; recreate deletes and recreates each existing table in it.
func (k *Kernel) apply(tables []*nftplan.Table, full, recreate bool) (Stats, error) {
	read, err := dial()
	if err != nil {
		return Stats{}, err
	}
	nb, err := nlbatch.New()
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Full: full}
	kr := &kernelRead{conn: read}
	wanted := map[tableKey]bool{}
	for _, t := range tables {
		wanted[keyOf(t)] = true
		prev := k.applied[keyOf(t)]
		if !full && prev == t {
			continue // a split table the change did not touch
		}
		b := &batch{conn: nb.Conn(), nb: nb, rules: newRuleWriter(t.Family, t.Name), read: kr, want: t,
			table: &nftables.Table{Name: t.Name, Family: tableFamily(t.Family)}, st: &st}
		if full {
			err = b.full(recreate, prev)
		} else {
			err = b.partial(prev)
		}
		if err != nil {
			return st, fmt.Errorf("%s table %s: %w", t.Family, t.Name, err)
		}
	}
	gone, err := k.staleTables(kr, tables, wanted, full)
	if err != nil {
		return st, err
	}
	for _, key := range gone {
		nb.Conn().DelTable(&nftables.Table{Name: key.name, Family: tableFamily(key.family)})
		st.Deleted++
	}
	st.Kernel, err = nb.Commit(&k.sock, full)
	return st, err
}

// Cleanup implements Ruleset.
func (k *Kernel) Cleanup() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dirty = true
	k.applied = map[tableKey]*nftplan.Table{}
	conn, err := dial()
	if err != nil {
		return err
	}
	tables, err := conn.ListTables()
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	n := 0
	for _, t := range tables {
		if owned(t.Name) && (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6) {
			conn.DelTable(t)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("delete tables: %w", err)
	}
	return nil
}

// batch queues the messages for one table into the pending batch.
type batch struct {
	conn  *nftables.Conn // queues the batch's messages but rules (nb.Conn)
	nb    *nlbatch.Batch
	rules *ruleWriter // encodes the rules, which nb.Add queues
	read  *kernelRead // reads what the kernel holds
	table *nftables.Table
	want  *nftplan.Table
	st    *Stats
}

func (b *batch) chainOf(c *nftplan.Chain) *nftables.Chain {
	nc := &nftables.Chain{Name: c.Name, Table: b.table}
	if h := c.Hook; h != nil {
		nc.Type = nftables.ChainType(h.Type)
		nc.Hooknum = hookOf(h.Hook)
		nc.Priority = nftables.ChainPriorityRef(nftables.ChainPriority(h.Priority))
	}
	return nc
}

func hookOf(h string) *nftables.ChainHook {
	switch h {
	case "prerouting":
		return nftables.ChainHookPrerouting
	case "input":
		return nftables.ChainHookInput
	case "forward":
		return nftables.ChainHookForward
	case "output":
		return nftables.ChainHookOutput
	}
	return nftables.ChainHookPostrouting
}

func (b *batch) addRules(c *nftplan.Chain) error {
	for i, r := range c.Rules {
		msg, err := b.rules.message(c.Name, r)
		if err != nil {
			return fmt.Errorf("chain %s rule %d: %w", c.Name, i, err)
		}
		if err := b.nb.Add(msg); err != nil {
			return err
		}
	}
	b.st.Chains++
	return nil
}

// full rewrites the whole table in place: existing sets are reused (so affinity entries
// survive), every chain and map is flushed and refilled (rule counters restart), and
// whatever the kernel holds beyond the plan is deleted. The batch is atomic for packets
// only so: a table deleted and created again in one batch is not, its base chains' hooks
// come and go separately, and for a moment packets meet a half-made table. recreate (or a
// set that changed type) does that nevertheless.
//
// prev is the table the last successful apply left, nil if none did in this process.
// The plan has no named objects, but earlier builds of edgegate gave every endpoint a
// named counter: the first full apply of a process deletes any object it finds. Later ones
// skip that dump, which costs the kernel time quadratic in their number (25 s for
// 110,000).
func (b *batch) full(recreate bool, prev *nftplan.Table) error {
	have, err := b.kernelObjects(prev == nil)
	if err != nil {
		return err
	}
	for name, old := range have.sets {
		if s, ok := b.want.Sets[name]; ok && !sameSetType(old, setOf(b.table, s, b.want.Family)) {
			recreate = true
		}
	}
	if recreate && have.exists {
		// A set cannot change type in place while rules use it: start the table afresh
		// in this same batch (affinity entries and counters restart).
		b.conn.DelTable(b.table)
		have = kernelObjects{}
		b.st.Recreated = true
	}
	b.conn.AddTable(b.table)
	for name := range have.chains {
		if _, ok := b.want.Chains[name]; !ok {
			b.conn.FlushChain(&nftables.Chain{Name: name, Table: b.table})
		}
	}
	// Chains exist before the map elements that jump to them and the rules that use them.
	chains := map[string]*nftables.Chain{}
	for _, name := range b.want.ChainNames() {
		chains[name] = b.conn.AddChain(b.chainOf(b.want.Chains[name]))
	}
	for _, name := range sortedNames(b.want.Sets) {
		s := b.want.Sets[name]
		ns := setOf(b.table, s, b.want.Family)
		if err := b.conn.AddSet(ns, nil); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
		if s.Dynamic {
			continue
		}
		if _, ok := have.sets[name]; ok {
			b.conn.FlushSet(ns)
		}
		if len(s.Elems) > 0 {
			if err := addElements(b.conn, ns, elemsOf(s, s.Elems)); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
			b.st.Elements += len(s.Elems)
		}
	}
	// Every chain is emptied before any is refilled: the rules are queued after all of
	// the library's messages, and each switch between the two costs a flush of its queue.
	for _, name := range b.want.ChainNames() {
		if have.chains[name] {
			b.conn.FlushChain(chains[name])
		}
	}
	for _, name := range b.want.ChainNames() {
		if err := b.addRules(b.want.Chains[name]); err != nil {
			return err
		}
	}
	for name := range have.sets {
		if _, ok := b.want.Sets[name]; !ok {
			b.conn.DelSet(&nftables.Set{Table: b.table, Name: name})
			b.st.Deleted++
		}
	}
	for _, o := range have.objects {
		b.conn.DeleteObject(&nftables.NamedObj{Table: b.table, Name: o.Name, Type: o.Type})
		b.st.Deleted++
	}
	for name := range have.chains {
		if _, ok := b.want.Chains[name]; !ok {
			b.conn.DelChain(&nftables.Chain{Name: name, Table: b.table})
			b.st.Deleted++
		}
	}
	return nil
}

// sameSetType reports whether a set the kernel holds (a, as read back) can take the wanted
// set's (b) elements in place.
//
// google/nftables (v0.3.0) reads a verdict map's data type into KeyType, losing the key's
// type and length: for those only the kinds compare. Taking such a map for unchanged made
// every full sync recreate the table (see full). A key that did change makes the kernel
// refuse the new elements, and Apply recreates the table then.
func sameSetType(a, b *nftables.Set) bool {
	keyKnown := !(a.IsMap && a.KeyType.Name == nftables.TypeVerdict.Name)
	return (!keyKnown || a.KeyType.Bytes == b.KeyType.Bytes) && a.IsMap == b.IsMap && a.HasTimeout == b.HasTimeout &&
		(!a.HasTimeout || a.Timeout == b.Timeout)
}

// partial sends only the difference between the last applied table and the wanted one.
// Order matters inside the batch: chains that change or go away are flushed first (they
// may refer to sets and chains that go away), then new objects are created, map elements
// are diffed, changed chains refilled, and finally removed objects deleted.
func (b *batch) partial(prev *nftplan.Table) error {
	if prev == nil {
		return b.full(false, nil)
	}
	want := b.want
	names := candidates(prev, want)
	// A set whose definition changed (only affinity timeouts do) is deleted and created
	// again, which the kernel allows only once no rule uses it: its users are rewritten.
	recreate := map[string]bool{}
	for _, name := range names.sets {
		s, ok := want.Sets[name]
		if old, had := prev.Sets[name]; ok && had && (old.Key != s.Key || old.Map != s.Map || old.Dynamic != s.Dynamic || old.Timeout != s.Timeout) {
			recreate[name] = true
		}
	}
	if len(recreate) > 0 {
		names = allNames(prev, want)
	}
	// A chain nftplan.Planner reused is the very same value: no need to compare its rules.
	changed, gone := map[string]bool{}, map[string]bool{}
	var added []string
	for _, name := range names.chains {
		c, ok := want.Chains[name]
		old, had := prev.Chains[name]
		switch {
		case !ok:
			gone[name] = had
		case !had:
			added = append(added, name)
			changed[name] = true
		case (old != c && !reflect.DeepEqual(old, c)) || (len(recreate) > 0 && usesAny(c, recreate)):
			changed[name] = true
		}
	}
	for _, name := range names.chains {
		if _, had := prev.Chains[name]; had && (changed[name] || gone[name]) {
			b.conn.FlushChain(&nftables.Chain{Name: name, Table: b.table})
		}
	}
	for _, name := range sortedNames(recreate) {
		b.conn.DelSet(&nftables.Set{Table: b.table, Name: name})
	}
	for _, name := range added {
		b.conn.AddChain(b.chainOf(want.Chains[name]))
	}
	for _, name := range names.sets {
		s, ok := want.Sets[name]
		if !ok {
			continue
		}
		ns := setOf(b.table, s, want.Family)
		old, had := prev.Sets[name]
		if !had || recreate[name] {
			if err := b.conn.AddSet(ns, nil); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
			if err := addElements(b.conn, ns, elemsOf(s, s.Elems)); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
			b.st.Elements += len(s.Elems)
			continue
		}
		if s.Dynamic || old == s {
			continue
		}
		var del, add []nftplan.Elem
		if ch, ok := want.Delta.ElemsFrom(prev, name); ok {
			del, add = ch.Del, ch.Add
		} else {
			del, add = diffElems(old.Elems, s.Elems)
		}
		if len(del) > 0 {
			if err := deleteElements(b.conn, ns, elemsOf(s, del)); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
		}
		if len(add) > 0 {
			if err := addElements(b.conn, ns, elemsOf(s, add)); err != nil {
				return fmt.Errorf("set %s: %w", name, err)
			}
		}
		b.st.Elements += len(del) + len(add)
	}
	// Base chains first, then the others, each by name (ChainNames' order).
	rewrite := slices.Collect(maps.Keys(changed))
	slices.SortFunc(rewrite, func(x, y string) int {
		if bx, by := want.Chains[x].Hook != nil, want.Chains[y].Hook != nil; bx != by {
			if bx {
				return -1
			}
			return 1
		}
		return strings.Compare(x, y)
	})
	for _, name := range rewrite {
		c := want.Chains[name]
		if err := b.addRules(c); err != nil {
			return err
		}
	}
	for _, name := range names.sets {
		if _, ok := want.Sets[name]; !ok {
			if _, had := prev.Sets[name]; had {
				b.conn.DelSet(&nftables.Set{Table: b.table, Name: name})
				b.st.Deleted++
			}
		}
	}
	for _, name := range names.chains {
		if gone[name] {
			b.conn.DelChain(&nftables.Chain{Name: name, Table: b.table})
			b.st.Deleted++
		}
	}
	return nil
}

// objectNames are the names a partial apply looks at, each list sorted.
type objectNames struct {
	chains, sets []string
}

// candidates are the objects that may differ between prev and want: what want's Delta
// lists when want was planned from prev (nftplan.Planner), else everything either holds.
func candidates(prev, want *nftplan.Table) objectNames {
	d := want.Delta
	if d == nil || d.From != prev {
		return allNames(prev, want)
	}
	return objectNames{chains: sortedNames(d.Chains), sets: sortedNames(d.Sets)}
}

func allNames(prev, want *nftplan.Table) objectNames {
	union := func(a, b []string) []string {
		return slices.Compact(slices.Sorted(slices.Values(append(a, b...))))
	}
	return objectNames{
		chains: union(slices.Collect(maps.Keys(prev.Chains)), slices.Collect(maps.Keys(want.Chains))),
		sets:   union(slices.Collect(maps.Keys(prev.Sets)), slices.Collect(maps.Keys(want.Sets))),
	}
}

func usesAny(c *nftplan.Chain, sets map[string]bool) bool {
	for _, r := range c.Rules {
		for _, s := range r.SetRefs() {
			if sets[s] {
				return true
			}
		}
	}
	return false
}

func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
