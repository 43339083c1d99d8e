package plantest

import (
	"math"
	"net/netip"
	"slices"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/plan/ipt"
)

// This file is a packet-flow tracer over an *ipt.Tables, in the spirit of the iptablesTracer of
// kube-proxy's iptables proxier tests (written anew here): the first packet of a new
// connection walks the built-in chains in netfilter's order and every match and target is
// interpreted, so the iptables packet-flow tests assert what happens to traffic with the same
// packets and outcomes as the nftables tracer in trace_test.go. A match or target type the
// tracer does not know fails the test.
//
// The walk (built-in chains hold only edgegate's rules; their policy is ACCEPT):
//
//	from outside:  nat PREROUTING -> routing on the (possibly DNATed) destination:
//	               local -> filter INPUT -> nat INPUT
//	               else  -> filter FORWARD -> nat POSTROUTING
//	from the node: nat OUTPUT -> filter OUTPUT -> nat POSTROUTING, then, when the
//	               destination is local (delivered over loopback), filter INPUT -> nat INPUT
//
// The node's own traffic to a local address really does pass INPUT after POSTROUTING, as the
// nftables tracer also models; it is where iptables mode refuses the node's own traffic to
// a node port without endpoints.

// iptStep is one built-in chain of the walk.
type iptStep struct{ table, chain string }

// IPTTracer runs packets through one family's iptables plan. The state of -m recent (the
// sources each name has seen) is kept across traces, as the kernel keeps it across
// connections; no time passes, so no entry expires.
type IPTTracer struct {
	node // local: what -m addrtype LOCAL matches, and where INPUT delivers
	plan *ipt.Tables
	// Choose decides whether the i-th statistic match a packet meets (counting from 0 in
	// this trace) matches; nil means StatisticChoice(0): the first endpoint, as the nft tracer's
	// default numgen choice 0 is.
	Choose func(i int, probability float64) bool
	recent addrSets
}

// NewIPTTracer returns a tracer over p for a node with the addresses local.
func NewIPTTracer(t testing.TB, p *ipt.Tables, local ...string) *IPTTracer {
	return &IPTTracer{node: newNode(t, local), plan: p, recent: addrSets{}}
}

// StatisticChoice returns a chooser under which the packet takes the k-th statistic rule it meets, so
// it goes to the k-th endpoint of a service chain (k past the last one: the last endpoint).
func StatisticChoice(k int) func(int, float64) bool {
	return func(i int, _ float64) bool { return i == k }
}

// IPTPath is one possible walk of a packet and its probability under the plan's statistic
// matches, as the kernel rounds them.
type IPTPath struct {
	Outcome
	Prob float64
}

// iptRun is one packet's walk; it owns the packet's mutable state.
type iptRun struct {
	packetState
	tr     *IPTTracer
	step   iptStep
	choose func(int, float64) bool
	nstat  int
	prob   float64
	recent addrSets
	depth  int
}

// Trace runs one packet and keeps the recent-match state it creates.
func (tr *IPTTracer) Trace(p Packet) Outcome {
	tr.t.Helper()
	choose := tr.Choose
	if choose == nil {
		choose = StatisticChoice(0)
	}
	return tr.walk(p, choose, tr.recent).Outcome
}

// Paths runs the packet once for every combination of statistic decisions, each from the
// current recent-match state and without changing it, and returns every walk with its
// probability. The probabilities add up to 1 exactly when every walk was found, which
// guards the enumeration itself.
func (tr *IPTTracer) Paths(p Packet) []IPTPath {
	tr.t.Helper()
	var out []IPTPath
	var explore func(prefix []bool)
	explore = func(prefix []bool) {
		n := 0
		choose := func(i int, _ float64) bool {
			n = i + 1
			return i < len(prefix) && prefix[i]
		}
		out = append(out, tr.walk(p, choose, tr.recent.clone()))
		// The walk just made did not match any statistic past the prefix; branch on each.
		for j := len(prefix); j < n; j++ {
			explore(append(append(slices.Clone(prefix), make([]bool, j-len(prefix))...), true))
		}
	}
	explore(nil)
	total := 0.0
	for _, w := range out {
		total += w.Prob
	}
	if math.Abs(total-1) > 1e-9 {
		tr.fail("tracer: the walks of %v add up to probability %v, not 1", p, total)
	}
	return out
}

// All returns the outcomes of every walk of Paths(p).
func (tr *IPTTracer) All(p Packet) []Outcome {
	tr.t.Helper()
	var out []Outcome
	for _, w := range tr.Paths(p) {
		out = append(out, w.Outcome)
	}
	return out
}

// Results lists the distinct results of paths(p), sorted, with a masquerade marker, as the
// nftables tracer's results does.
func (tr *IPTTracer) Results(p Packet) []string {
	tr.t.Helper()
	return distinct(tr.All(p))
}

