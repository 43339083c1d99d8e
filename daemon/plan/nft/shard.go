package nft

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/edgegate/edgegate/daemon/model"
)

// Splitting the service dispatch over several tables.
//
// Every nftables commit that adds a rule with a jump, a NAT or a meta expression (any
// endpoint change does) makes the kernel (6.1 to 6.18) validate the whole table again,
// walking every chain reachable from each of its base chains: at 10,000 Services of 10
// endpoints ~28 ms per NAT base chain, ~50 ms per commit, however small the change. A
// table per group of Services bounds that walk by the group's size. So once a family's
// dispatch holds more endpoint rules than Shards.PerTable, the table `edgegate` keeps
// the filter hooks, the masquerading and the maps they read, and the Services' NAT
// dispatch (their service, local, external and endpoint chains, affinity sets, and their
// elements of service-ips and service-nodeports) is spread over the tables
// `edgegate-services-0` to `edgegate-services-<n-1>` by a hash of the Service's namespace
// and name, each table with its own nat-prerouting and nat-output chains at the dstnat
// priority and, where it holds node ports, nat-prerouting-nodeports and
// nat-output-nodeports one after it: a Service IP in any table still wins over a node
// port, as in one table's services chain. The kernel's NAT hook runs those chains in
// turn until one has DNATed the connection's first packet, so a new connection to a
// Service costs up to n map lookups instead of one; packets of established connections
// do not pass NAT chains.
//
// A small cluster keeps the one table of kube-proxy's layout.

// ShardTablePrefix starts the names of the tables a split dispatch is spread over.
const ShardTablePrefix = TableName + "-services-"

// Names of a shard table's node-port base chains.
const (
	ChainNATPreroutingNodePorts = "nat-prerouting-nodeports"
	ChainNATOutputNodePorts     = "nat-output-nodeports"
)

// MaxShards bounds the number of tables a family's dispatch is split over.
const MaxShards = 64

// DefaultPerTable is how many endpoint rules a table holds before the dispatch is split:
// the kernel then validates one in ~2 ms.
const DefaultPerTable = 4096

