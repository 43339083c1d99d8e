package ipt_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// TestProxyModeAddressNotPlanned: nothing about an ipMode Proxy LoadBalancer address may
// be in the plan at all.
func TestProxyModeAddressNotPlanned(t *testing.T) {
	lb := pt.Web(mt.LoadBalancerIPs("203.0.113.10"), mt.ProxyModeIngress("203.0.113.11"), mt.ExternalIPs("192.0.2.7"))
	if d := iptMode.Build(t, pt.Cfg, model.IPv4, lb, pt.WebV4Ready()).Dump(); strings.Contains(d, "203.0.113.11") {
		t.Errorf("ipMode Proxy address in the plan:\n%s", d)
	}
}

// TestMasqueradeBit: another mark bit is used throughout.
func TestMasqueradeBit(t *testing.T) {
	bit3 := pt.Cfg
	bit3.MasqueradeAll, bit3.MasqueradeBit = true, 3
	p := iptMode.Build(t, bit3, model.IPv4, pt.Web(), pt.WebV4Ready())
	if d := p.Dump(); !strings.Contains(d, "--mark 0x8/0x8") || strings.Contains(d, "0x4000") {
		t.Errorf("masquerade bit 3 not used throughout:\n%s", d)
	}
}

// TestAffinityAsNFTables: a client pinned to an endpoint stays there whatever the random
// choice, in both modes; another client is not pinned.
func TestAffinityAsNFTables(t *testing.T) {
	objs := []any{pt.Web(mt.Affinity(300), mt.LoadBalancerIPs("203.0.113.10")), pt.WebV4Ready()}
	nt := pt.NewNFTTracer(t, nft.Build(mt.Snapshot(objs...), model.IPv4, pt.Cfg), pt.NodeAddrs...)
	it := pt.NewIPTTracer(t, iptMode.Build(t, pt.Cfg, model.IPv4, objs...), pt.NodeAddrs...)
	for _, c := range []struct {
		first  pt.Packet
		pinned string
	}{
		{pt.Pkt(pt.Client, "10.96.0.10", 80), pt.Ep2},
		{pt.Pkt("10.200.1.3", "203.0.113.10", 80), pt.Masq(pt.Ep3)},
	} {
		if got, want := it.Results(c.first), nt.Results(c.first); !cmp.Equal(got, want) || len(got) != 3 {
			t.Fatalf("%v before any connection: iptables %v, nftables %v", c.first, got, want)
		}
		k := map[string]int{pt.Ep2: 1, pt.Masq(pt.Ep3): 2}[c.pinned]
		nt.Choose = pt.EndpointChoice(k)
		it.Choose = pt.StatisticChoice(k)
		if n, i := nt.Trace(c.first), it.Trace(c.first); n.String() != c.pinned || i.String() != c.pinned {
			t.Fatalf("%v first connection with choice %d: nftables %v, iptables %v", c.first, k, n, i)
		}
		nt.Choose, it.Choose = nil, nil
		for _, got := range [][]string{nt.Results(c.first), it.Results(c.first)} {
			if !cmp.Equal(got, pt.All(c.pinned)) {
				t.Errorf("%v: pinned client can reach %v", c.first, got)
			}
		}
	}
	other := pt.Pkt("10.200.1.4", "10.96.0.10", 80)
	if got := it.Results(other); !cmp.Equal(got, pt.All(pt.Ep1, pt.Ep2, pt.Ep3)) {
		t.Errorf("another client is pinned too: %v", got)
	}
}
