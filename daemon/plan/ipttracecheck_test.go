package plan

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
)

// The iptables tracer's own tests: it must get jumps, RETURN, terminal targets, routing
// and the data path's state right, and refuse what it does not understand or what iptables
// would refuse, or every packet-flow test built on it proves nothing.

type unknownMatch struct{}

func (unknownMatch) save(model.Family) string { return "-m frobnicate" }

type unknownTarget struct{}

func (unknownTarget) save(model.Family) string { return "-j FROBNICATE" }

// tinyIPT is a hand-made plan: nat PREROUTING jumps to EG-A, which jumps to EG-B, which
// returns at once; back in EG-A the next rule DNATs TCP to 10.0.0.9:80. filter INPUT refuses
// what reaches 10.0.0.1 (a local address) on port 80; nat POSTROUTING masquerades marked
// packets.
func tinyIPT() *IPTables {
	dnat := func(to string) IptRule {
		return IptRule{Proto: 6, Matches: []IptMatch{DPort{Proto: 6}}, Target: DNATTarget{To: netip.MustParseAddrPort(to)}}
	}
	nat := &IptTable{Name: "nat", Builtin: map[string][]IptRule{
		"PREROUTING":  {{Target: JumpTo{"EG-A"}}},
		"OUTPUT":      {{Target: JumpTo{"EG-A"}}},
		"POSTROUTING": {{Target: JumpTo{"EG-POST"}}},
	}, Chains: []*IptChain{
		{Name: "EG-A", Rules: []IptRule{{Target: JumpTo{"EG-B"}}, dnat("10.0.0.9:80")}},
		{Name: "EG-B", Rules: []IptRule{{Target: Standard{"RETURN"}}, dnat("10.0.0.8:80")}},
		{Name: "EG-POST", Rules: []IptRule{
			{Matches: []IptMatch{MarkMatch{Not: true, Value: 1, Mask: 1}}, Target: Standard{"RETURN"}},
			{Target: MarkTarget{Xor: true, Mark: 1}},
			{Target: MasqueradeTarget{}},
		}},
	}}
	filter := &IptTable{Name: "filter", Builtin: map[string][]IptRule{
		"INPUT": {{Dst: netip.MustParsePrefix("10.0.0.1/32"), Proto: 6, Matches: []IptMatch{DPort{6, 80}}, Target: rejectWith(model.IPv4)}},
	}}
	return &IPTables{Family: model.IPv4, Tables: []*IptTable{filter, nat}}
}

func iptChainOf(p *IPTables, table, chain string) *IptChain { return p.Table(table).Chain(chain) }

