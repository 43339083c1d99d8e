package nft_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// The IP plan and fixtures of the packet-flow tests are plantest's (world.go).

type flow struct {
	name string
	p    pt.Packet
	// want is every possible result over all numgen choices, sorted.
	want []string
}

func runFlows(t *testing.T, tab *nft.Table, flows []flow) {
	t.Helper()
	for _, fl := range flows {
		t.Run(fl.name, func(t *testing.T) {
			tr := pt.NewNFTTracer(t, tab, pt.NodeAddrs...)
			if got := tr.Results(fl.p); !cmp.Equal(fl.want, got) {
				var trail []string
				for _, o := range tr.All(fl.p) {
					trail = append(trail, o.String()+":\n\t"+strings.Join(o.Matched, "\n\t"))
				}
				t.Errorf("%v: (-want +got)\n%s\ntraces:\n%s", fl.p, cmp.Diff(fl.want, got), strings.Join(trail, "\n"))
			}
		})
	}
}

func TestFlowClusterIP(t *testing.T) {
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, pt.Web(), pt.WebV4Ready())
	runFlows(t, tab, []flow{
		{"spreads over every endpoint", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
		{"from the node", pt.Pkt("10.200.1.1", "10.96.0.10", 80).Local(), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
		{"undefined port rejected", pt.Pkt(pt.Client, "10.96.0.10", 81), pt.All(pt.Reject)},
		{"undefined port from the node rejected", pt.Pkt("10.200.1.1", "10.96.0.10", 81).Local(), pt.All(pt.Reject)},
		{"udp on a tcp port rejected", pt.Pkt(pt.Client, "10.96.0.10", 80).UDP(), pt.All(pt.Reject)},
		{"other traffic untouched", pt.Pkt(pt.Client, "10.96.0.99", 80), pt.All(pt.Accept)},
		{"no node port on a ClusterIP service", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(pt.Accept)},
		// Another node's pod reaches a ClusterIP through its own node, never this one.
		{"a remote endpoint's hairpin is not masqueraded", pt.Pkt("10.200.2.11", "10.96.0.10", 80), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
	})
	runFlows(t, nftMode.Build(t, pt.Cfg, model.IPv4, pt.Web(), pt.WebV4Ep2Local()), []flow{
		{"a local endpoint's hairpin is masqueraded", pt.Pkt("10.200.2.12", "10.96.0.10", 80), pt.All(pt.Ep1, pt.Masq(pt.Ep2), pt.Ep3)},
	})
}

func TestFlowNodePort(t *testing.T) {
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, pt.Web(pt.NodePort), pt.WebV4Ready())
	runFlows(t, tab, []flow{
		{"node IP, masqueraded", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))},
		{"other node IP", pt.Pkt(pt.Client, "10.200.2.1", 30080), pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))},
		{"from the node", pt.Pkt("10.200.1.1", "10.200.1.1", 30080).Local(), pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))},
		{"not on loopback", pt.Pkt("127.0.0.1", "127.0.0.1", 30080).Local(), pt.All(pt.Accept)},
		{"not on a foreign address", pt.Pkt(pt.Client, "10.200.1.99", 30080), pt.All(pt.Accept)},
		{"other port", pt.Pkt(pt.Client, "10.200.1.1", 30081), pt.All(pt.Accept)},
	})

	cfg := pt.Cfg
	cfg.NodePortAddresses = pt.MustPrefixes("10.200.1.1/32")
	tab = nftMode.Build(t, cfg, model.IPv4, pt.Web(pt.NodePort), pt.WebV4Ready())
	runFlows(t, tab, []flow{
		{"nodeport-addresses allows", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))},
		{"nodeport-addresses excludes", pt.Pkt(pt.Client, "10.200.2.1", 30080), pt.All(pt.Accept)},
	})
}