// IsShardTable reports whether name is one of the tables a split dispatch is spread over.
func IsShardTable(name string) bool {
	if len(name) <= len(ShardTablePrefix) || name[:len(ShardTablePrefix)] != ShardTablePrefix {
		return false
	}
	for _, c := range name[len(ShardTablePrefix):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ModeTable reports whether a table of that name is the nftables mode's: its table or
// one of the tables a split dispatch is spread over.
func ModeTable(name string) bool { return name == TableName || IsShardTable(name) }

// ShardTable names shard k's table.
func ShardTable(k int) string { return fmt.Sprintf("%s%d", ShardTablePrefix, k) }

// ShardOf returns the shard, of n, that holds a Service's dispatch.
func ShardOf(svc model.ServiceName, n int) int {
	h := fnv.New32a()
	h.Write([]byte(svc.Namespace))
	h.Write([]byte{'/'})
	h.Write([]byte(svc.Name))
	return int(h.Sum32() % uint32(n))
}

// splitChains are the logical table's chains that a split table does not hold: each
// shard has its own.
var splitChains = map[string]bool{"nat-prerouting": true, "nat-output": true, ChainServices: true}

// splitMaps are the logical table's maps whose elements go to the shard of the chain they
// lead to.
var splitMaps = map[string]bool{MapServiceIPs: true, MapServiceNodePorts: true}

// Shards splits the tables one Planner plans for a family into the tables the kernel
// holds (see above). Splitting a planned table that carries a Delta from the one split
// before touches only the tables the change does, and gives each a Delta from the table
// it replaces; the others are returned as the same values.
//
// Shards is not safe for concurrent use.
type Shards struct {
	// PerTable is how many endpoint rules (the dispatch chains' rules) one table may hold
	// before the dispatch is split; 0 never splits.
	PerTable int

	n     int      // tables the dispatch is split over now; 1: not split
	rules int      // dispatch rules in from
	from  *Table   // the planned table split last
	last  []*Table // its split: the main table, then the shards in order
}

// Tables returns how many tables the dispatch is split over now (1: not split).
func (s *Shards) Tables() int { return max(s.n, 1) }

// shardsFor is the number of tables for a dispatch of rules rules.
func (s *Shards) shardsFor(rules int) int {
	if s.PerTable <= 0 || rules <= s.PerTable {
		return 1
	}
	n := 2
	for n*s.PerTable < rules && n < MaxShards {
		n *= 2
	}
	return n
}

// resize picks the number of tables for a dispatch of rules rules: more as soon as the
// tables are full, fewer only once the dispatch would fit into a quarter of them, so that
// a size near a boundary does not move every Service back and forth.
func (s *Shards) resize(rules int) int {
	want := s.shardsFor(rules)
	if s.n == 0 || want > s.n || want*4 <= s.n {
		return want
	}
	return s.n
}

// Split returns the tables that hold t's rules: t itself while the dispatch is not split.
func (s *Shards) Split(t *Table) []*Table {
	d := t.Delta
	if d == nil || d.From != s.from || s.from == nil {
		return s.splitAll(t)
	}
	rules := s.rules
	for name := range d.Chains {
		if splitChains[name] {
			return s.splitAll(t) // the layout itself changed
		}
		rules += dispatchRules(t.Chains[name]) - dispatchRules(d.From.Chains[name])
	}
	if n := s.resize(rules); n != s.n {
		return s.splitAll(t)
	}
	if s.n == 1 {
		s.rules, s.from, s.last = rules, t, []*Table{t}
		return s.last
	}
	out, ok := s.splitDelta(t)
	if !ok {
		return s.splitAll(t)
	}
	s.rules, s.from, s.last = rules, t, out
	return out
}

func dispatchRules(c *Chain) int {
	if dispatchOf(c) == (model.ServiceName{}) {
		return 0
	}
	return len(c.Rules)
}

// splitAll splits t from scratch.
func (s *Shards) splitAll(t *Table) []*Table {
	rules := 0
	for _, c := range t.Chains {
		rules += dispatchRules(c)
	}
	s.n = s.resize(rules)
	s.rules, s.from = rules, t
	if s.n == 1 {
		s.last = []*Table{t}
		return s.last
	}
	main := &Table{Family: t.Family, Name: t.Name, Chains: map[string]*Chain{}, Sets: map[string]*Set{}}
	out := []*Table{main}
	for k := range s.n {
		out = append(out, newShard(t, k))
	}
	for name, c := range t.Chains {
		switch {
		case c.Dispatch != model.ServiceName{}:
			out[s.home(c.Dispatch)].Chains[name] = c
		case !splitChains[name]:
			main.Chains[name] = c
		}
	}
	for name, set := range t.Sets {
		switch {
		case set.Dispatch != model.ServiceName{}:
			out[s.home(set.Dispatch)].Sets[name] = set
		case splitMaps[name]:
			for _, e := range set.Elems {
				// An element leading elsewhere than to a dispatch chain would be a plan
				// bug: it goes to the first shard, where the kernel refuses it.
				sh := out[max(1, s.home(dispatchOf(t.Chains[e.Verdict.Chain])))]
				sh.Sets[name].Elems = append(sh.Sets[name].Elems, e)
			}
		default:
			main.Sets[name] = set
		}
	}
	for _, sh := range out[1:] {
		sh.nodePortChains(t)
	}
	s.last = out
	return out
}

// newShard makes shard k's table with the layout's own chains and empty maps.
func newShard(t *Table, k int) *Table {
	sh := &Table{Family: t.Family, Name: ShardTable(k), Chains: map[string]*Chain{}, Sets: map[string]*Set{}}
	for _, name := range []string{"nat-prerouting", "nat-output", ChainMarkMasq} {
		sh.Chains[name] = t.Chains[name]
	}
	// The services chain's first rule looks the Service IPs up; the node-port rules after
	// it go to the node-port chains.
	svc := t.Chains[ChainServices]
	sh.Chains[ChainServices] = &Chain{Name: ChainServices, Rules: svc.Rules[:1]}
	for name := range splitMaps {
		m := *t.Sets[name]
		m.Elems = nil
		sh.Sets[name] = &m
	}
	return sh
}

// nodePortChains gives a shard its node-port base chains while its node-port map has
// elements, and takes them away when it has none: only a shard that holds node ports
// makes new connections look them up.
func (sh *Table) nodePortChains(planned *Table) {
	has := len(sh.Sets[MapServiceNodePorts].Elems) > 0
	if _, had := sh.Chains[ChainNATPreroutingNodePorts]; had == has {
		return
	}
	for _, c := range []struct{ name, hook string }{
		{ChainNATPreroutingNodePorts, "prerouting"}, {ChainNATOutputNodePorts, "output"},
	} {
		if sh.Delta != nil {
			sh.Delta.Chains[c.name] = true
		}
		if !has {
			delete(sh.Chains, c.name)
			continue
		}
		sh.Chains[c.name] = &Chain{Name: c.name, Hook: &Hook{"nat", c.hook, PrioDstNAT + 1},
			Rules: planned.Chains[ChainServices].Rules[1:]}
	}
}

// home is the index in a split of the table that holds a Service's dispatch: 0, the main
// table, for the zero Service (the layout's own chains and sets).
func (s *Shards) home(svc model.ServiceName) int {
	if svc == (model.ServiceName{}) {
		return 0
	}
	return 1 + ShardOf(svc, s.n)
}

// dispatchOf is a chain's Dispatch; zero for none.
func dispatchOf(c *Chain) model.ServiceName {
	if c == nil {
		return model.ServiceName{}
	}
	return c.Dispatch
}

// splitDelta applies t's Delta to the last split; false if it cannot (a split map's
// changes are not listed, or an element leads to a chain no shard holds).
func (s *Shards) splitDelta(t *Table) ([]*Table, bool) {
	d := t.Delta
	out := slices.Clone(s.last)
	edit := func(i int) *Table {
		if out[i] != s.last[i] {
			return out[i]
		}
		prev := s.last[i]
		x := &Table{Family: prev.Family, Name: prev.Name, Chains: maps.Clone(prev.Chains), Sets: maps.Clone(prev.Sets),
			Delta: &Delta{From: prev, Chains: map[string]bool{}, Sets: map[string]bool{}}}
		out[i] = x
		return x
	}
	for name := range d.Chains {
		if old := d.From.Chains[name]; old != nil {
			x := edit(s.home(old.Dispatch))
			delete(x.Chains, name)
			x.Delta.Chains[name] = true
		}
		if c := t.Chains[name]; c != nil {
			x := edit(s.home(c.Dispatch))
			x.Chains[name] = c
			x.Delta.Chains[name] = true
		}
	}
	for name := range d.Sets {
		if splitMaps[name] {
			ch, ok := d.Elems[name]
			if !ok {
				return nil, false
			}
			byShard := map[int]*ElemChanges{}
			route := func(chains map[string]*Chain, e Elem) (*ElemChanges, bool) {
				i := s.home(dispatchOf(chains[e.Verdict.Chain]))
				if i == 0 {
					return nil, false
				}
				if byShard[i] == nil {
					byShard[i] = &ElemChanges{}
				}
				return byShard[i], true
			}
			for _, e := range ch.Del {
				c, ok := route(d.From.Chains, e)
				if !ok {
					return nil, false
				}
				c.Del = append(c.Del, e)
			}
			for _, e := range ch.Add {
				c, ok := route(t.Chains, e)
				if !ok {
					return nil, false
				}
				c.Add = append(c.Add, e)
			}
			for i, c := range byShard {
				edit(i).replaceElems(name, *c)
			}
			continue
		}
		if old := d.From.Sets[name]; old != nil {
			x := edit(s.home(old.Dispatch))
			delete(x.Sets, name)
			x.Delta.Sets[name] = true
		}
		if set := t.Sets[name]; set != nil {
			x := edit(s.home(set.Dispatch))
			x.Sets[name] = set
			x.Delta.Sets[name] = true
			if ch, ok := d.Elems[name]; ok {
				if x.Delta.Elems == nil {
					x.Delta.Elems = map[string]ElemChanges{}
				}
				x.Delta.Elems[name] = ch
			}
		}
	}
	for i, x := range out[1:] {
		if x != s.last[1+i] {
			x.nodePortChains(t)
		}
	}
	return out, true
}
