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

// The tracer's own tests: it must get jump/goto/return right and refuse what it does not
// understand, or every packet-flow test built on it proves nothing.

// unknownStmt is a statement type the tracer has never heard of.
// It embeds a known one, the only way outside package nft to have a Stmt, for its
// rendering.
type unknownStmt struct{ nft.Stmt }

// failure is what a tracer's fail panics with in the tracer's own tests.
type failure string

// failureOf makes *fail panic with a failure, runs run and returns the failure, or "".
func failureOf(fail *func(string, ...any), run func()) (msg string) {
	*fail = func(format string, args ...any) { panic(failure(fmt.Sprintf(format, args...))) }
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			msg = string(f)
		}
	}()
	run()
	return ""
}

// traceFailure traces p and returns the tracer's failure, or "".
func traceFailure(tr *NFTTracer, p Packet) string {
	return failureOf(&tr.fail, func() { tr.Trace(p) })
}

// tinyTable is a hand-made table: nat-prerouting jumps to a, which gotos b, which returns;
// back in nat-prerouting the next rule DNATs.
func tinyTable(extra ...nft.Stmt) *nft.Table {
	t := &nft.Table{Family: model.IPv4, Name: "t", Chains: map[string]*nft.Chain{}, Sets: map[string]*nft.Set{}}
	t.AddChain("nat-prerouting", &nft.Hook{Type: "nat", Hook: "prerouting", Priority: nft.PrioDstNAT},
		nft.Rule{nft.Jump("a")},
		nft.Rule{nft.DNAT{Proto: 6, To: netip.MustParseAddrPort("10.0.0.9:80")}})
	t.AddChain("a", nil, nft.Rule{nft.Goto("b")}, nft.Rule{nft.Do{Verdict: nft.Verdict{Kind: nft.VerdictDrop}}})
	t.AddChain("b", nil, append(nft.Rule{nft.Do{Verdict: nft.Verdict{Kind: nft.VerdictReturn}}}, extra...))
	return t
}

func TestTracerJumpGotoReturn(t *testing.T) {
	tr := NewNFTTracer(t, tinyTable())
	// b returns to nat-prerouting (the last jump), not to a: a's drop never runs.
	if got := tr.Trace(Pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != "10.0.0.9:80" {
		t.Errorf("got %v, want DNAT to 10.0.0.9:80\n%s", got, strings.Join(got.Matched, "\n"))
	}
	if got := tr.Trace(Pkt("1.1.1.1", "2.2.2.2", 80).UDP()); got.Result != Accept {
		t.Errorf("udp: got %v, want ACCEPT (the dnat is tcp only)", got)
	}
}

func TestTracerRefusesUnknownStatements(t *testing.T) {
	tab := tinyTable()
	tab.Chains["a"].Rules = []nft.Rule{{unknownStmt{nft.Counter{Name: "frobnicate"}}}}
	tr := NewNFTTracer(t, tab)
	if msg := traceFailure(tr, Pkt("1.1.1.1", "2.2.2.2", 80)); !strings.Contains(msg, "unknownStmt") {
		t.Errorf("tracer accepted an unknown statement: %q", msg)
	}
}

func TestTracerRefusesBrokenPlans(t *testing.T) {
	cases := map[string]func(*nft.Table){
		"missing chain": func(tab *nft.Table) { tab.Chains["a"].Rules = []nft.Rule{{nft.Jump("nowhere")}} },
		"masquerade in prerouting": func(tab *nft.Table) {
			tab.Chains["a"].Rules = []nft.Rule{{nft.Masquerade{}}}
		},
		"numgen without element": func(tab *nft.Table) {
			tab.Sets["pick"] = &nft.Set{Name: "pick", Key: nft.KeyIndex, Map: true,
				Elems: []nft.Elem{{Key: nft.Key{Index: 0}, Verdict: nft.Verdict{Kind: nft.VerdictReturn}}}}
			tab.Chains["a"].Rules = []nft.Rule{{nft.Numgen{Mod: 2, Map: "pick"}}}
		},
		"loop": func(tab *nft.Table) { tab.Chains["a"].Rules = []nft.Rule{{nft.Jump("a")}} },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			tab := tinyTable()
			breakIt(tab)
			tr := NewNFTTracer(t, tab)
			tr.Choose = func(mod uint32) uint32 { return mod - 1 }
			if msg := traceFailure(tr, Pkt("1.1.1.1", "2.2.2.2", 80)); msg == "" {
				t.Errorf("tracer accepted a broken plan")
			} else {
				t.Logf("refused: %s", msg)
			}
		})
	}
}

func TestTracerEnumeratesChoices(t *testing.T) {
	tab := tinyTable()
	m := &nft.Set{Name: "pick", Key: nft.KeyIndex, Map: true}
	for i, ep := range []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"} {
		ch := "ep" + fmt.Sprint(i)
		tab.AddChain(ch, nil, nft.Rule{nft.DNAT{Proto: 6, To: netip.MustParseAddrPort(ep)}})
		m.Elems = append(m.Elems, nft.Elem{Key: nft.Key{Index: uint32(i)}, Verdict: nft.Verdict{Kind: nft.VerdictGoto, Chain: ch}})
	}
	tab.Sets["pick"] = m
	tab.Chains["a"].Rules = []nft.Rule{{nft.Numgen{Mod: 3, Map: "pick"}}}
	tr := NewNFTTracer(t, tab)
	got := tr.Results(Pkt("1.1.1.1", "2.2.2.2", 80))
	want := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	tr.Choose = func(uint32) uint32 { return 2 }
	if got := tr.Trace(Pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != "10.0.0.3:80" {
		t.Errorf("forced choice 2: got %v", got)
	}
}