func TestFlowLoadBalancerAndExternalIPs(t *testing.T) {
	svc := pt.Web(mt.LoadBalancerIPs("203.0.113.10"), mt.ProxyModeIngress("203.0.113.11"), mt.ExternalIPs("192.0.2.7"))
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, svc, pt.WebV4Ready())
	every := pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))
	runFlows(t, tab, []flow{
		{"LoadBalancer IP", pt.Pkt(pt.Client, "203.0.113.10", 80), every},
		{"LoadBalancer IP from the node", pt.Pkt("10.200.1.1", "203.0.113.10", 80).Local(), every},
		{"LoadBalancer IP other port", pt.Pkt(pt.Client, "203.0.113.10", 81), pt.All(pt.Accept)},
		{"ipMode Proxy is not captured", pt.Pkt(pt.Client, "203.0.113.11", 80), pt.All(pt.Accept)},
		{"external IP", pt.Pkt(pt.Client, "192.0.2.7", 80), every},
		{"node port of a LoadBalancer", pt.Pkt(pt.Client, "10.200.1.1", 30080), every},
	})
	// Nothing about the Proxy-mode address may be in the plan at all.
	if d := tab.Dump(); strings.Contains(d, "203.0.113.11") {
		t.Errorf("ipMode Proxy address in the plan:\n%s", d)
	}
	// Without endpoints the Proxy-mode address is still left alone, not rejected.
	tab = nftMode.Build(t, pt.Cfg, model.IPv4, svc)
	runFlows(t, tab, []flow{{"ipMode Proxy, no endpoints", pt.Pkt(pt.Client, "203.0.113.11", 80), pt.All(pt.Accept)}})
}

func TestFlowSourceRanges(t *testing.T) {
	svc := pt.Web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"),
		mt.SourceRanges("10.200.1.0/24"))
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:200:2::11"))
	v4 := nftMode.Build(t, pt.Cfg, model.IPv4, svc, pt.WebV4Ready(), v6eps)
	every := pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))
	runFlows(t, v4, []flow{
		{"allowed source", pt.Pkt(pt.Client, "203.0.113.10", 80), every},
		{"other source dropped", pt.Pkt(pt.Stranger, "203.0.113.10", 80), pt.All(pt.Drop)},
		{"node ports are not subject to source ranges", pt.Pkt(pt.Stranger, "10.200.1.1", 30080), every},
		{"cluster IP is not subject to source ranges", pt.Pkt(pt.Stranger, "10.96.0.10", 80), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
	})
	v6 := nftMode.Build(t, pt.Cfg, model.IPv6, svc, pt.WebV4Ready(), v6eps)
	runFlows(t, v6, []flow{
		{"v4-only ranges close the v6 LoadBalancer IP", pt.Pkt("fd00:200:1::2", "2001:db8:113::10", 80), pt.All(pt.Drop)},
		{"v6 cluster IP still open", pt.Pkt("fd00:200:1::2", "fd00:96::10", 80), pt.All("[fd00:200:2::11]:8080")},
	})
}

func TestFlowAffinityPinsClient(t *testing.T) {
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, pt.Web(mt.Affinity(300)), pt.WebV4Ready())
	tr := pt.NewNFTTracer(t, tab, pt.NodeAddrs...)
	first := pt.Pkt(pt.Client, "10.96.0.10", 80)
	if got := tr.Results(first); !cmp.Equal(got, pt.All(pt.Ep1, pt.Ep2, pt.Ep3)) {
		t.Fatalf("before any connection: %v", got)
	}
	tr.Choose = pt.EndpointChoice(1)
	if got := tr.Trace(first); got.Result != pt.Ep2 {
		t.Fatalf("first connection with choice 1: %v", got)
	}
	for _, choice := range []uint32{0, 2} {
		tr.Choose = func(uint32) uint32 { return choice }
		if got := tr.Trace(first); got.Result != pt.Ep2 {
			t.Errorf("pinned client with choice %d went to %v\n%s", choice, got, strings.Join(got.Matched, "\n"))
		}
	}
	if got := tr.Results(first); !cmp.Equal(got, pt.All(pt.Ep2)) {
		t.Errorf("pinned client can reach %v", got)
	}
	if got := tr.Results(pt.Pkt("10.200.1.3", "10.96.0.10", 80)); !cmp.Equal(got, pt.All(pt.Ep1, pt.Ep2, pt.Ep3)) {
		t.Errorf("another client is pinned too: %v", got)
	}
}

