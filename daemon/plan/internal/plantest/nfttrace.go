package plantest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// This file is a packet-flow tracer over a *Table, in the spirit of kube-proxy's nftables
// helpers_test.go: it walks a new connection's first packet through the base chains in
// hook and priority order and interprets every Stmt type, so the packet-flow tests assert
// what happens to traffic (endpoint chosen, masquerade, REJECT, DROP) instead of how the
// rules are laid out. A statement type the tracer does not know fails the test: a new
// statement must be taught to it before a plan may use it.

// Packet is the first packet of a new connection.
type Packet struct {
	src, dst netip.Addr
	proto    model.Protocol
	dport    uint16
	// fromNode: sent by a process on the node (output path) rather than arriving from
	// outside (prerouting path).
	fromNode bool
	// notSyn: a TCP packet without SYN that conntrack has no entry for (a handshake's
	// last ACK, or a flow picked up in mid-stream); every other TCP packet is a SYN.
	notSyn bool
}

// Pkt builds a packet from outside; proto defaults to TCP.
func Pkt(src, dst string, dport uint16) Packet {
	return Packet{src: netip.MustParseAddr(src), dst: netip.MustParseAddr(dst), proto: model.TCP, dport: dport}
}

func (p Packet) UDP() Packet   { p.proto = model.UDP; return p }
func (p Packet) Local() Packet { p.fromNode = true; return p }

// NotSyn makes the packet a TCP packet without SYN that starts no tracked connection.
func (p Packet) NotSyn() Packet { p.notSyn = true; return p }

func (p Packet) String() string {
	from := "outside"
	if p.fromNode {
		from = "node"
	}
	return fmt.Sprintf("%s %s -> %s (from %s)", p.proto, p.src, netip.AddrPortFrom(p.dst, p.dport), from)
}

// Verdicts of a trace that did not end at an endpoint.
const (
	Accept = "ACCEPT" // left untouched
	Reject = "REJECT"
	Drop   = "DROP"
	// SynProxied: the kernel's synproxy answered (a SYN) or took (an ACK) the packet.
	SynProxied = "SYNPROXY"
)

// Outcome is what happened to a packet: "ACCEPT", "REJECT", "DROP", or the endpoint it was
// DNATed to ("10.0.0.1:80", "[fd00::1]:80"), and whether it was masqueraded.
type Outcome struct {
	Result string
	Masq   bool
	// Matched lists the rules that fired, chain by chain, for failure messages.
	Matched []string
}

func (o Outcome) String() string {
	if o.Masq {
		return o.Result + " (masqueraded)"
	}
	return o.Result
}

// NFTTracer runs packets through one table. Its affinity state (the contents of dynamic
// sets) is kept across traces, as the kernel keeps it across connections.
type NFTTracer struct {
	node  // local: what "fib ... type local" matches, and where input delivers
	table *nft.Table
	// Choose picks numgen's result in [0, mod); nil always picks 0.
	Choose func(mod uint32) uint32
	// dynamic holds the addresses the data path added to dynamic sets.
	dynamic addrSets
}

// NewNFTTracer returns a tracer over table for a node with the addresses local.
func NewNFTTracer(t testing.TB, table *nft.Table, local ...string) *NFTTracer {
	return &NFTTracer{node: newNode(t, local), table: table, dynamic: addrSets{}}
}

// ending is how evaluating a chain ended.
type ending int

const (
	endContinue ending = iota // fell off the end or returned: the caller goes on
	endAccept                 // accept verdict, or a NAT statement ended the base chain
	endDrop
	endReject
	endSynProxy
)

// run is one packet's walk; it owns the packet's mutable state.
type run struct {
	packetState
	tr      *NFTTracer
	hook    *nft.Hook
	choose  func(mod uint32) uint32
	dynamic addrSets
	counted []string // the counters passed, in order
	depth   int
	// untracked: notrack took the packet out of conntrack, so no NAT chain sees it and
	// its state is "untracked". natBound lists the hooks whose NAT chains are done with
	// the connection (a NAT statement bound it; the kernel runs no later one).
	untracked bool
	natBound  map[string]bool
}

