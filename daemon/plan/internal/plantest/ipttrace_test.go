package plantest

import (
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan/ipt"
)

// The iptables tracer's own tests: it must get jumps, RETURN, terminal targets, routing
// and the data path's state right, and refuse what it does not understand or what iptables
// would refuse, or every packet-flow test built on it proves nothing.

// They embed known ones, the only way outside package ipt to have a Match or a Target,
// for their rendering.
type unknownMatch struct{ ipt.Match }

type unknownTarget struct{ ipt.Target }

// tinyIPT is a hand-made plan: nat PREROUTING jumps to EG-A, which jumps to EG-B, which
// returns at once; back in EG-A the next rule DNATs TCP to 10.0.0.9:80. filter INPUT refuses
// what reaches 10.0.0.1 (a local address) on port 80; nat POSTROUTING masquerades marked
// packets.
func tinyIPT() *ipt.Tables {
	dnat := func(to string) ipt.Rule {
		return ipt.Rule{Proto: 6, Matches: []ipt.Match{ipt.DPort{Proto: 6}}, Target: ipt.DNATTarget{To: netip.MustParseAddrPort(to)}}
	}
	nat := &ipt.Table{Name: "nat", Builtin: map[string][]ipt.Rule{
		"PREROUTING":  {{Target: ipt.JumpTo{Chain: "EG-A"}}},
		"OUTPUT":      {{Target: ipt.JumpTo{Chain: "EG-A"}}},
		"POSTROUTING": {{Target: ipt.JumpTo{Chain: "EG-POST"}}},
	}, Chains: []*ipt.Chain{
		{Name: "EG-A", Rules: []ipt.Rule{{Target: ipt.JumpTo{Chain: "EG-B"}}, dnat("10.0.0.9:80")}},
		{Name: "EG-B", Rules: []ipt.Rule{{Target: ipt.Standard{Verdict: "RETURN"}}, dnat("10.0.0.8:80")}},
		{Name: "EG-POST", Rules: []ipt.Rule{
			{Matches: []ipt.Match{ipt.MarkMatch{Not: true, Value: 1, Mask: 1}}, Target: ipt.Standard{Verdict: "RETURN"}},
			{Target: ipt.MarkTarget{Xor: true, Mark: 1}},
			{Target: ipt.MasqueradeTarget{}},
		}},
	}}
	filter := &ipt.Table{Name: "filter", Builtin: map[string][]ipt.Rule{
		"INPUT": {{Dst: netip.MustParsePrefix("10.0.0.1/32"), Proto: 6, Matches: []ipt.Match{ipt.DPort{Proto: 6, Port: 80}}, Target: ipt.RejectTarget{With: "icmp-port-unreachable"}}},
	}}
	return &ipt.Tables{Family: model.IPv4, Tables: []*ipt.Table{filter, nat}}
}

func iptChainOf(p *ipt.Tables, table, chain string) *ipt.Chain { return p.Table(table).Chain(chain) }