func TestFlowExternalTrafficPolicyLocal(t *testing.T) {
	lb := func(mods ...func(*v1.Service)) *v1.Service {
		return pt.Web(append([]func(*v1.Service){mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalLocal(32000)}, mods...)...)
	}
	every := pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))
	t.Run("no local endpoint", func(t *testing.T) {
		tab := nftMode.Build(t, pt.Cfg, model.IPv4, lb(), pt.WebV4Ready())
		runFlows(t, tab, []flow{
			{"node port from outside dropped", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(pt.Drop)},
			{"LoadBalancer IP from outside dropped", pt.Pkt(pt.Client, "203.0.113.10", 80), pt.All(pt.Drop)},
			{"node port from the node served", pt.Pkt("10.200.1.1", "10.200.1.1", 30080).Local(), every},
			{"LoadBalancer IP from the node served", pt.Pkt("10.200.1.1", "203.0.113.10", 80).Local(), every},
			{"cluster IP served", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
		})
	})
	t.Run("local endpoint", func(t *testing.T) {
		eps := pt.WebV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")),
			mt.EP("10.200.2.13", mt.OnNode("backend-3")))
		tab := nftMode.Build(t, pt.Cfg, model.IPv4, lb(), eps)
		runFlows(t, tab, []flow{
			{"node port serves only the local endpoint", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(pt.Ep2)},
			{"LoadBalancer IP serves only the local endpoint", pt.Pkt(pt.Client, "203.0.113.10", 80), pt.All(pt.Ep2)},
			{"from the node every endpoint", pt.Pkt("10.200.1.1", "203.0.113.10", 80).Local(), every},
			{"cluster IP every endpoint", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
		})
	})
	t.Run("internal Local too, no local endpoint", func(t *testing.T) {
		tab := nftMode.Build(t, pt.Cfg, model.IPv4, lb(mt.InternalLocal()), pt.WebV4Ready())
		runFlows(t, tab, []flow{
			{"LoadBalancer IP from outside dropped", pt.Pkt(pt.Client, "203.0.113.10", 80), pt.All(pt.Drop)},
			{"LoadBalancer IP from the node served", pt.Pkt("10.200.1.1", "203.0.113.10", 80).Local(), every},
			{"cluster IP dropped", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Drop)},
		})
	})
	t.Run("Cluster policy masquerades", func(t *testing.T) {
		tab := nftMode.Build(t, pt.Cfg, model.IPv4, pt.Web(mt.LoadBalancerIPs("203.0.113.10")), pt.WebV4Ready())
		runFlows(t, tab, []flow{{"LoadBalancer IP", pt.Pkt(pt.Client, "203.0.113.10", 80), every}})
	})
}

func TestFlowInternalTrafficPolicyLocal(t *testing.T) {
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, pt.Web(mt.InternalLocal()), pt.WebV4Ready())
	runFlows(t, tab, []flow{
		{"no local endpoint drops", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Drop)},
		{"no local endpoint drops from the node", pt.Pkt("10.200.1.1", "10.96.0.10", 80).Local(), pt.All(pt.Drop)},
	})
	eps := pt.WebV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")))
	tab = nftMode.Build(t, pt.Cfg, model.IPv4, pt.Web(mt.InternalLocal()), eps)
	runFlows(t, tab, []flow{{"only the local endpoint", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Ep2)}})
}

