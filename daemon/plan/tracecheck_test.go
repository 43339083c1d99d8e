package plan

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
)

// The tracer's own tests: it must get jump/goto/return right and refuse what it does not
// understand, or every packet-flow test built on it proves nothing.

// unknownStmt is a statement type the tracer has never heard of.
type unknownStmt struct{}

func (unknownStmt) nft(model.Family) string { return "frobnicate" }

// failure is what a tracer's fail panics with in the tracer's own tests.
type failure string

func catchFailure(tr *tracer) {
	tr.fail = func(format string, args ...any) { panic(failure(fmt.Sprintf(format, args...))) }
}

func traceFailure(tr *tracer, p packet) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(failure)
			if !ok {
				panic(r)
			}
			msg = string(f)
		}
	}()
	tr.trace(p)
	return ""
}

// tinyTable is a hand-made table: nat-prerouting jumps to a, which gotos b, which returns;
// back in nat-prerouting the next rule DNATs.
func tinyTable(extra ...Stmt) *Table {
	t := &Table{Family: model.IPv4, Name: "t", Chains: map[string]*Chain{}, Sets: map[string]*Set{}}
	t.chain("nat-prerouting", &Hook{"nat", "prerouting", prioDstNAT},
		Rule{jump("a")},
		Rule{DNAT{Proto: 6, To: netip.MustParseAddrPort("10.0.0.9:80")}})
	t.chain("a", nil, Rule{gotoC("b")}, Rule{Do{Verdict{Kind: VerdictDrop}}})
	t.chain("b", nil, append(Rule{Do{Verdict{Kind: VerdictReturn}}}, extra...))
	return t
}

func TestTracerJumpGotoReturn(t *testing.T) {
	tr := newTracer(t, tinyTable())
	// b returns to nat-prerouting (the last jump), not to a: a's drop never runs.
	if got := tr.trace(pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != "10.0.0.9:80" {
		t.Errorf("got %v, want DNAT to 10.0.0.9:80\n%s", got, strings.Join(got.Matched, "\n"))
	}
	if got := tr.trace(pkt("1.1.1.1", "2.2.2.2", 80).udp()); got.Result != traceAccept {
		t.Errorf("udp: got %v, want ACCEPT (the dnat is tcp only)", got)
	}
}

func TestTracerRefusesUnknownStatements(t *testing.T) {
	tab := tinyTable()
	tab.Chains["a"].Rules = []Rule{{unknownStmt{}}}
	tr := newTracer(t, tab)
	catchFailure(tr)
	if msg := traceFailure(tr, pkt("1.1.1.1", "2.2.2.2", 80)); !strings.Contains(msg, "unknownStmt") {
		t.Errorf("tracer accepted an unknown statement: %q", msg)
	}
}

func TestTracerRefusesBrokenPlans(t *testing.T) {
	cases := map[string]func(*Table){
		"missing chain": func(tab *Table) { tab.Chains["a"].Rules = []Rule{{jump("nowhere")}} },
		"masquerade in prerouting": func(tab *Table) {
			tab.Chains["a"].Rules = []Rule{{Masquerade{}}}
		},
		"numgen without element": func(tab *Table) {
			tab.Sets["pick"] = &Set{Name: "pick", Key: KeyIndex, Map: true,
				Elems: []Elem{{Key: Key{Index: 0}, Verdict: Verdict{Kind: VerdictReturn}}}}
			tab.Chains["a"].Rules = []Rule{{Numgen{Mod: 2, Map: "pick"}}}
		},
		"loop": func(tab *Table) { tab.Chains["a"].Rules = []Rule{{jump("a")}} },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			tab := tinyTable()
			breakIt(tab)
			tr := newTracer(t, tab)
			catchFailure(tr)
			tr.choose = func(mod uint32) uint32 { return mod - 1 }
			if msg := traceFailure(tr, pkt("1.1.1.1", "2.2.2.2", 80)); msg == "" {
				t.Errorf("tracer accepted a broken plan")
			} else {
				t.Logf("refused: %s", msg)
			}
		})
	}
}

func TestTracerEnumeratesChoices(t *testing.T) {
	tab := tinyTable()
	m := &Set{Name: "pick", Key: KeyIndex, Map: true}
	for i, ep := range []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"} {
		ch := "ep" + fmt.Sprint(i)
		tab.chain(ch, nil, Rule{DNAT{Proto: 6, To: netip.MustParseAddrPort(ep)}})
		m.Elems = append(m.Elems, Elem{Key: Key{Index: uint32(i)}, Verdict: Verdict{Kind: VerdictGoto, Chain: ch}})
	}
	tab.Sets["pick"] = m
	tab.Chains["a"].Rules = []Rule{{Numgen{Mod: 3, Map: "pick"}}}
	tr := newTracer(t, tab)
	got := tr.results(pkt("1.1.1.1", "2.2.2.2", 80))
	want := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	tr.choose = func(uint32) uint32 { return 2 }
	if got := tr.trace(pkt("1.1.1.1", "2.2.2.2", 80)); got.Result != "10.0.0.3:80" {
		t.Errorf("forced choice 2: got %v", got)
	}
}