func TestIPTTracerJumpReturn(t *testing.T) {
	tr := newIPTTracer(t, tinyIPT(), "10.0.0.1")
	// EG-B returns to EG-A (the last jump), not to PREROUTING: EG-A's DNAT runs, EG-B's not.
	if got := tr.trace(pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != "10.0.0.9:80" || got.Masq {
		t.Errorf("got %v, want DNAT to 10.0.0.9:80\n%s", got, strings.Join(got.Matched, "\n"))
	}
	if got := tr.trace(pkt("1.1.1.1", "2.2.2.2", 80).udp()); got.Result != traceAccept {
		t.Errorf("udp: got %v, want ACCEPT (the DNAT is -p tcp)", got)
	}
	// ACCEPT ends the nat chain: nothing after it in EG-A runs.
	p := tinyIPT()
	iptChainOf(p, "nat", "EG-B").Rules = []IptRule{{Target: Standard{"ACCEPT"}}}
	if got := newIPTTracer(t, p).trace(pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != traceAccept {
		t.Errorf("after ACCEPT in EG-B: got %v, want ACCEPT untouched", got)
	}
}

func TestIPTTracerRouting(t *testing.T) {
	p := tinyIPT()
	tr := newIPTTracer(t, p, "10.0.0.1")
	// DNATed to a local address: delivered, so filter INPUT refuses it.
	iptChainOf(p, "nat", "EG-A").Rules[1].Target = DNATTarget{To: netip.MustParseAddrPort("10.0.0.1:80")}
	if got := tr.trace(pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != traceReject {
		t.Errorf("DNAT to a local address: got %v, want REJECT in INPUT", got)
	}
	// The node's own packet to a local address passes INPUT after POSTROUTING.
	if got := tr.trace(pkt("10.0.0.1", "2.2.2.2", 80).local()); got.Result != traceReject {
		t.Errorf("from the node: got %v, want REJECT in INPUT", got)
	}
	// Marked in PREROUTING, the forwarded packet is masqueraded in POSTROUTING.
	iptChainOf(p, "nat", "EG-A").Rules[1].Target = DNATTarget{To: netip.MustParseAddrPort("10.0.0.9:80")}
	iptChainOf(p, "nat", "EG-B").Rules = []IptRule{{Target: MarkTarget{Mark: 1}}}
	if got := tr.trace(pkt("1.1.1.1", "2.2.2.2", 80)); got.String() != masq("10.0.0.9:80") {
		t.Errorf("marked: got %v, want it masqueraded", got)
	}
}

func TestIPTTracerRefusesUnknownTypes(t *testing.T) {
	for name, rule := range map[string]IptRule{
		"unknownMatch":  {Matches: []IptMatch{unknownMatch{}}},
		"unknownTarget": {Target: unknownTarget{}},
	} {
		t.Run(name, func(t *testing.T) {
			p := tinyIPT()
			iptChainOf(p, "nat", "EG-A").Rules = []IptRule{rule}
			tr := newIPTTracer(t, p)
			if msg := iptTraceFailure(tr, pkt("1.1.1.1", "2.2.2.2", 80)); !strings.Contains(msg, name) {
				t.Errorf("tracer accepted an unknown type: %q", msg)
			}
		})
	}
}

func TestIPTTracerRefusesBrokenPlans(t *testing.T) {
	setA := func(rules ...IptRule) func(*IPTables) {
		return func(p *IPTables) { iptChainOf(p, "nat", "EG-A").Rules = rules }
	}
	cases := map[string]func(*IPTables){
		"missing chain":                setA(IptRule{Target: JumpTo{"EG-NOWHERE"}}),
		"jump to a built-in chain":     setA(IptRule{Target: JumpTo{"OUTPUT"}}),
		"DROP in nat":                  setA(IptRule{Target: Standard{"DROP"}}),
		"REJECT in nat":                setA(IptRule{Target: rejectWith(model.IPv4)}),
		"unknown verdict":              setA(IptRule{Target: Standard{"QUEUE"}}),
		"MASQUERADE in PREROUTING":     setA(IptRule{Target: MasqueradeTarget{}}),
		"DNAT to the other family":     setA(IptRule{Proto: 6, Target: DNATTarget{To: netip.MustParseAddrPort("[fd00::1]:80")}}),
		"DNAT to a port without -p":    setA(IptRule{Target: DNATTarget{To: netip.MustParseAddrPort("10.0.0.9:80")}}),
		"-m tcp without -p tcp":        setA(IptRule{Matches: []IptMatch{DPort{6, 80}}}),
		"statistic that always hits":   setA(IptRule{Matches: []IptMatch{Statistic{Probability: 1}}}),
		"address of the other family":  setA(IptRule{Dst: netip.MustParsePrefix("fd00::/64")}),
		"unknown conntrack state":      setA(IptRule{Matches: []IptMatch{CtState{States: []string{"SNAT"}}}}),
		"recent check without seconds": setA(IptRule{Matches: []IptMatch{Recent{Name: "EG-X"}}}),
		"loop":                         setA(IptRule{Target: JumpTo{"EG-A"}}),
		"DNAT in POSTROUTING": func(p *IPTables) {
			iptChainOf(p, "nat", "EG-POST").Rules = []IptRule{{Proto: 6, Target: DNATTarget{To: netip.MustParseAddrPort("10.0.0.9:80")}}}
		},
		"icmp6 reject in an IPv4 plan": func(p *IPTables) {
			p.Table("filter").Builtin["INPUT"] = []IptRule{{Target: rejectWith(model.IPv6)}}
		},
		"built-in chain the table lacks": func(p *IPTables) {
			p.Table("filter").Builtin["PREROUTING"] = []IptRule{{Target: Standard{"ACCEPT"}}}
		},
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			p := tinyIPT()
			breakIt(p)
			tr := newIPTTracer(t, p, "10.0.0.1")
			// TCP is DNATed away and forwarded, UDP delivered: between them every chain runs.
			var msg string
			for _, pk := range []packet{pkt("1.1.1.1", "10.0.0.1", 80), pkt("1.1.1.1", "10.0.0.1", 80).udp(),
				pkt("10.0.0.1", "10.0.0.1", 80).local().udp()} {
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
func iptTraceFailure(tr *iptTracer, p packet) (msg string) {
	tr.fail = func(format string, args ...any) { panic(failure(fmt.Sprintf(format, args...))) }
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			msg = string(f)
		}
	}()
	tr.paths(p)
	return ""
}

// spreadIPT is tinyIPT with EG-A choosing among three endpoints as kube-proxy does, with
// affinity: a client seen by an endpoint's recent list goes back to it.
func spreadIPT() *IPTables {
	p := tinyIPT()
	eps := []string{"10.0.0.21:80", "10.0.0.22:80", "10.0.0.23:80"}
	a := iptChainOf(p, "nat", "EG-A")
	a.Rules = nil
	nat := p.Table("nat")
	for i, ep := range eps {
		sep := "EG-SEP-" + string(rune('X'+i))
		a.Rules = append(a.Rules, IptRule{Matches: []IptMatch{Recent{Name: sep, Seconds: 60}}, Target: JumpTo{sep}})
		nat.Chains = append(nat.Chains, &IptChain{Name: sep, Rules: []IptRule{{Proto: 6,
			Matches: []IptMatch{Recent{Name: sep, Set: true}, DPort{Proto: 6}}, Target: DNATTarget{To: netip.MustParseAddrPort(ep)}}}})
	}
	for i := range eps {
		r := IptRule{Target: JumpTo{"EG-SEP-" + string(rune('X'+i))}}
		if left := len(eps) - i; left > 1 {
			r.Matches = []IptMatch{Statistic{Probability: 1 / float64(left)}}
		}
		a.Rules = append(a.Rules, r)
	}
	return p
}

func TestIPTTracerEnumeratesChoices(t *testing.T) {
	tr := newIPTTracer(t, spreadIPT())
	first := pkt("1.1.1.1", "2.2.2.2", 80)
	var got []string
	for _, w := range tr.paths(first) {
		got = append(got, w.Result)
		if math.Abs(w.prob-1.0/3) > 1e-8 {
			t.Errorf("%s: probability %v, want 1/3", w.Result, w.prob)
		}
	}
	slices.Sort(got)
	if want := []string{"10.0.0.21:80", "10.0.0.22:80", "10.0.0.23:80"}; !slices.Equal(got, want) {
		t.Errorf("paths reach %v, want %v", got, want)
	}
	for k, want := range map[int]string{0: "10.0.0.21:80", 1: "10.0.0.22:80", 2: "10.0.0.23:80", 7: "10.0.0.23:80"} {
		tr := newIPTTracer(t, spreadIPT())
		tr.choose = pick(k)
		if got := tr.trace(first); got.Result != want {
			t.Errorf("pick(%d): got %v, want %s", k, got, want)
		}
	}
}

func TestIPTTracerRecentState(t *testing.T) {
	tr := newIPTTracer(t, spreadIPT())
	first := pkt("1.1.1.1", "2.2.2.2", 80)
	tr.paths(first)
	if len(tr.recent) != 0 {
		t.Fatalf("paths changed the recent state: %v", tr.recent)
	}
	tr.choose = pick(1)
	if got := tr.trace(first); got.Result != "10.0.0.22:80" {
		t.Fatalf("first connection: %v", got)
	}
	tr.choose = nil
	if got := tr.results(first); !slices.Equal(got, []string{"10.0.0.22:80"}) {
		t.Errorf("pinned client can reach %v", got)
	}
	if got := tr.results(pkt("1.1.1.2", "2.2.2.2", 80)); len(got) != 3 {
		t.Errorf("another client is pinned too: %v", got)
	}
}