// walk takes the packet through the built-in chains; see the file comment for the order.
func (tr *IPTTracer) walk(p Packet, choose func(int, float64) bool, recent addrSets) IPTPath {
	tr.t.Helper()
	tr.checkBuiltins()
	r := &iptRun{packetState: packetState{p: p}, tr: tr, choose: choose, recent: recent, prob: 1}
	input := []iptStep{{"filter", "INPUT"}, {"nat", "INPUT"}}
	var steps []iptStep
	if p.fromNode {
		steps = []iptStep{{"nat", "OUTPUT"}, {"filter", "OUTPUT"}, {"nat", "POSTROUTING"}}
	} else {
		steps = []iptStep{{"nat", "PREROUTING"}}
	}
	for i := 0; i < len(steps); i++ {
		switch r.builtin(steps[i]) {
		case endDrop:
			return r.path(Drop)
		case endReject:
			return r.path(Reject)
		}
		switch {
		case steps[i] == iptStep{"nat", "PREROUTING"} && tr.isLocal(r.dst()):
			steps = append(steps, input...)
		case steps[i] == iptStep{"nat", "PREROUTING"}:
			steps = append(steps, iptStep{"filter", "FORWARD"}, iptStep{"nat", "POSTROUTING"})
		case steps[i] == iptStep{"nat", "POSTROUTING"} && p.fromNode && tr.isLocal(r.dst()):
			steps = append(steps, input...)
		}
	}
	if r.dnat.IsValid() {
		return r.path(r.dnat.String())
	}
	return r.path(Accept)
}

func (r *iptRun) path(result string) IPTPath {
	return IPTPath{Outcome: r.outcome(result), Prob: r.prob}
}

// checkBuiltins fails on a table or built-in chain the walk would not visit.
func (tr *IPTTracer) checkBuiltins() {
	tr.t.Helper()
	for _, t := range tr.plan.Tables {
		if t.Name != "nat" && t.Name != "filter" {
			tr.fail("tracer: table %q is not walked", t.Name)
		}
		for chain := range t.Builtin {
			if !slices.Contains(ipt.BuiltinChains(t.Name), chain) {
				tr.fail("tracer: %s has rules for built-in chain %q, which it does not have", t.Name, chain)
			}
		}
	}
}

// builtin evaluates a built-in chain; falling off its end is its ACCEPT policy.
func (r *iptRun) builtin(s iptStep) ending {
	r.tr.t.Helper()
	r.step = s
	r.depth = 0
	t := r.tr.plan.Table(s.table)
	if t == nil {
		return endContinue
	}
	f := r.rules(t, s.chain, t.Builtin[s.chain])
	if f == endContinue {
		return endAccept
	}
	return f
}

// chain evaluates a user-defined chain reached by -j.
func (r *iptRun) chain(t *ipt.Table, name string) ending {
	r.tr.t.Helper()
	if slices.Contains(ipt.BuiltinChains(t.Name), name) {
		r.tr.fail("tracer: -j %s: a jump to a built-in chain", name)
	}
	c := t.Chain(name)
	if c == nil {
		r.tr.fail("tracer: -j %s: no such chain in table %s", name, t.Name)
	}
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > 32 {
		r.tr.fail("tracer: chain nesting deeper than 32 at %s (a loop?)", name)
	}
	return r.rules(t, name, c.Rules)
}

// rules evaluates rules in order. RETURN, or falling off the end, is endContinue: the
// caller goes on with its next rule.
func (r *iptRun) rules(t *ipt.Table, chain string, rules []ipt.Rule) ending {
	r.tr.t.Helper()
	for _, rule := range rules {
		if !r.matches(chain, rule) {
			continue
		}
		r.matched = append(r.matched, t.Name+": -A "+chain+" "+rule.Save(r.tr.plan.Family))
		if f, done := r.target(t, chain, rule); done {
			return f
		}
	}
	return endContinue
}

// matches evaluates the addresses, protocol and -m matches of a rule left to right, as the
// kernel does: a match after the first that fails is not evaluated (a recent --set there
// records nothing).
func (r *iptRun) matches(chain string, rule ipt.Rule) bool {
	r.tr.t.Helper()
	fam := r.tr.plan.Family
	for _, pfx := range []netip.Prefix{rule.Src, rule.Dst} {
		if pfx.IsValid() && model.FamilyOf(pfx.Addr()) != fam {
			r.tr.fail("tracer: %s: address %s in an %v plan", chain, pfx, fam)
		}
	}
	if rule.Src.IsValid() && rule.Src.Contains(r.p.src) == rule.SrcNot {
		return false
	}
	if rule.Dst.IsValid() && rule.Dst.Contains(r.dst()) == rule.DstNot {
		return false
	}
	if rule.Proto != 0 && rule.Proto != r.p.proto.Number() {
		return false
	}
	for _, m := range rule.Matches {
		switch m := m.(type) {
		case ipt.Comment:
		case ipt.DPort:
			if m.Proto != rule.Proto {
				// iptables refuses -m tcp without -p tcp.
				r.tr.fail("tracer: %s: -m %s in a rule for protocol %d", chain, plan.ProtoName(m.Proto), rule.Proto)
			}
			if m.Port != 0 && m.Port != r.dport() {
				return false
			}
		case ipt.AddrType:
			a := r.dst()
			if m.Source {
				a = r.p.src
			}
			if r.tr.isLocal(a) == m.Not {
				return false
			}
		case ipt.CtState:
			if !r.ctNew(chain, m.States) {
				return false
			}
		case ipt.MarkMatch:
			if (r.mark&m.Mask == m.Value) == m.Not {
				return false
			}
		case ipt.Statistic:
			if !(m.Probability > 0 && m.Probability < 1) {
				r.tr.fail("tracer: %s: statistic probability %v: a rule that always or never matches", chain, m.Probability)
			}
			i := r.nstat
			r.nstat++
			kernel := ipt.StatisticProbability(m.Probability)
			if !r.choose(i, kernel) {
				r.prob *= 1 - kernel
				return false
			}
			r.prob *= kernel
		case ipt.Recent:
			if m.Name == "" {
				r.tr.fail("tracer: %s: recent match without a name", chain)
			}
			if m.Set {
				r.recent.add(m.Name, r.p.src)
				continue
			}
			if m.Seconds == 0 {
				r.tr.fail("tracer: %s: recent --rcheck %s without --seconds never forgets a client", chain, m.Name)
			}
			if !r.recent[m.Name][r.p.src] {
				return false
			}
		default:
			r.tr.fail("tracer: %s: match %T in %q is unknown to the tracer; teach it", chain, m, rule.Save(fam))
		}
	}
	return true
}

