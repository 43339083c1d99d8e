package kernelview

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/ipt"
	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/kernel/nft"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
	"github.com/edgegate/edgegate/daemon/view"
)

func webSnapshot() *model.Snapshot {
	return mt.Snapshot(
		mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080), mt.Type(v1.ServiceTypeNodePort)),
		mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.0.1.1"), mt.EP("10.0.1.2")))
}

// inNetns runs a command of the stock tools in the test's namespace.
func inNetns(t *testing.T, ns, stdin string, args ...string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// render renders a view whole.
func render(t *testing.T, fn func(*view.Text) error) string {
	t.Helper()
	x := view.NewText(0)
	if err := fn(x); err != nil {
		t.Fatal(err)
	}
	return x.String()
}

// contains checks that text holds every one of wants.
func contains(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, text)
		}
	}
}

// TestRulesetShowsForeignRules: the nftables view reads the ruleset back from the kernel:
// edgegate's table as programmed, a table another program added by hand, and an
// iptables-nft rule with an xtables match; expressions edgegate does not render show raw.
func TestRulesetShowsForeignRules(t *testing.T) {
	kerneltest.NeedTool(t, "nft")
	kerneltest.NeedTool(t, "iptables-nft")
	kerneltest.InNetns(t, "egview", func(ns string) {
		snap := webSnapshot()
		if _, err := nft.New().Apply([]*nftplan.Table{nftplan.Build(snap, model.IPv4, plan.Config{NodeName: "gw"})}, true); err != nil {
			t.Fatal(err)
		}
		inNetns(t, ns, `table inet foreign {
	chain input {
		type filter hook input priority 0; policy accept;
		tcp dport 22 limit rate 10/second counter accept comment "ssh by hand"
	}
}
`, "nft", "-f", "-")
		inNetns(t, ns, "", "iptables-nft", "-t", "filter", "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED", "-j", "ACCEPT")
		contains(t, "the ruleset read back", render(t, func(x *view.Text) error { return RenderNFT(x, allTables) }),
			"table ip edgegate {\n",
			"\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n",
			"10.96.0.10 . tcp . 80 : goto service-",
			"dnat to 10.0.1.1:8080 comment \"endpoint-",
			"fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports",
			// The hand-written table, with the limit expression edgegate does not render raw.
			"table inet foreign {\n\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n",
			"meta l4proto tcp th dport 22 [limit 1=0x000000000000000a 2=0x0000000000000001 ",
			"counter accept comment \"ssh by hand\"",
			// iptables-nft's table, with its xtables match raw.
			"table ip filter {\n\tchain INPUT {\n",
			"xt match conntrack --rev 3 --info 0x0000")
		contains(t, "the iptables tables read back", render(t, RenderIPTables),
			"# IPv4\n*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m conntrack --rev 3 --info 0x0000",
			" -j ACCEPT\nCOMMIT\n# IPv6\n",
			"# other nftables tables (see nft list ruleset): ip edgegate\n")
		// The mode's view reads the kernel again only once a commit moved the generation.
		v := NewNFTView([]model.Family{model.IPv4})
		first, err := v.Rules()
		if err != nil || !strings.Contains(first, "table inet foreign {") || !strings.HasPrefix(first, "# as the kernel holds it at ruleset generation ") {
			t.Fatalf("the nftables view: %v\n%s", err, first)
		}
		if again, err := v.Rules(); err != nil || again != first {
			t.Errorf("unchanged generation: a different text (%v)", err)
		}
		inNetns(t, ns, "", "nft", "add", "table", "netdev", "later")
		if after, err := v.Rules(); err != nil || after == first || !strings.Contains(after, "table netdev later {") {
			t.Errorf("after a commit: %v, want the new table\n%s", err, after)
		}
		// A cap cuts the rendering and says so.
		small := view.NewText(512)
		if err := RenderNFT(small, allTables); err != nil || !small.Full() || !strings.Contains(small.String(), "# cut") {
			t.Errorf("a rendering capped at 512 bytes: full %v, %v:\n%s", small.Full(), err, small.String())
		}
	})
}

// TestIPTablesReadBack: edgegate's iptables mode, read back in iptables-save form with the
// matches and targets it writes read.
func TestIPTablesReadBack(t *testing.T) {
	kerneltest.InNetns(t, "egview", func(ns string) {
		snap := webSnapshot()
		if _, err := ipt.New().Apply([]*iptplan.Tables{iptplan.Build(snap, model.IPv4, plan.Config{NodeName: "gw"})}, true); err != nil {
			t.Fatal(err)
		}
		contains(t, "the iptables mode's tables read back", render(t, RenderIPTables),
			"*nat\n",
			":PREROUTING ACCEPT [0:0]\n",
			"-A EG-SERVICES -p tcp -d 10.96.0.10 -m comment --comment \"default/web:http cluster IP\" --dport 80 -j EG-SVC-",
			"-m statistic --mode random --probability 0.50000000000 -j EG-SEP-",
			"-j DNAT --to-destination 10.0.1.1:8080\n",
			"-A EG-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n",
			"-A PREROUTING -m comment --comment \"edgegate service portals\" -j EG-SERVICES\n",
			"COMMIT\n# IPv6\n")
	})
}

// BenchmarkRenderNFT reads back the table of 10,000 Services with 10 endpoints each, whole
// (-run '^$' -bench RenderNFT -benchtime 1x) and as the view caps it.
func BenchmarkRenderNFT(b *testing.B) {
	kerneltest.InNetns(b, "egview", func(string) {
		snap := mt.Snapshot(mt.BenchObjects(10000, 10)...)
		if _, err := nft.New().Apply([]*nftplan.Table{nftplan.Build(snap, model.IPv4, plan.Config{NodeName: "gw"})}, true); err != nil {
			b.Fatal(err)
		}
		// Sub-benchmarks would run on other threads, outside the namespace: one loop.
		for b.Loop() {
			for _, limit := range []int{1 << 30, view.DefaultLimit} {
				began := time.Now()
				x := view.NewText(limit)
				if err := RenderNFT(x, allTables); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(x.String())), fmt.Sprintf("bytes@%dMiB", limit>>20))
				b.ReportMetric(time.Since(began).Seconds(), fmt.Sprintf("s@%dMiB", limit>>20))
			}
		}
	})
}