func TestFlowEndpointConditions(t *testing.T) {
	lb := pt.Web(mt.LoadBalancerIPs("203.0.113.10"))
	rejected := []flow{
		{"cluster IP", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Reject)},
		{"cluster IP from the node", pt.Pkt("10.200.1.1", "10.96.0.10", 80).Local(), pt.All(pt.Reject)},
		{"node port", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(pt.Reject)},
		{"node port from the node", pt.Pkt("10.200.1.1", "10.200.1.1", 30080).Local(), pt.All(pt.Reject)},
		{"LoadBalancer IP", pt.Pkt(pt.Client, "203.0.113.10", 80), pt.All(pt.Reject)},
	}
	cases := []struct {
		name string
		eps  []any
		want []string // for the cluster IP; nil means everything is rejected
	}{
		{"no endpoints", nil, nil},
		{"empty slice", []any{pt.WebV4()}, nil},
		{"not ready only", []any{pt.WebV4(mt.EP("10.200.2.11", mt.NotReady()))}, nil},
		{"terminating, not serving", []any{pt.WebV4(mt.EP("10.200.2.11", mt.Terminating(false)))}, nil},
		{"serving-terminating only is served", []any{pt.WebV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12", mt.Terminating(false)))}, pt.All(pt.Ep1)},
		{"ready preferred over serving-terminating", []any{pt.WebV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12"), mt.EP("10.200.2.13", mt.NotReady()))}, pt.All(pt.Ep2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab := nftMode.Build(t, pt.Cfg, model.IPv4, append([]any{lb}, c.eps...)...)
			if c.want == nil {
				runFlows(t, tab, rejected)
				return
			}
			runFlows(t, tab, []flow{{"cluster IP", pt.Pkt(pt.Client, "10.96.0.10", 80), c.want}})
		})
	}
	t.Run("udp without endpoints", func(t *testing.T) {
		dns := mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
		tab := nftMode.Build(t, pt.Cfg, model.IPv4, dns)
		runFlows(t, tab, []flow{{"cluster IP", pt.Pkt(pt.Client, "10.96.0.53", 53).UDP(), pt.All(pt.Reject)}})
	})
}

func TestFlowTopology(t *testing.T) {
	zoned := func(addr, zone string, hints ...string) discovery.Endpoint {
		mods := []func(*discovery.Endpoint){mt.InZone(zone), mt.OnNode("node-" + zone)}
		if len(hints) > 0 {
			mods = append(mods, mt.ZoneHints(hints...))
		}
		return mt.EP(addr, mods...)
	}
	cases := []struct {
		name string
		svc  *v1.Service
		eps  *discovery.EndpointSlice
		want []string
	}{
		{"zone hints restrict to the node's zone", pt.Web(),
			pt.WebV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2", "z2"), zoned("10.200.2.13", "z1", "z1")),
			pt.All(pt.Ep1, pt.Ep3)},
		{"no hint for the node's zone: all", pt.Web(),
			pt.WebV4(zoned("10.200.2.11", "z2", "z2"), zoned("10.200.2.12", "z3", "z3")),
			pt.All(pt.Ep1, pt.Ep2)},
		{"an endpoint without hints: all", pt.Web(),
			pt.WebV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2")),
			pt.All(pt.Ep1, pt.Ep2)},
		{"not-ready endpoints do not count", pt.Web(),
			pt.WebV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2", "z2"),
				mt.EP("10.200.2.13", mt.NotReady())),
			pt.All(pt.Ep1)},
		{"node hints prefer this node", pt.Web(),
			pt.WebV4(mt.EP("10.200.2.11", mt.ZoneHints("z1"), mt.NodeHints("node-a")),
				mt.EP("10.200.2.12", mt.ZoneHints("z1"), mt.NodeHints("gw"))),
			pt.All(pt.Ep2)},
		{"PreferClose without hints uses the zone field", pt.Web(mt.TrafficDistribution("PreferClose")),
			pt.WebV4(zoned("10.200.2.11", "z1"), zoned("10.200.2.12", "z2"), zoned("10.200.2.13", "z1")),
			pt.All(pt.Ep1, pt.Ep3)},
		{"PreferClose, nothing in the node's zone: all", pt.Web(mt.TrafficDistribution("PreferClose")),
			pt.WebV4(zoned("10.200.2.11", "z2"), zoned("10.200.2.12", "z3")),
			pt.All(pt.Ep1, pt.Ep2)},
		{"zone field ignored once hints exist", pt.Web(mt.TrafficDistribution("PreferClose")),
			pt.WebV4(zoned("10.200.2.11", "z1", "z2"), zoned("10.200.2.12", "z2", "z2")),
			pt.All(pt.Ep1, pt.Ep2)},
		{"zone field ignored without PreferClose", pt.Web(),
			pt.WebV4(zoned("10.200.2.11", "z1"), zoned("10.200.2.12", "z2")),
			pt.All(pt.Ep1, pt.Ep2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab := nftMode.Build(t, pt.Cfg, model.IPv4, c.svc, c.eps)
			runFlows(t, tab, []flow{{"cluster IP", pt.Pkt(pt.Client, "10.96.0.10", 80), c.want}})
		})
	}
}

func TestFlowMasquerade(t *testing.T) {
	cfg := pt.Cfg
	cfg.ClusterCIDRs = pt.MustPrefixes("10.200.2.0/24", "fd00:200:2::/64")
	tab := nftMode.Build(t, cfg, model.IPv4, pt.Web(), pt.WebV4Ready())
	runFlows(t, tab, []flow{
		{"from outside the cluster CIDR", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))},
		{"from a pod", pt.Pkt("10.200.2.13", "10.96.0.10", 80), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
	})
	cfg = pt.Cfg
	cfg.MasqueradeAll = true
	tab = nftMode.Build(t, cfg, model.IPv4, pt.Web(), pt.WebV4Ready())
	runFlows(t, tab, []flow{
		{"masquerade-all from a pod", pt.Pkt("10.200.2.13", "10.96.0.10", 80), pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))},
	})
	cfg.MasqueradeBit = 3
	tab = nftMode.Build(t, cfg, model.IPv4, pt.Web(), pt.WebV4Ready())
	runFlows(t, tab, []flow{
		{"another mark bit", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))},
	})
	if !strings.Contains(tab.Dump(), "0x00000008") {
		t.Errorf("masquerade bit 3 not in the plan:\n%s", tab.Dump())
	}
}