func lastEndpointCounter(counted []string) string {
	for _, name := range slices.Backward(counted) {
		if strings.HasPrefix(name, "endpoint-") {
			return name
		}
	}
	return ""
}

// EndpointChoice is a chooser for one trace that takes a service's k-th endpoint: the
// chain's first k Pick rules decline, the next one takes.
func EndpointChoice(k int) func(uint32) uint32 {
	n := 0
	return func(uint32) uint32 {
		if n++; n <= k {
			return 1
		}
		return 0
	}
}

// Trace runs one packet and keeps the affinity state it creates.
func (tr *NFTTracer) Trace(p Packet) Outcome {
	tr.t.Helper()
	choose := tr.Choose
	if choose == nil {
		choose = func(uint32) uint32 { return 0 }
	}
	return tr.walk(p, choose, tr.dynamic)
}

// All runs the packet once for every combination of numgen choices, each from the current
// affinity state and without changing it, and returns every outcome in choice order.
func (tr *NFTTracer) All(p Packet) []Outcome {
	tr.t.Helper()
	var out []Outcome
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
		out = append(out, tr.walk(p, choose, tr.dynamic.clone()))
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

// Results lists the distinct results of All(p), sorted, with a masquerade marker.
func (tr *NFTTracer) Results(p Packet) []string {
	tr.t.Helper()
	return distinct(tr.All(p))
}

// Hooks a packet passes, in order. A packet from outside is routed after prerouting: to
// input when its (possibly DNATed) destination is local, else through forward and
// postrouting. A packet from the node passes output and postrouting, then input when it
// is delivered locally (over loopback).
func (tr *NFTTracer) walk(p Packet, choose func(uint32) uint32, dynamic addrSets) Outcome {
	tr.t.Helper()
	r := &run{packetState: packetState{p: p}, tr: tr, choose: choose, dynamic: dynamic, natBound: map[string]bool{}}
	tr.checkBaseChains()
	var hooks []string
	if p.fromNode {
		hooks = []string{"output", "postrouting"}
	} else {
		hooks = []string{"prerouting"}
	}
	for i := 0; i < len(hooks); i++ {
		for _, c := range tr.baseChains(hooks[i]) {
			if c.Hook.Type == "nat" && (r.untracked || r.natBound[c.Hook.Hook]) {
				continue
			}
			switch r.base(c) {
			case endDrop:
				return r.outcome(Drop)
			case endReject:
				return r.outcome(Reject)
			case endSynProxy:
				return r.outcome(SynProxied)
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
	return r.outcome(Accept)
}

var knownHooks = []string{"prerouting", "input", "forward", "output", "postrouting"}

// checkBaseChains fails on a base chain the tracer would not walk.
func (tr *NFTTracer) checkBaseChains() {
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
func (tr *NFTTracer) baseChains(hook string) []*nft.Chain {
	var out []*nft.Chain
	for _, c := range tr.table.Chains {
		if c.Hook != nil && c.Hook.Hook == hook {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *nft.Chain) int {
		if a.Hook.Priority != b.Hook.Priority {
			return a.Hook.Priority - b.Hook.Priority
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// base evaluates one base chain; its policy is accept.
func (r *run) base(c *nft.Chain) ending {
	r.hook = c.Hook
	r.depth = 0
	return r.chain(c)
}

// chain evaluates a chain's rules. A jump that comes back goes on with the next rule; a
// goto hands the rest of this chain's evaluation to its target, so whatever the target
// ends with is what this chain ends with.
func (r *run) chain(c *nft.Chain) ending {
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
func (r *run) rule(c *nft.Chain, rule nft.Rule) (f ending, done bool) {
	r.tr.t.Helper()
	fam := r.tr.table.Family
	fired := func() { r.matched = append(r.matched, c.Name+": "+rule.String(fam)) }
	for _, s := range rule {
		switch s := s.(type) {
		case nft.CtStateNew:
			// Every traced packet starts a new connection, unless it was not tracked.
			if r.untracked {
				return endContinue, false
			}
		case nft.MatchCtState:
			st := nft.CtNew
			if r.untracked {
				st = nft.CtUntracked
			}
			if s.States&st == 0 {
				return endContinue, false
			}
		case nft.MatchSynOnly:
			if r.p.proto != model.TCP || r.p.notSyn {
				return endContinue, false
			}
		case nft.MatchNotSyn:
			if r.p.proto != model.TCP || !r.p.notSyn {
				return endContinue, false
			}
		case nft.Notrack:
			if r.hook.Hook != "prerouting" && r.hook.Hook != "output" || r.hook.Priority > -200 {
				r.tr.fail("tracer: %s: notrack after conntrack (%s priority %d)", c.Name, r.hook.Hook, r.hook.Priority)
			}
			r.untracked = true
		case nft.SynProxy:
			if r.hook.Type != "filter" || (r.hook.Hook != "input" && r.hook.Hook != "forward") {
				r.tr.fail("tracer: %s: synproxy in a %s %s chain", c.Name, r.hook.Type, r.hook.Hook)
			}
			if r.p.proto != model.TCP {
				return endContinue, false
			}
			fired()
			return endSynProxy, true
		case nft.DNATSelf:
			if r.hook.Type != "nat" {
				r.tr.fail("tracer: %s: dnat in a %s chain", c.Name, r.hook.Type)
			}
			fired()
			r.natBound[r.hook.Hook] = true
			return endAccept, true
		case nft.OverSourceRate, nft.OverSourceConns:
			// One traced connection is never over a limit.
			return endContinue, false
		case nft.CtStatusDNAT:
			if !r.dnat.IsValid() {
				return endContinue, false
			}
		case nft.MatchKeySet:
			if !r.inKeySet(s) {
				return endContinue, false
			}
		case nft.MatchAddr:
			a := r.dst()
			if s.Source {
				a = r.p.src
			}
			if s.Prefix.Contains(a) == s.Not {
				return endContinue, false
			}
		case nft.MatchAddrSet:
			a := r.dst()
			if s.Source {
				a = r.p.src
			}
			if !r.inSet(s.Set, a) {
				return endContinue, false
			}
		case nft.MatchFibLocal:
			a := r.dst()
			if s.Source {
				a = r.p.src
			}
			if !r.tr.isLocal(a) {
				return endContinue, false
			}
		case nft.MatchProto:
			if s.Proto != r.p.proto.Number() {
				return endContinue, false
			}
		case nft.MatchMarkClear:
			if r.mark&s.Bit != 0 {
				return endContinue, false
			}
		case nft.SetMark:
			r.mark |= s.Bit
		case nft.ClearMark:
			r.mark ^= s.Bit
		case nft.Counter:
			if s.Name == "" || len(s.Name) > nft.MaxComment {
				r.tr.fail("tracer: %s: counter named %q: no comment the dashboard can find", c.Name, s.Name)
			}
			r.counted = append(r.counted, s.Name)
		case nft.UpdateSource:
			set := r.set(s.Set)
			if !set.Dynamic || set.Key != nft.KeyAddr {
				r.tr.fail("tracer: %s: update of set %q, which is not a dynamic address set", c.Name, s.Set)
			}
			r.dynamic.add(s.Set, r.p.src)
		case nft.VMap:
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
		case nft.Numgen:
			m := r.set(s.Map)
			if !m.Map || m.Key != nft.KeyIndex {
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
		case nft.Pick:
			i := r.choose(s.Mod)
			if i >= s.Mod {
				r.tr.fail("tracer: chooser returned %d for numgen mod %d", i, s.Mod)
			}
			if i != 0 {
				return endContinue, false
			}
		case nft.DNAT:
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
			r.natBound[r.hook.Hook] = true
			return endAccept, true
		case nft.Masquerade:
			if r.hook.Type != "nat" || r.hook.Hook != "postrouting" {
				r.tr.fail("tracer: %s: masquerade in a %s %s chain", c.Name, r.hook.Type, r.hook.Hook)
			}
			fired()
			r.masq = true
			return endAccept, true
		case nft.RejectStmt:
			if s.TCPReset && r.p.proto != model.TCP {
				return endContinue, false
			}
			if r.hook.Type != "filter" {
				r.tr.fail("tracer: %s: reject in a %s chain", c.Name, r.hook.Type)
			}
			fired()
			return endReject, true
		case nft.Do:
			fired()
			return r.verdict(s.Verdict)
		default:
			r.tr.fail("tracer: %s: statement %T (%q) is unknown to the tracer; teach it", c.Name, s, nft.Rule{s}.String(fam))
		}
	}
	fired()
	return endContinue, false
}

// verdict applies a verdict; done reports whether the current chain ends.
func (r *run) verdict(v nft.Verdict) (ending, bool) {
	r.tr.t.Helper()
	switch v.Kind {
	case nft.VerdictAccept:
		return endAccept, true
	case nft.VerdictDrop:
		return endDrop, true
	case nft.VerdictReturn:
		return endContinue, true
	case nft.VerdictJump, nft.VerdictGoto:
		target := r.tr.table.Chains[v.Chain]
		if target == nil {
			r.tr.fail("tracer: %s to missing chain %q", v, v.Chain)
		}
		if target.Hook != nil {
			r.tr.fail("tracer: %s to base chain %q", v, v.Chain)
		}
		f := r.chain(target)
		if v.Kind == nft.VerdictJump && f == endContinue {
			return endContinue, false
		}
		return f, true
	}
	r.tr.fail("tracer: verdict kind %d is unknown to the tracer", v.Kind)
	return endContinue, true
}

func (r *run) set(name string) *nft.Set {
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
	if s.Key != nft.KeyAddr || s.Map {
		r.tr.fail("tracer: address lookup in %q, which is not an address set", name)
	}
	if r.dynamic[name][a] {
		return true
	}
	return slices.ContainsFunc(s.Elems, func(e nft.Elem) bool { return e.Key.Addr == a })
}

// inKeySet looks the packet's key up in a named set that is not an address set.
func (r *run) inKeySet(m nft.MatchKeySet) bool {
	s := r.set(m.Set)
	if s.Map || s.Key != m.Key {
		r.tr.fail("tracer: %q: lookup in %q, a set of another key", nft.Rule{m}.String(r.tr.table.Family), m.Set)
	}
	switch m.Key {
	case nft.KeyAddrProtoPort, nft.KeyProtoPort:
		_, ok := r.lookup(s)
		return ok
	case nft.KeyHairpin:
	default:
		r.tr.fail("tracer: lookups of key kind %d are unknown to the tracer; teach it", m.Key)
	}
	src := r.p.src
	return src == r.dst() && slices.ContainsFunc(s.Elems, func(e nft.Elem) bool { return e.Key.Addr == src })
}

// lookup finds the packet's key in a verdict map.
func (r *run) lookup(m *nft.Set) (nft.Verdict, bool) {
	want := nft.Key{Addr: r.dst(), Proto: r.p.proto.Number(), Port: r.dport()}
	for _, e := range m.Elems {
		k := e.Key
		var hit bool
		switch m.Key {
		case nft.KeyAddr:
			hit = k.Addr == want.Addr
		case nft.KeyAddrProtoPort:
			hit = k.Addr == want.Addr && k.Proto == want.Proto && k.Port == want.Port
		case nft.KeyProtoPort:
			hit = k.Proto == want.Proto && k.Port == want.Port
		default:
			r.tr.fail("tracer: packet lookup in index map %q", m.Name)
		}
		if hit {
			return e.Verdict, true
		}
	}
	return nft.Verdict{}, false
}

func lookupIndex(m *nft.Set, i uint32) (nft.Verdict, bool) {
	for _, e := range m.Elems {
		if e.Key.Index == i {
			return e.Verdict, true
		}
	}
	return nft.Verdict{}, false
}