func TestIPTTracerJumpReturn(t *testing.T) {
	tr := NewIPTTracer(t, tinyIPT(), "10.0.0.1")
	// EG-B returns to EG-A (the last jump), not to PREROUTING: EG-A's DNAT runs, EG-B's not.
	if got := tr.Trace(Pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != "10.0.0.9:80" || got.Masq {
		t.Errorf("got %v, want DNAT to 10.0.0.9:80\n%s", got, strings.Join(got.Matched, "\n"))
	}
	if got := tr.Trace(Pkt("1.1.1.1", "2.2.2.2", 80).UDP()); got.Result != Accept {
		t.Errorf("udp: got %v, want ACCEPT (the DNAT is -p tcp)", got)
	}
	// ACCEPT ends the nat chain: nothing after it in EG-A runs.
	p := tinyIPT()
	iptChainOf(p, "nat", "EG-B").Rules = []ipt.Rule{{Target: ipt.Standard{Verdict: "ACCEPT"}}}
	if got := NewIPTTracer(t, p).Trace(Pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != Accept {
		t.Errorf("after ACCEPT in EG-B: got %v, want ACCEPT untouched", got)
	}
}

func TestIPTTracerRouting(t *testing.T) {
	p := tinyIPT()
	tr := NewIPTTracer(t, p, "10.0.0.1")
	// DNATed to a local address: delivered, so filter INPUT refuses it.
	iptChainOf(p, "nat", "EG-A").Rules[1].Target = ipt.DNATTarget{To: netip.MustParseAddrPort("10.0.0.1:80")}
	if got := tr.Trace(Pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != Reject {
		t.Errorf("DNAT to a local address: got %v, want REJECT in INPUT", got)
	}
	// The node's own packet to a local address passes INPUT after POSTROUTING.
	if got := tr.Trace(Pkt("10.0.0.1", "2.2.2.2", 80).Local()); got.Result != Reject {
		t.Errorf("from the node: got %v, want REJECT in INPUT", got)
	}
	// Marked in PREROUTING, the forwarded packet is masqueraded in POSTROUTING.
	iptChainOf(p, "nat", "EG-A").Rules[1].Target = ipt.DNATTarget{To: netip.MustParseAddrPort("10.0.0.9:80")}
	iptChainOf(p, "nat", "EG-B").Rules = []ipt.Rule{{Target: ipt.MarkTarget{Mark: 1}}}
	if got := tr.Trace(Pkt("1.1.1.1", "2.2.2.2", 80)); got.String() != Masq("10.0.0.9:80") {
		t.Errorf("marked: got %v, want it masqueraded", got)
	}
}

func TestIPTTracerRefusesUnknownTypes(t *testing.T) {
	for name, rule := range map[string]ipt.Rule{
		"unknownMatch":  {Matches: []ipt.Match{unknownMatch{ipt.Comment{Text: "frobnicate"}}}},
		"unknownTarget": {Target: unknownTarget{ipt.Standard{Verdict: "FROBNICATE"}}},
	} {
		t.Run(name, func(t *testing.T) {
			p := tinyIPT()
			iptChainOf(p, "nat", "EG-A").Rules = []ipt.Rule{rule}
			tr := NewIPTTracer(t, p)
			if msg := iptTraceFailure(tr, Pkt("1.1.1.1", "2.2.2.2", 80)); !strings.Contains(msg, name) {
				t.Errorf("tracer accepted an unknown type: %q", msg)
			}
		})
	}
}

func TestIPTTracerRefusesBrokenPlans(t *testing.T) {
	setA := func(rules ...ipt.Rule) func(*ipt.Tables) {
		return func(p *ipt.Tables) { iptChainOf(p, "nat", "EG-A").Rules = rules }
	}
	cases := map[string]func(*ipt.Tables){
		"missing chain":                setA(ipt.Rule{Target: ipt.JumpTo{Chain: "EG-NOWHERE"}}),
		"jump to a built-in chain":     setA(ipt.Rule{Target: ipt.JumpTo{Chain: "OUTPUT"}}),
		"DROP in nat":                  setA(ipt.Rule{Target: ipt.Standard{Verdict: "DROP"}}),
		"REJECT in nat":                setA(ipt.Rule{Target: ipt.RejectTarget{With: "icmp-port-unreachable"}}),
		"unknown verdict":              setA(ipt.Rule{Target: ipt.Standard{Verdict: "QUEUE"}}),
		"MASQUERADE in PREROUTING":     setA(ipt.Rule{Target: ipt.MasqueradeTarget{}}),
		"DNAT to the other family":     setA(ipt.Rule{Proto: 6, Target: ipt.DNATTarget{To: netip.MustParseAddrPort("[fd00::1]:80")}}),
		"DNAT to a port without -p":    setA(ipt.Rule{Target: ipt.DNATTarget{To: netip.MustParseAddrPort("10.0.0.9:80")}}),
		"-m tcp without -p tcp":        setA(ipt.Rule{Matches: []ipt.Match{ipt.DPort{Proto: 6, Port: 80}}}),
		"statistic that always hits":   setA(ipt.Rule{Matches: []ipt.Match{ipt.Statistic{Probability: 1}}}),
		"address of the other family":  setA(ipt.Rule{Dst: netip.MustParsePrefix("fd00::/64")}),
		"unknown conntrack state":      setA(ipt.Rule{Matches: []ipt.Match{ipt.CtState{States: []string{"SNAT"}}}}),
		"recent check without seconds": setA(ipt.Rule{Matches: []ipt.Match{ipt.Recent{Name: "EG-X"}}}),
		"loop":                         setA(ipt.Rule{Target: ipt.JumpTo{Chain: "EG-A"}}),
		"DNAT in POSTROUTING": func(p *ipt.Tables) {
			iptChainOf(p, "nat", "EG-POST").Rules = []ipt.Rule{{Proto: 6, Target: ipt.DNATTarget{To: netip.MustParseAddrPort("10.0.0.9:80")}}}
		},
		"icmp6 reject in an IPv4 plan": func(p *ipt.Tables) {
			p.Table("filter").Builtin["INPUT"] = []ipt.Rule{{Target: ipt.RejectTarget{With: "icmp6-port-unreachable"}}}
		},
		"built-in chain the table lacks": func(p *ipt.Tables) {
			p.Table("filter").Builtin["PREROUTING"] = []ipt.Rule{{Target: ipt.Standard{Verdict: "ACCEPT"}}}
		},
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			p := tinyIPT()
			breakIt(p)
			tr := NewIPTTracer(t, p, "10.0.0.1")
			// TCP is DNATed away and forwarded, UDP delivered: between them every chain runs.
			var msg string
			for _, pk := range []Packet{Pkt("1.1.1.1", "10.0.0.1", 80), Pkt("1.1.1.1", "10.0.0.1", 80).UDP(),
				Pkt("10.0.0.1", "10.0.0.1", 80).Local().UDP()} {
				if msg == "" {
					msg = iptTraceFailure(tr, pk)
				}
			}
			if msg == "" {
				t.Errorf("tracer accepted a broken plan")
			} else {
				t.Logf("refused: %s", msg)
			}
		})
	}
}

// iptTraceFailure traces p and returns the tracer's failure, or "".
func iptTraceFailure(tr *IPTTracer, p Packet) string {
	return failureOf(&tr.fail, func() { tr.Paths(p) })
}

// spreadIPT is tinyIPT with EG-A choosing among three endpoints as kube-proxy does, with
// affinity: a client seen by an endpoint's recent list goes back to it.
func spreadIPT() *ipt.Tables {
	p := tinyIPT()
	eps := []string{"10.0.0.21:80", "10.0.0.22:80", "10.0.0.23:80"}
	a := iptChainOf(p, "nat", "EG-A")
	a.Rules = nil
	nat := p.Table("nat")
	for i, ep := range eps {
		sep := "EG-SEP-" + string(rune('X'+i))
		a.Rules = append(a.Rules, ipt.Rule{Matches: []ipt.Match{ipt.Recent{Name: sep, Seconds: 60}}, Target: ipt.JumpTo{Chain: sep}})
		nat.Chains = append(nat.Chains, &ipt.Chain{Name: sep, Rules: []ipt.Rule{{Proto: 6,
			Matches: []ipt.Match{ipt.Recent{Name: sep, Set: true}, ipt.DPort{Proto: 6}}, Target: ipt.DNATTarget{To: netip.MustParseAddrPort(ep)}}}})
	}
	for i := range eps {
		r := ipt.Rule{Target: ipt.JumpTo{Chain: "EG-SEP-" + string(rune('X'+i))}}
		if left := len(eps) - i; left > 1 {
			r.Matches = []ipt.Match{ipt.Statistic{Probability: 1 / float64(left)}}
		}
		a.Rules = append(a.Rules, r)
	}
	return p
}

func TestIPTTracerEnumeratesChoices(t *testing.T) {
	tr := NewIPTTracer(t, spreadIPT())
	first := Pkt("1.1.1.1", "2.2.2.2", 80)
	var got []string
	for _, w := range tr.Paths(first) {
		got = append(got, w.Result)
		if math.Abs(w.Prob-1.0/3) > 1e-8 {
			t.Errorf("%s: probability %v, want 1/3", w.Result, w.Prob)
		}
	}
	slices.Sort(got)
	if want := []string{"10.0.0.21:80", "10.0.0.22:80", "10.0.0.23:80"}; !slices.Equal(got, want) {
		t.Errorf("paths reach %v, want %v", got, want)
	}
	for k, want := range map[int]string{0: "10.0.0.21:80", 1: "10.0.0.22:80", 2: "10.0.0.23:80", 7: "10.0.0.23:80"} {
		tr := NewIPTTracer(t, spreadIPT())
		tr.Choose = StatisticChoice(k)
		if got := tr.Trace(first); got.Result != want {
			t.Errorf("StatisticChoice(%d): got %v, want %s", k, got, want)
		}
	}
}

func TestIPTTracerRecentState(t *testing.T) {
	tr := NewIPTTracer(t, spreadIPT())
	first := Pkt("1.1.1.1", "2.2.2.2", 80)
	tr.Paths(first)
	if len(tr.recent) != 0 {
		t.Fatalf("paths changed the recent state: %v", tr.recent)
	}
	tr.Choose = StatisticChoice(1)
	if got := tr.Trace(first); got.Result != "10.0.0.22:80" {
		t.Fatalf("first connection: %v", got)
	}
	tr.Choose = nil
	if got := tr.Results(first); !slices.Equal(got, []string{"10.0.0.22:80"}) {
		t.Errorf("pinned client can reach %v", got)
	}
	if got := tr.Results(Pkt("1.1.1.2", "2.2.2.2", 80)); len(got) != 3 {
		t.Errorf("another client is pinned too: %v", got)
	}
}