func TestFlowDualStack(t *testing.T) {
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("fd00:200:2::11"), mt.EP("fd00:200:2::12"))
	svc := pt.Web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"))
	v4 := nftMode.Build(t, pt.Cfg, model.IPv4, svc, pt.WebV4Ready(), v6eps)
	v6 := nftMode.Build(t, pt.Cfg, model.IPv6, svc, pt.WebV4Ready(), v6eps)
	runFlows(t, v4, []flow{
		{"v4 cluster IP, v4 endpoints", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
		{"v6 address in the v4 table", pt.Pkt("fd00:200:1::2", "fd00:96::10", 80), pt.All(pt.Accept)},
	})
	runFlows(t, v6, []flow{
		{"v6 cluster IP, v6 endpoints", pt.Pkt("fd00:200:1::2", "fd00:96::10", 80),
			pt.All("[fd00:200:2::11]:8080", "[fd00:200:2::12]:8080")},
		{"v6 LoadBalancer IP", pt.Pkt("fd00:200:1::2", "2001:db8:113::10", 80),
			pt.All(pt.Masq("[fd00:200:2::11]:8080"), pt.Masq("[fd00:200:2::12]:8080"))},
		{"v6 node port", pt.Pkt("fd00:200:1::2", "fd00:200:1::1", 30080),
			pt.All(pt.Masq("[fd00:200:2::11]:8080"), pt.Masq("[fd00:200:2::12]:8080"))},
		{"v6 node port not on ::1", pt.Pkt("::1", "::1", 30080).Local(), pt.All(pt.Accept)},
	})

	// A v4-only service leaves the v6 table as if it did not exist.
	empty := nftMode.Build(t, pt.Cfg, model.IPv6).Dump()
	if d := cmp.Diff(empty, nftMode.Build(t, pt.Cfg, model.IPv6, pt.Web(pt.NodePort), pt.WebV4Ready()).Dump()); d != "" {
		t.Errorf("v4-only service in the v6 table (-empty +got):\n%s", d)
	}
}

func TestConflictingServices(t *testing.T) {
	// Both services claim 10.96.0.10:80, 203.0.113.10:80 and node port 30080; "alpha" sorts
	// first and keeps them, whether or not it has endpoints.
	svc := func(name string) *v1.Service {
		return mt.Service("default", name, "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
			mt.LoadBalancerIPs("203.0.113.10"))
	}
	alphaEPs := mt.Slice("default", "alpha-1", "alpha", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"))
	betaEPs := mt.Slice("default", "beta-1", "beta", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.12"))
	cases := []struct {
		name string
		objs []any
		want []string // cluster IP, LoadBalancer IP, node port
	}{
		{"both with endpoints", []any{svc("alpha"), alphaEPs, svc("beta"), betaEPs}, pt.All(pt.Ep1, pt.Masq(pt.Ep1), pt.Masq(pt.Ep1))},
		{"first without endpoints", []any{svc("alpha"), svc("beta"), betaEPs}, pt.All(pt.Reject, pt.Reject, pt.Reject)},
		{"second without endpoints", []any{svc("alpha"), alphaEPs, svc("beta")}, pt.All(pt.Ep1, pt.Masq(pt.Ep1), pt.Masq(pt.Ep1))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab := nftMode.Build(t, pt.Cfg, model.IPv4, c.objs...)
			if len(tab.Conflicts) == 0 {
				t.Fatalf("no conflicts reported")
			}
			for _, msg := range tab.Conflicts {
				if !strings.Contains(msg, "default/beta") || !strings.Contains(msg, "; default/alpha") {
					t.Errorf("conflict does not name beta with alpha keeping the key: %s", msg)
				}
			}
			runFlows(t, tab, []flow{
				{"cluster IP", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(c.want[0])},
				{"LoadBalancer IP", pt.Pkt(pt.Client, "203.0.113.10", 80), pt.All(c.want[1])},
				{"node port", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(c.want[2])},
			})
		})
	}
}
