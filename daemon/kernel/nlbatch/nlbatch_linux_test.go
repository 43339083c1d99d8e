package nlbatch

import (
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// TestSendToKernel: a good batch lands whole; a batch with a bad message is refused whole,
// with an error that names the message, and the good part of it is not applied either;
// a kept socket takes the next batch after a refused one.
func TestSendToKernel(t *testing.T) {
	kerneltest.InNetns(t, "egnlb", func(ns string) {
		var sock *Socket // nil: a socket per batch
		send := func(chains ...string) error {
			b, err := New()
			if err != nil {
				t.Fatal(err)
			}
			c := b.Conn()
			tab := c.AddTable(&nftables.Table{Name: "t", Family: nftables.TableFamilyIPv4})
			for _, name := range chains {
				ch := c.AddChain(&nftables.Chain{Name: name, Table: tab})
				for range 3 {
					c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: []expr.Any{&expr.Counter{}}})
				}
			}
			// A jump to a chain that does not exist: the kernel refuses this rule.
			if len(chains) == 1 {
				c.AddRule(&nftables.Rule{Table: tab, Chain: &nftables.Chain{Name: chains[0], Table: tab},
					Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: "missing"}}})
			}
			return b.Send(sock)
		}
		list := func() string { return kerneltest.NFT(t, ns, "list", "ruleset") }
		if err := send("a", "b"); err != nil {
			t.Fatalf("good batch: %v", err)
		}
		if got := strings.Count(list(), "counter packets"); got != 6 {
			t.Errorf("after the good batch: %d counters, want 6\n%s", got, list())
		}
		err := send("c")
		if err == nil || !strings.Contains(err.Error(), "add a rule to chain ip t c") {
			t.Fatalf("bad batch: error %v, want one naming the rule's chain", err)
		}
		if out := list(); strings.Contains(out, "chain c") {
			t.Errorf("the refused batch left chain c behind:\n%s", out)
		}
		sock = &Socket{}
		if err := send("c"); err == nil || !strings.Contains(err.Error(), "add a rule to chain ip t c") {
			t.Fatalf("bad batch on a kept socket: error %v, want one naming the rule's chain", err)
		}
		if err := send("d", "e"); err != nil {
			t.Fatalf("good batch on the socket that took the bad one: %v", err)
		}
		if out := list(); !strings.Contains(out, "chain d") || strings.Contains(out, "chain c") {
			t.Errorf("after a refused and a good batch on one socket:\n%s", out)
		}
	})
}
