package plan

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// Parity of IPVS mode with nftables mode: every flow runs through the nftables plan (whose
// result must be want, which keeps the expectations honest) and through the IPVS plan with
// the IPVS tracer, on nft_test.go's fixtures and IP plan. Where IPVS mode differs for a
// reason that belongs to IPVS, the flow says what it gives instead and why.

type ipvsFlow struct {
	name string
	p    packet
	want []string
	// ipvs, when set, is IPVS mode's result instead, for the reason in why.
	ipvs []string
	why  string
}

type ipvsCase struct {
	name  string
	cfg   *Config
	fam   model.Family
	objs  []any
	flows []ipvsFlow
}

// Reasons IPVS mode differs from nftables mode.
const (
	// The dummy interface makes every VIP an address of the node; a port no service uses
	// is refused there (kube-proxy's KUBE-IPVS-FILTER) rather than forwarded.
	whyVIPIsLocal = "a VIP is the node's own address in IPVS mode: its other ports are refused"
	// One virtual server per address serves outside clients and the node alike: the
	// node's own traffic meets the Local policy too (kube-proxy's ipvs mode behaves the
	// same), where nftables mode short-circuits it to every endpoint.
	whyOneVirtualServer = "IPVS has no separate path for the node's own traffic to a Local service"
)

func ipvsCfgOf(cfg Config) IPVSConfig {
	c := IPVSConfig{Config: cfg}
	for _, a := range nodeAddrs {
		c.NodeAddrs = append(c.NodeAddrs, netip.MustParseAddr(a))
	}
	return c
}

func runIPVSParity(t *testing.T, cases []ipvsCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testCfg
			if c.cfg != nil {
				cfg = *c.cfg
			}
			fam := c.fam
			if fam == 0 {
				fam = model.IPv4
			}
			nft := build(t, cfg, fam, c.objs...)
			ipvs := buildIPVS(t, ipvsCfgOf(cfg), fam, c.objs...)
			for _, fl := range c.flows {
				t.Run(fl.name, func(t *testing.T) {
					if got := newTracer(t, nft, nodeAddrs...).results(fl.p); !cmp.Equal(fl.want, got) {
						t.Errorf("nftables (the reference): %v: (-want +got)\n%s", fl.p, cmp.Diff(fl.want, got))
					}
					want := fl.want
					if fl.ipvs != nil {
						want = fl.ipvs
					}
					it := newIPVSTracer(t, ipvs, nodeAddrs...)
					if got := it.results(fl.p); !cmp.Equal(want, got) {
						t.Errorf("ipvs: %v: (-want +got)\n%s\n%s\n%s", fl.p, cmp.Diff(want, got), trails(it.all(fl.p)), ipvs.Dump())
					}
				})
			}
		})
	}
}

