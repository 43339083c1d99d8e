package nft

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

func inNetns(t testing.TB, fn func(name string)) {
	t.Helper()
	kerneltest.InNetns(t, "egnft", fn)
}

func demoSnapshot(mods ...func(*v1.Service)) *model.Snapshot {
	svc := mt.Service("default", "web", "10.96.0.10", append([]func(*v1.Service){
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
		mt.DualStack("fd00:96::10"),
		mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"),
		mt.SourceRanges("10.200.1.0/24"),
		mt.Affinity(300),
	}, mods...)...)
	v4 := mt.Slice("default", "web-v4", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.13"))
	v6 := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("fd00:200:2::11"), mt.EP("fd00:200:2::12"))
	empty := mt.Service("default", "empty", "10.96.0.20", mt.Port("", v1.ProtocolUDP, 53, 53, 0))
	return mt.Snapshot(svc, v4, v6, empty)
}

// demoTables plans snap's tables of both families for the node gw.
func demoTables(snap *model.Snapshot) []*nftplan.Table {
	cfg := plan.Config{NodeName: "gw"}
	return []*nftplan.Table{nftplan.Build(snap, model.IPv4, cfg), nftplan.Build(snap, model.IPv6, cfg)}
}

func TestApplyFullThenPartial(t *testing.T) {
	inNetns(t, func(ns string) {
		k := New()
		tables := demoTables(demoSnapshot())
		start := time.Now()
		st, err := k.Apply(tables, true)
		if err != nil {
			t.Fatalf("full apply: %v", err)
		}
		if took := time.Since(start); st.Kernel <= 0 || st.Kernel > took {
			t.Errorf("the batch's time in the kernel is %v of an apply of %v", st.Kernel, took)
		}
		t.Logf("full: %+v", st)
		out := kerneltest.NFT(t, ns, "list", "ruleset")
		for _, want := range []string{"table ip edgegate", "table ip6 edgegate", "numgen random mod 3", "10.96.0.10 . tcp . 80"} {
			if !strings.Contains(out, want) {
				t.Errorf("nft list ruleset lacks %q:\n%s", want, out)
			}
		}
		t.Log(out)
		st, err = k.Apply(demoTables(demoSnapshot(mt.Affinity(600))), false)
		if err != nil {
			t.Fatalf("partial apply: %v", err)
		}
		t.Logf("partial: %+v", st)
		if err := k.Cleanup(); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		if out := kerneltest.NFT(t, ns, "list", "ruleset"); strings.Contains(out, "edgegate") {
			t.Errorf("cleanup left:\n%s", out)
		}
	})
}

// tableHandle is the kernel's handle of table ip edgegate: a recreated table gets a new one.
func tableHandle(t *testing.T, ns string) string {
	t.Helper()
	first, _, _ := strings.Cut(kerneltest.NFT(t, ns, "-a", "list", "table", "ip", nftplan.TableName), "\n")
	_, handle, ok := strings.Cut(first, "# handle ")
	if !ok {
		t.Fatalf("no handle in %q", first)
	}
	return handle
}

// TestFullApplyRewritesInPlace: a full apply over the table it made rewrites it in place
// (same table, affinity entries kept), which is what makes it atomic for packets: a table
// deleted and created again in one batch lets packets meet it half made. (google/nftables
// reads verdict maps back without their key type, which once made every full sync
// recreate the table.) A map whose key did change, which the read-back cannot show, makes
// the kernel refuse the in-place rewrite: the apply recreates the table then.
func TestFullApplyRewritesInPlace(t *testing.T) {
	inNetns(t, func(ns string) {
		k := New()
		tables := demoTables(demoSnapshot())
		if _, err := k.Apply(tables, true); err != nil {
			t.Fatalf("first full apply: %v", err)
		}
		var affinity string
		for name, s := range tables[0].Sets {
			if s.Dynamic {
				affinity = name
			}
		}
		if affinity == "" {
			t.Fatal("the demo's table has no affinity set")
		}
		// A client's affinity entry, as the kernel adds them.
		kerneltest.NFT(t, ns, "add", "element", "ip", nftplan.TableName, affinity, "{ 10.200.1.2 }")
		before := tableHandle(t, ns)
		st, err := k.Apply(tables, true)
		if err != nil {
			t.Fatalf("second full apply: %v", err)
		}
		if st.Recreated || tableHandle(t, ns) != before {
			t.Errorf("a full apply over an unchanged table recreated it (%+v; handle %s before)", st, before)
		}
		if out := kerneltest.NFT(t, ns, "list", "set", "ip", nftplan.TableName, affinity); !strings.Contains(out, "10.200.1.2") {
			t.Errorf("the affinity entry did not survive a full apply:\n%s", out)
		}

		// An older table whose service-ips map had another key.
		kerneltest.NFT(t, ns, "delete", "table", "ip", nftplan.TableName)
		kerneltest.NFT(t, ns, "add", "table", "ip", nftplan.TableName)
		kerneltest.NFT(t, ns, "add", "map", "ip", nftplan.TableName, "service-ips", "{ type ipv4_addr : verdict; }")
		k = New()
		st, err = k.Apply(tables, true)
		if err != nil {
			t.Fatalf("full apply over a map with another key: %v", err)
		}
		if !st.Recreated {
			t.Errorf("full apply over a map with another key: %+v, want the table recreated", st)
		}
		if out := kerneltest.NFT(t, ns, "list", "ruleset"); !strings.Contains(out, "10.96.0.10 . tcp . 80") {
			t.Errorf("after recreating, the ruleset lacks the service:\n%s", out)
		}
	})
}

// The protection's statements (synproxy, notrack, ct count and limit in dynamic sets, the
// identity DNAT) are accepted by the kernel in both families, read back by nft as written,
// and go with the rest when the protection goes.
func TestApplyProtection(t *testing.T) {
	inNetns(t, func(ns string) {
		k := New()
		snap := demoSnapshot(mt.Annotate(model.ProtectionAnnotation,
			"{synProxy: true, maxConnsPerSource: 64, newConnsPerSecond: 20}"))
		if _, err := k.Apply(demoTables(snap), true); err != nil {
			t.Fatalf("apply: %v", err)
		}
		out := kerneltest.NFT(t, ns, "list", "ruleset")
		for _, want := range []string{
			"synproxy mss 1460 wscale 7 timestamp sack-perm", "synproxy mss 1440 wscale 7 timestamp sack-perm",
			"notrack", "dnat to ip daddr", "dnat to ip6 daddr",
			"ip saddr limit rate over 20/second burst 20 packets", "ip saddr ct count over 64",
			"ip6 saddr & ffff:ffff:ffff:ffff:: ct count over 64",
			"type filter hook prerouting priority raw", "type nat hook prerouting priority dstnat - 1",
			"flags dynamic", "size 65535",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("nft list ruleset lacks %q", want)
			}
		}
		if t.Failed() {
			t.Log(out)
		}
		if _, err := k.Apply(demoTables(demoSnapshot()), false); err != nil {
			t.Fatalf("apply without protection: %v", err)
		}
		if out := kerneltest.NFT(t, ns, "list", "ruleset"); strings.Contains(out, "synproxy") || strings.Contains(out, "protect") {
			t.Errorf("the protection stayed:\n%s", out)
		}
	})
}
