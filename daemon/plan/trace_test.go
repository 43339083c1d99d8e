package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
)

// This file is a packet-flow tracer over a *Table, in the spirit of kube-proxy's nftables
// helpers_test.go: it walks a new connection's first packet through the base chains in
// hook and priority order and interprets every Stmt type, so the packet-flow tests assert
// what happens to traffic (endpoint chosen, masquerade, REJECT, DROP) instead of how the
// rules are laid out. A statement type the tracer does not know fails the test: a new
// statement must be taught to it before a plan may use it.

// packet is the first packet of a new connection.
type packet struct {
	src, dst netip.Addr
	proto    model.Protocol
	dport    uint16
	// fromNode: sent by a process on the node (output path) rather than arriving from
	// outside (prerouting path).
	fromNode bool
}

// pkt builds a packet from outside; proto defaults to TCP.
func pkt(src, dst string, dport uint16) packet {
	return packet{src: netip.MustParseAddr(src), dst: netip.MustParseAddr(dst), proto: model.TCP, dport: dport}
}

func (p packet) udp() packet   { p.proto = model.UDP; return p }
func (p packet) local() packet { p.fromNode = true; return p }

func (p packet) String() string {
	from := "outside"
	if p.fromNode {
		from = "node"
	}
	return fmt.Sprintf("%s %s -> %s (from %s)", p.proto, p.src, netip.AddrPortFrom(p.dst, p.dport), from)
}

// Verdicts of a trace that did not end at an endpoint.
const (
	traceAccept = "ACCEPT" // left untouched
	traceReject = "REJECT"
	traceDrop   = "DROP"
)

// outcome is what happened to a packet: "ACCEPT", "REJECT", "DROP", or the endpoint it was
// DNATed to ("10.0.0.1:80", "[fd00::1]:80"), and whether it was masqueraded.
type outcome struct {
	Result string
	Masq   bool
	// Matched lists the rules that fired, chain by chain, for failure messages.
	Matched []string
}

func (o outcome) String() string {
	if o.Masq {
		return o.Result + " (masqueraded)"
	}
	return o.Result
}

// tracer runs packets through one table. Its affinity state (the contents of dynamic
// sets) is kept across traces, as the kernel keeps it across connections.
type tracer struct {
	t     testing.TB
	table *Table
	// local are the node's addresses: what "fib ... type local" matches, and where a
	// packet is delivered (input) rather than forwarded.
	local []netip.Addr
	// choose picks numgen's result in [0, mod); nil always picks 0.
	choose func(mod uint32) uint32
	// dynamic holds the addresses the data path added to dynamic sets.
	dynamic map[string]map[netip.Addr]bool
	// fail reports a tracer or plan error; it must not return. Defaults to t.Fatalf.
	fail func(format string, args ...any)
}

func newTracer(t testing.TB, table *Table, local ...string) *tracer {
	tr := &tracer{t: t, table: table, dynamic: map[string]map[netip.Addr]bool{}}
	for _, a := range local {
		tr.local = append(tr.local, netip.MustParseAddr(a))
	}
	tr.fail = func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format, args...)
	}
	return tr
}

// ending is how evaluating a chain ended.
type ending int

const (
	endContinue ending = iota // fell off the end or returned: the caller goes on
	endAccept                 // accept verdict, or a NAT statement ended the base chain
	endDrop
	endReject
)

// run is one packet's walk; it owns the packet's mutable state.
type run struct {
	tr      *tracer
	p       packet
	hook    *Hook
	mark    uint32
	dnat    netip.AddrPort
	masq    bool
	choose  func(mod uint32) uint32
	dynamic map[string]map[netip.Addr]bool
	matched []string
	counted []string // the counters passed, in order
	depth   int
}

func lastEndpointCounter(counted []string) string {
	for _, name := range slices.Backward(counted) {
		if strings.HasPrefix(name, "endpoint-") {
			return name
		}
	}
	return ""
}

// endpointChoice is a chooser for one trace that takes a service's k-th endpoint: the
// chain's first k Pick rules decline, the next one takes.
func endpointChoice(k int) func(uint32) uint32 {
	n := 0
	return func(uint32) uint32 {
		if n++; n <= k {
			return 1
		}
		return 0
	}
}

// trace runs one packet and keeps the affinity state it creates.
func (tr *tracer) trace(p packet) outcome {
	tr.t.Helper()
	choose := tr.choose
	if choose == nil {
		choose = func(uint32) uint32 { return 0 }
	}
	return tr.walk(p, choose, tr.dynamic)
}