func TestIPVSParityClusterIPAndNodePort(t *testing.T) {
	every := all(masq(ep1), masq(ep2), masq(ep3))
	npAddrs := testCfg
	npAddrs.NodePortAddresses = mustPrefixes("10.200.1.1/32")
	runIPVSParity(t, []ipvsCase{
		{name: "cluster IP", objs: []any{web(), webV4Ready()}, flows: []ipvsFlow{
			{name: "spreads over every endpoint", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
			{name: "from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: all(ep1, ep2, ep3)},
			{name: "undefined port", p: pkt(client, "10.96.0.10", 81), want: all(traceReject)},
			{name: "undefined port from the node", p: pkt("10.200.1.1", "10.96.0.10", 81).local(), want: all(traceReject)},
			{name: "udp on a tcp port", p: pkt(client, "10.96.0.10", 80).udp(), want: all(traceReject)},
			{name: "other traffic untouched", p: pkt(client, "10.96.0.99", 80), want: all(traceAccept)},
			{name: "no node port on a ClusterIP service", p: pkt(client, "10.200.1.1", 30080), want: all(traceAccept)},
			{name: "a remote endpoint's hairpin", p: pkt("10.200.2.11", "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
		}},
		{name: "cluster IP, an endpoint on this node", objs: []any{web(), webV4Ep2Local()}, flows: []ipvsFlow{
			{name: "a local endpoint's hairpin is masqueraded", p: pkt("10.200.2.12", "10.96.0.10", 80), want: all(ep1, masq(ep2), ep3)},
		}},
		{name: "node port", objs: []any{web(nodePort), webV4Ready()}, flows: []ipvsFlow{
			{name: "node IP, masqueraded", p: pkt(client, "10.200.1.1", 30080), want: every},
			{name: "other node IP", p: pkt(client, "10.200.2.1", 30080), want: every},
			{name: "from the node", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: every},
			{name: "not on loopback", p: pkt("127.0.0.1", "127.0.0.1", 30080).local(), want: all(traceAccept)},
			{name: "not on a foreign address", p: pkt(client, "10.200.1.99", 30080), want: all(traceAccept)},
			{name: "other port", p: pkt(client, "10.200.1.1", 30081), want: all(traceAccept)},
			{name: "udp", p: pkt(client, "10.200.1.1", 30080).udp(), want: all(traceAccept)},
		}},
		{name: "nodeport-addresses", cfg: &npAddrs, objs: []any{web(nodePort), webV4Ready()}, flows: []ipvsFlow{
			{name: "allows", p: pkt(client, "10.200.1.1", 30080), want: every},
			{name: "excludes", p: pkt(client, "10.200.2.1", 30080), want: all(traceAccept)},
			{name: "from the node", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: every},
		}},
		{name: "nodeport-addresses, no endpoints", cfg: &npAddrs, objs: []any{web(nodePort)}, flows: []ipvsFlow{
			{name: "allowed address refused", p: pkt(client, "10.200.1.1", 30080), want: all(traceReject)},
			{name: "other address untouched", p: pkt(client, "10.200.2.1", 30080), want: all(traceAccept)},
			{name: "loopback untouched", p: pkt("127.0.0.1", "127.0.0.1", 30080).local(), want: all(traceAccept)},
		}},
		{name: "node port, no endpoints", objs: []any{web(nodePort)}, flows: []ipvsFlow{
			{name: "refused", p: pkt(client, "10.200.2.1", 30080), want: all(traceReject)},
			{name: "from the node refused", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: all(traceReject)},
			{name: "loopback untouched", p: pkt("127.0.0.1", "127.0.0.1", 30080).local(), want: all(traceAccept)},
		}},
	})
}

func TestIPVSParityExternal(t *testing.T) {
	every := all(masq(ep1), masq(ep2), masq(ep3))
	lb := web(mt.LoadBalancerIPs("203.0.113.10"), mt.ProxyModeIngress("203.0.113.11"), mt.ExternalIPs("192.0.2.7"))
	ranged := web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"),
		mt.SourceRanges("10.200.1.0/24"))
	sloppy := web(mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges(" 10.200.1.0/24", "192.000.002.0/24 "))
	unreadable := web(mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges("10.200.1.0/24", "10.200.1.0/33"))
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:200:2::11"))
	runIPVSParity(t, []ipvsCase{
		{name: "LoadBalancer and external IPs", objs: []any{lb, webV4Ready()}, flows: []ipvsFlow{
			{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: every},
			{name: "LoadBalancer IP from the node", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every},
			{name: "LoadBalancer IP other port", p: pkt(client, "203.0.113.10", 81), want: all(traceAccept),
				ipvs: all(traceReject), why: whyVIPIsLocal},
			{name: "ipMode Proxy is not captured", p: pkt(client, "203.0.113.11", 80), want: all(traceAccept)},
			{name: "external IP", p: pkt(client, "192.0.2.7", 80), want: every},
			{name: "external IP from the node", p: pkt("10.200.1.1", "192.0.2.7", 80).local(), want: every},
			{name: "node port of a LoadBalancer", p: pkt(client, "10.200.1.1", 30080), want: every},
		}},
		{name: "LoadBalancer and external IPs, no endpoints", objs: []any{lb}, flows: []ipvsFlow{
			{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: all(traceReject)},
			{name: "LoadBalancer IP from the node", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: all(traceReject)},
			{name: "external IP", p: pkt(client, "192.0.2.7", 80), want: all(traceReject)},
			{name: "external IP from the node", p: pkt("10.200.1.1", "192.0.2.7", 80).local(), want: all(traceReject)},
			{name: "ipMode Proxy untouched", p: pkt(client, "203.0.113.11", 80), want: all(traceAccept)},
		}},
		{name: "source ranges", objs: []any{ranged, webV4Ready(), v6eps}, flows: []ipvsFlow{
			{name: "allowed source", p: pkt(client, "203.0.113.10", 80), want: every},
			{name: "other source dropped", p: pkt(stranger, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "the node is inside the range", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every},
			{name: "node ports are not subject to source ranges", p: pkt(stranger, "10.200.1.1", 30080), want: every},
			{name: "cluster IP is not subject to source ranges", p: pkt(stranger, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
		}},
		{name: "source ranges as kube-proxy reads them (padded, leading zeros)", objs: []any{sloppy, webV4Ready()}, flows: []ipvsFlow{
			{name: "allowed source", p: pkt(client, "203.0.113.10", 80), want: every},
			{name: "other source dropped", p: pkt(stranger, "203.0.113.10", 80), want: all(traceDrop)},
		}},
		{name: "source ranges that cannot be understood", objs: []any{unreadable, webV4Ready()}, flows: []ipvsFlow{
			{name: "the insider is refused too", p: pkt(client, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "other source dropped", p: pkt(stranger, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "from the node dropped", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: all(traceDrop)},
			{name: "node ports are not subject to source ranges", p: pkt(stranger, "10.200.1.1", 30080), want: every},
		}},
		{name: "source ranges, IPv6", fam: model.IPv6, objs: []any{ranged, webV4Ready(), v6eps}, flows: []ipvsFlow{
			{name: "v4-only ranges close the v6 LoadBalancer IP", p: pkt("fd00:200:1::2", "2001:db8:113::10", 80), want: all(traceDrop)},
			{name: "v6 cluster IP still open", p: pkt("fd00:200:1::2", "fd00:96::10", 80), want: all("[fd00:200:2::11]:8080")},
		}},
		{name: "source ranges, no endpoints", objs: []any{ranged}, flows: []ipvsFlow{
			{name: "allowed source refused", p: pkt(client, "203.0.113.10", 80), want: all(traceReject)},
			{name: "other source dropped", p: pkt(stranger, "203.0.113.10", 80), want: all(traceDrop)},
		}},
	})
}

func TestIPVSParityTrafficPolicies(t *testing.T) {
	every := all(masq(ep1), masq(ep2), masq(ep3))
	lb := func(mods ...func(*v1.Service)) *v1.Service {
		return web(append([]func(*v1.Service){mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalLocal(32000)}, mods...)...)
	}
	oneLocal := webV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")),
		mt.EP("10.200.2.13", mt.OnNode("backend-3")))
	withCIDR := testCfg
	withCIDR.ClusterCIDRs = mustPrefixes("10.200.2.0/24", "fd00:200:2::/64")
	runIPVSParity(t, []ipvsCase{
		{name: "eTP Local, no local endpoint", objs: []any{lb(), webV4Ready()}, flows: []ipvsFlow{
			{name: "node port from outside dropped", p: pkt(client, "10.200.1.1", 30080), want: all(traceDrop)},
			{name: "LoadBalancer IP from outside dropped", p: pkt(client, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "node port from the node", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: every,
				ipvs: all(traceDrop), why: whyOneVirtualServer},
			{name: "LoadBalancer IP from the node", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every,
				ipvs: all(traceDrop), why: whyOneVirtualServer},
			{name: "cluster IP served", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
		}},
		{name: "eTP Local with a cluster CIDR, no local endpoint", cfg: &withCIDR, objs: []any{lb(), webV4Ready()}, flows: []ipvsFlow{
			{name: "pod to LoadBalancer IP dropped", p: pkt("10.200.2.13", "203.0.113.10", 80), want: all(traceDrop)},
			{name: "pod to node port dropped", p: pkt("10.200.2.13", "10.200.1.1", 30080), want: all(traceDrop)},
		}},
		{name: "eTP Local, local endpoint", objs: []any{lb(), oneLocal}, flows: []ipvsFlow{
			{name: "node port serves only the local endpoint", p: pkt(client, "10.200.1.1", 30080), want: all(ep2)},
			{name: "LoadBalancer IP serves only the local endpoint", p: pkt(client, "203.0.113.10", 80), want: all(ep2)},
			{name: "from the node", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every,
				ipvs: all(ep2), why: whyOneVirtualServer},
			// Only IPVS mode puts the LoadBalancer IP on the node, which makes it the source of
			// the node's own connection; nftables mode never sees such a packet.
			{name: "from the node's VIP, masqueraded", p: pkt("203.0.113.10", "203.0.113.10", 80).local(), want: all(ep2),
				ipvs: all(masq(ep2)), why: "an endpoint must not answer a VIP of this node"},
			{name: "cluster IP every endpoint", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
			{name: "health check node port untouched", p: pkt(client, "10.200.1.1", 32000), want: all(traceAccept)},
		}},
		{name: "eTP and iTP Local, no local endpoint", objs: []any{lb(mt.InternalLocal()), webV4Ready()}, flows: []ipvsFlow{
			{name: "LoadBalancer IP from outside dropped", p: pkt(client, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "cluster IP dropped", p: pkt(client, "10.96.0.10", 80), want: all(traceDrop)},
		}},
		{name: "iTP Local, no local endpoint", objs: []any{web(mt.InternalLocal()), webV4Ready()}, flows: []ipvsFlow{
			{name: "drops", p: pkt(client, "10.96.0.10", 80), want: all(traceDrop)},
			{name: "drops from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: all(traceDrop)},
		}},
		{name: "iTP Local, local endpoint", objs: []any{web(mt.InternalLocal()),
			webV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")))}, flows: []ipvsFlow{
			{name: "only the local endpoint", p: pkt(client, "10.96.0.10", 80), want: all(ep2)},
			{name: "only the local endpoint from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: all(ep2)},
		}},
		{name: "iTP Local, eTP Cluster, no local endpoint", objs: []any{web(mt.InternalLocal(), mt.LoadBalancerIPs("203.0.113.10")), webV4Ready()},
			flows: []ipvsFlow{
				{name: "cluster IP dropped", p: pkt(client, "10.96.0.10", 80), want: all(traceDrop)},
				{name: "LoadBalancer IP served", p: pkt(client, "203.0.113.10", 80), want: every},
			}},
	})
}

func TestIPVSParityEndpointConditions(t *testing.T) {
	lb := web(mt.LoadBalancerIPs("203.0.113.10"))
	rejected := []ipvsFlow{
		{name: "cluster IP", p: pkt(client, "10.96.0.10", 80), want: all(traceReject)},
		{name: "cluster IP from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: all(traceReject)},
		{name: "node port", p: pkt(client, "10.200.1.1", 30080), want: all(traceReject)},
		{name: "node port from the node", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: all(traceReject)},
		{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: all(traceReject)},
	}
	served := func(eps ...string) []ipvsFlow {
		return []ipvsFlow{{name: "cluster IP", p: pkt(client, "10.96.0.10", 80), want: eps}}
	}
	dns := mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	runIPVSParity(t, []ipvsCase{
		{name: "no endpoints", objs: []any{lb}, flows: rejected},
		{name: "empty slice", objs: []any{lb, webV4()}, flows: rejected},
		{name: "not ready only", objs: []any{lb, webV4(mt.EP("10.200.2.11", mt.NotReady()))}, flows: rejected},
		// The terminating endpoint is a weight-0 real server: kept for its connections,
		// never chosen, and the service is refused like one without endpoints.
		{name: "terminating, not serving", objs: []any{lb, webV4(mt.EP("10.200.2.11", mt.Terminating(false)))}, flows: rejected},
		{name: "serving-terminating only is served", objs: []any{lb, webV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12", mt.Terminating(false)))}, flows: served(ep1)},
		{name: "ready preferred over serving-terminating", objs: []any{lb, webV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12"), mt.EP("10.200.2.13", mt.NotReady()))}, flows: served(ep2)},
		{name: "udp without endpoints", objs: []any{dns}, flows: []ipvsFlow{
			{name: "cluster IP", p: pkt(client, "10.96.0.53", 53).udp(), want: all(traceReject)},
		}},
	})
}

func TestIPVSParityTopology(t *testing.T) {
	zoned := func(addr, zone string, hints ...string) discovery.Endpoint {
		mods := []func(*discovery.Endpoint){mt.InZone(zone), mt.OnNode("node-" + zone)}
		if len(hints) > 0 {
			mods = append(mods, mt.ZoneHints(hints...))
		}
		return mt.EP(addr, mods...)
	}
	cip := func(eps ...string) []ipvsFlow {
		return []ipvsFlow{{name: "cluster IP", p: pkt(client, "10.96.0.10", 80), want: eps}}
	}
	runIPVSParity(t, []ipvsCase{
		{name: "zone hints", objs: []any{web(), webV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2", "z2"),
			zoned("10.200.2.13", "z1", "z1"))}, flows: cip(ep1, ep3)},
		{name: "node hints", objs: []any{web(), webV4(mt.EP("10.200.2.11", mt.ZoneHints("z1"), mt.NodeHints("node-a")),
			mt.EP("10.200.2.12", mt.ZoneHints("z1"), mt.NodeHints("gw")))}, flows: cip(ep2)},
		{name: "PreferClose without hints", objs: []any{web(mt.TrafficDistribution("PreferClose")), webV4(zoned("10.200.2.11", "z1"),
			zoned("10.200.2.12", "z2"), zoned("10.200.2.13", "z1"))}, flows: cip(ep1, ep3)},
	})
}

func TestIPVSParityMasquerade(t *testing.T) {
	every := all(masq(ep1), masq(ep2), masq(ep3))
	cidr := testCfg
	cidr.ClusterCIDRs = mustPrefixes("10.200.2.0/24", "fd00:200:2::/64")
	masqAll := testCfg
	masqAll.MasqueradeAll = true
	bit3 := masqAll
	bit3.MasqueradeBit = 3
	runIPVSParity(t, []ipvsCase{
		{name: "cluster CIDR", cfg: &cidr, objs: []any{web(), webV4Ready()}, flows: []ipvsFlow{
			{name: "from outside the cluster CIDR", p: pkt(client, "10.96.0.10", 80), want: every},
			{name: "from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: every},
			{name: "from a pod", p: pkt("10.200.2.13", "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
		}},
		{name: "masquerade-all", cfg: &masqAll, objs: []any{web(), webV4Ready()}, flows: []ipvsFlow{
			{name: "from a pod", p: pkt("10.200.2.13", "10.96.0.10", 80), want: every},
		}},
		{name: "another mark bit", cfg: &bit3, objs: []any{web(), webV4Ready()}, flows: []ipvsFlow{
			{name: "from outside", p: pkt(client, "10.96.0.10", 80), want: every},
		}},
		{name: "no cluster CIDR", objs: []any{web(), webV4Ep2Local()}, flows: []ipvsFlow{
			{name: "from outside", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
			{name: "hairpin", p: pkt("10.200.2.12", "10.96.0.10", 80), want: all(ep1, masq(ep2), ep3)},
			// The kernel makes the VIP itself the source of the node's connection to it.
			{name: "from the node's VIP", p: pkt("10.96.0.10", "10.96.0.10", 80).local(), want: all(ep1, ep2, ep3),
				ipvs: every, why: "an endpoint elsewhere would answer the VIP to its own node: IPVS mode masquerades it"},
		}},
	})
}

func TestIPVSParityDualStack(t *testing.T) {
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("fd00:200:2::11"), mt.EP("fd00:200:2::12", mt.OnNode("gw")))
	svc := web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"))
	v6all := all("[fd00:200:2::11]:8080", "[fd00:200:2::12]:8080")
	v6masq := all(masq("[fd00:200:2::11]:8080"), masq("[fd00:200:2::12]:8080"))
	runIPVSParity(t, []ipvsCase{
		{name: "IPv4", objs: []any{svc, webV4Ready(), v6eps}, flows: []ipvsFlow{
			{name: "v4 cluster IP", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
		}},
		{name: "IPv6", fam: model.IPv6, objs: []any{svc, webV4Ready(), v6eps}, flows: []ipvsFlow{
			{name: "v6 cluster IP", p: pkt("fd00:200:1::2", "fd00:96::10", 80), want: v6all},
			{name: "v6 cluster IP from the node", p: pkt("fd00:200:1::1", "fd00:96::10", 80).local(), want: v6all},
			{name: "v6 LoadBalancer IP", p: pkt("fd00:200:1::2", "2001:db8:113::10", 80), want: v6masq},
			{name: "v6 node port", p: pkt("fd00:200:1::2", "fd00:200:1::1", 30080), want: v6masq},
			{name: "v6 node port not on ::1", p: pkt("::1", "::1", 30080).local(), want: all(traceAccept)},
			{name: "v6 hairpin", p: pkt("fd00:200:2::12", "fd00:96::10", 80),
				want: all("[fd00:200:2::11]:8080", masq("[fd00:200:2::12]:8080"))},
		}},
		{name: "IPv6 without v6 endpoints", fam: model.IPv6, objs: []any{svc, webV4Ready()}, flows: []ipvsFlow{
			{name: "v6 cluster IP refused", p: pkt("fd00:200:1::2", "fd00:96::10", 80), want: all(traceReject)},
			{name: "v6 LoadBalancer IP refused", p: pkt("fd00:200:1::2", "2001:db8:113::10", 80), want: all(traceReject)},
			{name: "v6 node port refused", p: pkt("fd00:200:1::2", "fd00:200:1::1", 30080), want: all(traceReject)},
		}},
	})
}

// TestIPVSParityConflicts: two services claiming the same cluster IP, LoadBalancer IP and
// node port go to the one that sorts first, with or without endpoints, as in nftables mode.
func TestIPVSParityConflicts(t *testing.T) {
	svc := func(name string) *v1.Service {
		return mt.Service("default", name, "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
			mt.LoadBalancerIPs("203.0.113.10"))
	}
	alphaEPs := mt.Slice("default", "alpha-1", "alpha", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"))
	betaEPs := mt.Slice("default", "beta-1", "beta", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.12"))
	flows := func(cip, lbip, np string) []ipvsFlow {
		return []ipvsFlow{
			{name: "cluster IP", p: pkt(client, "10.96.0.10", 80), want: all(cip)},
			{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: all(lbip)},
			{name: "node port", p: pkt(client, "10.200.1.1", 30080), want: all(np)},
		}
	}
	runIPVSParity(t, []ipvsCase{
		{name: "both with endpoints", objs: []any{svc("alpha"), alphaEPs, svc("beta"), betaEPs}, flows: flows(ep1, masq(ep1), masq(ep1))},
		{name: "second without endpoints", objs: []any{svc("alpha"), alphaEPs, svc("beta")}, flows: flows(ep1, masq(ep1), masq(ep1))},
		{name: "first without endpoints", objs: []any{svc("alpha"), svc("beta"), betaEPs},
			flows: flows(traceReject, traceReject, traceReject)},
	})
}
