package nft

import (
	"os/exec"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
)

func inNetns(t *testing.T, fn func(name string)) {
	t.Helper()
	kerneltest.InNetns(t, "egnft", fn)
}

func nftList(t *testing.T, ns string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Errorf("nft list ruleset: %v\n%s", err, out)
	}
	return string(out)
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

func TestApplyFullThenPartial(t *testing.T) {
	inNetns(t, func(ns string) {
		k := New()
		cfg := plan.Config{NodeName: "gw"}
		snap := demoSnapshot()
		tables := []*plan.Table{plan.NFT(snap, model.IPv4, cfg), plan.NFT(snap, model.IPv6, cfg)}
		st, err := k.Apply(tables, true)
		if err != nil {
			t.Fatalf("full apply: %v", err)
		}
		t.Logf("full: %+v", st)
		out := nftList(t, ns)
		for _, want := range []string{"table ip edgegate", "table ip6 edgegate", "numgen random mod 3", "10.96.0.10 . tcp . 80"} {
			if !strings.Contains(out, want) {
				t.Errorf("nft list ruleset lacks %q:\n%s", want, out)
			}
		}
		t.Log(out)
		snap2 := demoSnapshot(mt.Affinity(600))
		tables2 := []*plan.Table{plan.NFT(snap2, model.IPv4, cfg), plan.NFT(snap2, model.IPv6, cfg)}
		st, err = k.Apply(tables2, false)
		if err != nil {
			t.Fatalf("partial apply: %v", err)
		}
		t.Logf("partial: %+v", st)
		if err := k.Cleanup(); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		if out := nftList(t, ns); strings.Contains(out, "edgegate") {
			t.Errorf("cleanup left:\n%s", out)
		}
	})
}