// ctNew reports whether --ctstate matches a new connection's first packet.
func (r *iptRun) ctNew(chain string, states []string) bool {
	r.tr.t.Helper()
	if len(states) == 0 {
		r.tr.fail("tracer: %s: --ctstate without states", chain)
	}
	for _, s := range states {
		if !slices.Contains([]string{"NEW", "ESTABLISHED", "RELATED", "INVALID", "UNTRACKED"}, s) {
			r.tr.fail("tracer: %s: conntrack state %q is unknown to the tracer", chain, s)
		}
	}
	return slices.Contains(states, "NEW")
}

// target applies a matching rule's target; done reports whether the chain ends.
func (r *iptRun) target(t *ipt.Table, chain string, rule ipt.Rule) (f ending, done bool) {
	r.tr.t.Helper()
	fam := r.tr.plan.Family
	switch tg := rule.Target.(type) {
	case nil:
		return endContinue, false
	case ipt.JumpTo:
		f := r.chain(t, tg.Chain)
		return f, f != endContinue
	case ipt.Standard:
		switch tg.Verdict {
		case "ACCEPT":
			return endAccept, true
		case "RETURN":
			return endContinue, true
		case "DROP":
			if t.Name == "nat" {
				r.tr.fail("tracer: %s: DROP in the nat table, which iptables refuses", chain)
			}
			return endDrop, true
		}
		r.tr.fail("tracer: %s: verdict %q is unknown to the tracer", chain, tg.Verdict)
	case ipt.RejectTarget:
		if t.Name != "filter" {
			r.tr.fail("tracer: %s: REJECT in the %s table, which iptables refuses", chain, t.Name)
		}
		r.checkReject(chain, rule, tg)
		return endReject, true
	case ipt.DNATTarget:
		if t.Name != "nat" || (r.step.chain != "PREROUTING" && r.step.chain != "OUTPUT") {
			r.tr.fail("tracer: %s: DNAT reached from %s %s", chain, r.step.table, r.step.chain)
		}
		if model.FamilyOf(tg.To.Addr()) != fam {
			r.tr.fail("tracer: %s: DNAT to %s in an %v plan", chain, tg.To, fam)
		}
		if rule.Proto == 0 && tg.To.Port() != 0 {
			r.tr.fail("tracer: %s: DNAT to a port without -p, which iptables refuses", chain)
		}
		r.dnat = tg.To
		return endAccept, true
	case ipt.MasqueradeTarget:
		if t.Name != "nat" || r.step.chain != "POSTROUTING" {
			r.tr.fail("tracer: %s: MASQUERADE reached from %s %s", chain, r.step.table, r.step.chain)
		}
		r.masq = true
		return endAccept, true
	case ipt.MarkTarget:
		if tg.Xor {
			r.mark ^= tg.Mark
		} else {
			r.mark |= tg.Mark
		}
		return endContinue, false
	default:
		r.tr.fail("tracer: %s: target %T in %q is unknown to the tracer; teach it", chain, tg, rule.Save(fam))
	}
	return endContinue, true
}

// checkReject fails on a --reject-with the kernel would refuse for the family or protocol.
func (r *iptRun) checkReject(chain string, rule ipt.Rule, tg ipt.RejectTarget) {
	r.tr.t.Helper()
	want := "icmp-port-unreachable"
	if r.tr.plan.Family == model.IPv6 {
		want = "icmp6-port-unreachable"
	}
	switch {
	case tg.With == want:
	case tg.With == "tcp-reset" && rule.Proto == 6:
	default:
		r.tr.fail("tracer: %s: REJECT --reject-with %s in an %v rule for protocol %d", chain, tg.With, r.tr.plan.Family, rule.Proto)
	}
}