// all runs the packet once for every combination of numgen choices, each from the current
// affinity state and without changing it, and returns every outcome in choice order.
func (tr *tracer) all(p packet) []outcome {
	tr.t.Helper()
	var out []outcome
	var explore func(prefix []uint32)
	explore = func(prefix []uint32) {
		var mods []uint32
		choose := func(mod uint32) uint32 {
			i := len(mods)
			mods = append(mods, mod)
			if i < len(prefix) {
				return prefix[i]
			}
			return 0
		}
		out = append(out, tr.walk(p, choose, cloneDynamic(tr.dynamic)))
		// The run just made took choice 0 past the prefix; branch on every other one.
		for j := len(prefix); j < len(mods); j++ {
			for c := uint32(1); c < mods[j]; c++ {
				next := append(append(slices.Clone(prefix), make([]uint32, j-len(prefix))...), c)
				explore(next)
			}
		}
	}
	explore(nil)
	return out
}

// results lists the distinct results of all(p), sorted, with a masquerade marker.
func (tr *tracer) results(p packet) []string {
	tr.t.Helper()
	var out []string
	for _, o := range tr.all(p) {
		out = append(out, o.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func cloneDynamic(d map[string]map[netip.Addr]bool) map[string]map[netip.Addr]bool {
	out := make(map[string]map[netip.Addr]bool, len(d))
	for k, v := range d {
		out[k] = maps.Clone(v)
	}
	return out
}

// Hooks a packet passes, in order. A packet from outside is routed after prerouting: to
// input when its (possibly DNATed) destination is local, else through forward and
// postrouting. A packet from the node passes output and postrouting, then input when it
// is delivered locally (over loopback).
func (tr *tracer) walk(p packet, choose func(uint32) uint32, dynamic map[string]map[netip.Addr]bool) outcome {
	tr.t.Helper()
	r := &run{tr: tr, p: p, choose: choose, dynamic: dynamic}
	tr.checkBaseChains()
	var hooks []string
	if p.fromNode {
		hooks = []string{"output", "postrouting"}
	} else {
		hooks = []string{"prerouting"}
	}
	for i := 0; i < len(hooks); i++ {
		for _, c := range tr.baseChains(hooks[i]) {
			switch r.base(c) {
			case endDrop:
				return r.outcome(traceDrop)
			case endReject:
				return r.outcome(traceReject)
			}
		}
		switch {
		case hooks[i] == "prerouting" && tr.isLocal(r.dst()):
			hooks = append(hooks, "input")
		case hooks[i] == "prerouting":
			hooks = append(hooks, "forward", "postrouting")
		case hooks[i] == "postrouting" && p.fromNode && tr.isLocal(r.dst()):
			hooks = append(hooks, "input")
		}
	}
	if r.dnat.IsValid() {
		return r.outcome(r.dnat.String())
	}
	return r.outcome(traceAccept)
}

func (r *run) outcome(result string) outcome {
	return outcome{Result: result, Masq: r.masq, Matched: r.matched}
}

func (r *run) dst() netip.Addr {
	if r.dnat.IsValid() {
		return r.dnat.Addr()
	}
	return r.p.dst
}

func (r *run) dport() uint16 {
	if r.dnat.IsValid() {
		return r.dnat.Port()
	}
	return r.p.dport
}

var knownHooks = []string{"prerouting", "input", "forward", "output", "postrouting"}

// checkBaseChains fails on a base chain the tracer would not walk.
func (tr *tracer) checkBaseChains() {
	tr.t.Helper()
	for _, c := range tr.table.Chains {
		if c.Hook == nil {
			continue
		}
		if !slices.Contains(knownHooks, c.Hook.Hook) || (c.Hook.Type != "filter" && c.Hook.Type != "nat") {
			tr.fail("tracer: base chain %s has hook %+v the tracer does not walk", c.Name, *c.Hook)
		}
	}
}

// baseChains returns the base chains of a hook by priority.
func (tr *tracer) baseChains(hook string) []*Chain {
	var out []*Chain
	for _, c := range tr.table.Chains {
		if c.Hook != nil && c.Hook.Hook == hook {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *Chain) int {
		if a.Hook.Priority != b.Hook.Priority {
			return a.Hook.Priority - b.Hook.Priority
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

func (tr *tracer) isLocal(a netip.Addr) bool { return slices.Contains(tr.local, a) }

// base evaluates one base chain; its policy is accept.
func (r *run) base(c *Chain) ending {
	r.hook = c.Hook
	r.depth = 0
	return r.chain(c)
}

// chain evaluates a chain's rules. A jump that comes back goes on with the next rule; a
// goto hands the rest of this chain's evaluation to its target, so whatever the target
// ends with is what this chain ends with.
func (r *run) chain(c *Chain) ending {
	r.tr.t.Helper()
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > 32 {
		r.tr.fail("tracer: chain nesting deeper than 32 at %s (a loop?)", c.Name)
	}
	for _, rule := range c.Rules {
		if f, done := r.rule(c, rule); done {
			return f
		}
	}
	return endContinue
}

// rule evaluates one rule's statements left to right. done is true when a verdict or a
// terminal statement ended the chain.
func (r *run) rule(c *Chain, rule Rule) (f ending, done bool) {
	r.tr.t.Helper()
	fam := r.tr.table.Family
	fired := func() { r.matched = append(r.matched, c.Name+": "+rule.String(fam)) }
	for _, s := range rule {
		switch s := s.(type) {
		case CtStateNew:
			// Every traced packet starts a new connection.
		case CtStatusDNAT:
			if !r.dnat.IsValid() {
				return endContinue, false
			}
		case MatchKeySet:
			if !r.inKeySet(s) {
				return endContinue, false
			}
		case MatchAddr:
			a := r.dst()
			if s.Source {
				a = r.p.src
			}
			if s.Prefix.Contains(a) == s.Not {
				return endContinue, false
			}
		case MatchAddrSet:
			a := r.dst()
			if s.Source {
				a = r.p.src
			}
			if !r.inSet(s.Set, a) {
				return endContinue, false
			}
		case MatchFibLocal:
			a := r.dst()
			if s.Source {
				a = r.p.src
			}
			if !r.tr.isLocal(a) {
				return endContinue, false
			}
		case MatchProto:
			if s.Proto != r.p.proto.Number() {
				return endContinue, false
			}
		case MatchMarkClear:
			if r.mark&s.Bit != 0 {
				return endContinue, false
			}
		case SetMark:
			r.mark |= s.Bit
		case ClearMark:
			r.mark ^= s.Bit
		case Counter:
			if s.Name == "" || len(s.Name) > MaxComment {
				r.tr.fail("tracer: %s: counter named %q: no comment the dashboard can find", c.Name, s.Name)
			}
			r.counted = append(r.counted, s.Name)
		case UpdateSource:
			set := r.set(s.Set)
			if !set.Dynamic || set.Key != KeyAddr {
				r.tr.fail("tracer: %s: update of set %q, which is not a dynamic address set", c.Name, s.Set)
			}
			if r.dynamic[s.Set] == nil {
				r.dynamic[s.Set] = map[netip.Addr]bool{}
			}
			r.dynamic[s.Set][r.p.src] = true
		case VMap:
			m := r.set(s.Map)
			if !m.Map || m.Key != s.Key {
				r.tr.fail("tracer: %s: vmap over %q, which is not a map keyed like %v", c.Name, s.Map, s.Key)
			}
			v, ok := r.lookup(m)
			if !ok {
				return endContinue, false
			}
			fired()
			return r.verdict(v)
		case Numgen:
			m := r.set(s.Map)
			if !m.Map || m.Key != KeyIndex {
				r.tr.fail("tracer: %s: numgen over %q, which is not an index map", c.Name, s.Map)
			}
			i := r.choose(s.Mod)
			if i >= s.Mod {
				r.tr.fail("tracer: chooser returned %d for numgen mod %d", i, s.Mod)
			}
			v, ok := lookupIndex(m, i)
			if !ok {
				// The kernel would let the packet fall through unbalanced: a plan bug.
				r.tr.fail("tracer: %s: numgen mod %d picked %d, which map %q lacks", c.Name, s.Mod, i, s.Map)
			}
			fired()
			return r.verdict(v)
		case Pick:
			i := r.choose(s.Mod)
			if i >= s.Mod {
				r.tr.fail("tracer: chooser returned %d for numgen mod %d", i, s.Mod)
			}
			if i != 0 {
				return endContinue, false
			}
		case DNAT:
			if r.hook.Type != "nat" || (r.hook.Hook != "prerouting" && r.hook.Hook != "output") {
				r.tr.fail("tracer: %s: dnat in a %s %s chain", c.Name, r.hook.Type, r.hook.Hook)
			}
			if s.Proto != r.p.proto.Number() {
				return endContinue, false
			}
			if model.FamilyOf(s.To.Addr()) != fam {
				r.tr.fail("tracer: %s: dnat to %s in a %v table", c.Name, s.To, fam)
			}
			// The dashboard counts an endpoint's connections by its counter's name: the
			// last endpoint counter the packet passed must be this endpoint's.
			// (Only plans name their chains so; the tracer's own tests have no counters.)
			ep := lastEndpointCounter(r.counted)
			planned := strings.HasPrefix(c.Name, "service-") || strings.HasPrefix(c.Name, "local-") || strings.HasPrefix(c.Name, "endpoint-")
			if (ep != "" || planned) && !strings.HasSuffix(ep, fmt.Sprintf("__%s/%d", s.To.Addr(), s.To.Port())) {
				r.tr.fail("tracer: %s: dnat to %s counted by %q, not by that endpoint's counter", c.Name, s.To, ep)
			}
			fired()
			r.dnat = s.To
			return endAccept, true
		case Masquerade:
			if r.hook.Type != "nat" || r.hook.Hook != "postrouting" {
				r.tr.fail("tracer: %s: masquerade in a %s %s chain", c.Name, r.hook.Type, r.hook.Hook)
			}
			fired()
			r.masq = true
			return endAccept, true
		case RejectStmt:
			if s.TCPReset && r.p.proto != model.TCP {
				return endContinue, false
			}
			if r.hook.Type != "filter" {
				r.tr.fail("tracer: %s: reject in a %s chain", c.Name, r.hook.Type)
			}
			fired()
			return endReject, true
		case Do:
			fired()
			return r.verdict(s.Verdict)
		default:
			r.tr.fail("tracer: %s: statement %T (%q) is unknown to the tracer; teach it", c.Name, s, s.nft(fam))
		}
	}
	fired()
	return endContinue, false
}

// verdict applies a verdict; done reports whether the current chain ends.
func (r *run) verdict(v Verdict) (ending, bool) {
	r.tr.t.Helper()
	switch v.Kind {
	case VerdictAccept:
		return endAccept, true
	case VerdictDrop:
		return endDrop, true
	case VerdictReturn:
		return endContinue, true
	case VerdictJump, VerdictGoto:
		target := r.tr.table.Chains[v.Chain]
		if target == nil {
			r.tr.fail("tracer: %s to missing chain %q", v, v.Chain)
		}
		if target.Hook != nil {
			r.tr.fail("tracer: %s to base chain %q", v, v.Chain)
		}
		f := r.chain(target)
		if v.Kind == VerdictJump && f == endContinue {
			return endContinue, false
		}
		return f, true
	}
	r.tr.fail("tracer: verdict kind %d is unknown to the tracer", v.Kind)
	return endContinue, true
}

func (r *run) set(name string) *Set {
	r.tr.t.Helper()
	s := r.tr.table.Sets[name]
	if s == nil {
		r.tr.fail("tracer: missing set %q", name)
	}
	return s
}

// inSet looks an address up in a named address set, dynamic state included.
func (r *run) inSet(name string, a netip.Addr) bool {
	s := r.set(name)
	if s.Key != KeyAddr || s.Map {
		r.tr.fail("tracer: address lookup in %q, which is not an address set", name)
	}
	if r.dynamic[name][a] {
		return true
	}
	return slices.ContainsFunc(s.Elems, func(e Elem) bool { return e.Key.Addr == a })
}

// inKeySet looks the packet's key up in a named set that is not an address set.
func (r *run) inKeySet(m MatchKeySet) bool {
	s := r.set(m.Set)
	if s.Map || s.Key != m.Key {
		r.tr.fail("tracer: %s lookup in %q, a set of another key", keyExpr(m.Key, r.tr.table.Family), m.Set)
	}
	if m.Key != KeyHairpin {
		r.tr.fail("tracer: lookups of key kind %d are unknown to the tracer; teach it", m.Key)
	}
	src := r.p.src
	return src == r.dst() && slices.ContainsFunc(s.Elems, func(e Elem) bool { return e.Key.Addr == src })
}

// lookup finds the packet's key in a verdict map.
func (r *run) lookup(m *Set) (Verdict, bool) {
	want := Key{Addr: r.dst(), Proto: r.p.proto.Number(), Port: r.dport()}
	for _, e := range m.Elems {
		k := e.Key
		var hit bool
		switch m.Key {
		case KeyAddr:
			hit = k.Addr == want.Addr
		case KeyAddrProtoPort:
			hit = k.Addr == want.Addr && k.Proto == want.Proto && k.Port == want.Port
		case KeyProtoPort:
			hit = k.Proto == want.Proto && k.Port == want.Port
		default:
			r.tr.fail("tracer: packet lookup in index map %q", m.Name)
		}
		if hit {
			return e.Verdict, true
		}
	}
	return Verdict{}, false
}

func lookupIndex(m *Set, i uint32) (Verdict, bool) {
	for _, e := range m.Elems {
		if e.Key.Index == i {
			return e.Verdict, true
		}
	}
	return Verdict{}, false
}
