package plan

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// Parity of the two rule-based modes: every flow runs through the nftables plan with the
// nft tracer and through the iptables plan with the iptables tracer, on the fixtures and IP
// plan of nft_test.go, and both must end where want says. Where iptables mode differs for a
// reason that belongs to its layout, the flow says what iptables gives instead and why.
//
// One difference holds for every refusal and needs no entry: iptables refuses traffic from
// outside in filter FORWARD or INPUT, after routing, where nftables refuses it in prerouting;
// the tracer's outcome, REJECT or DROP, is the same.

type parityFlow struct {
	name string
	p    packet
	want []string // every possible result, sorted
	// ipt, when set, is iptables mode's result instead, for the reason in why.
	ipt []string
	why string
}

type parityCase struct {
	name  string
	cfg   *Config // nil: testCfg
	fam   model.Family
	objs  []any
	flows []parityFlow
}

func runParity(t *testing.T, cases []parityCase) {
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
			ipt := buildIPT(t, cfg, fam, c.objs...)
			for _, fl := range c.flows {
				t.Run(fl.name, func(t *testing.T) {
					nt := newTracer(t, nft, nodeAddrs...)
					if got := nt.results(fl.p); !cmp.Equal(fl.want, got) {
						t.Errorf("nftables: %v: (-want +got)\n%s\n%s", fl.p, cmp.Diff(fl.want, got), trails(nt.all(fl.p)))
					}
					want := fl.want
					if fl.ipt != nil {
						want = fl.ipt
					}
					it := newIPTTracer(t, ipt, nodeAddrs...)
					if got := it.results(fl.p); !cmp.Equal(want, got) {
						t.Errorf("iptables: %v: (-want +got)\n%s\n%s\n%s", fl.p, cmp.Diff(want, got), trails(it.all(fl.p)), ipt.Dump())
					}
				})
			}
		})
	}
}

func trails(os []outcome) string {
	var b strings.Builder
	for _, o := range os {
		b.WriteString(o.String() + ":\n\t" + strings.Join(o.Matched, "\n\t") + "\n")
	}
	return b.String()
}

// clusterIPNoSuchPort: nftables refuses traffic to a cluster IP that no service port took
// (its cluster-ips set, as kube-proxy's nftables mode does); iptables mode, like kube-proxy's,
// has rules per service port only and leaves other traffic to routing.
const clusterIPNoSuchPort = "iptables has no per-cluster-IP catch-all refusal"

// hairpinEveryEndpoint: kube-proxy's iptables mode marks every endpoint's connections to
// itself for masquerade (each endpoint chain's -s rule); its nftables and IPVS modes, and
// edgegate's, only local endpoints', the only ones this node's DNAT can send to themselves.
const hairpinEveryEndpoint = "iptables mode masquerades the hairpin of every endpoint, not only local ones"

func TestParityClusterIPAndNodePort(t *testing.T) {
	every := all(masq(ep1), masq(ep2), masq(ep3))
	npAddrs := testCfg
	npAddrs.NodePortAddresses = mustPrefixes("10.200.1.1/32")
	runParity(t, []parityCase{
		{name: "cluster IP", objs: []any{web(), webV4Ready()}, flows: []parityFlow{
			{name: "spreads over every endpoint", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
			{name: "from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: all(ep1, ep2, ep3)},
			{name: "udp from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).udp().local(), want: all(traceReject),
				ipt: all(traceAccept), why: clusterIPNoSuchPort},
			{name: "undefined port", p: pkt(client, "10.96.0.10", 81), want: all(traceReject),
				ipt: all(traceAccept), why: clusterIPNoSuchPort},
			{name: "udp on a tcp port", p: pkt(client, "10.96.0.10", 80).udp(), want: all(traceReject),
				ipt: all(traceAccept), why: clusterIPNoSuchPort},
			{name: "other traffic untouched", p: pkt(client, "10.96.0.99", 80), want: all(traceAccept)},
			{name: "no node port on a ClusterIP service", p: pkt(client, "10.200.1.1", 30080), want: all(traceAccept)},
			{name: "a remote endpoint's hairpin", p: pkt("10.200.2.11", "10.96.0.10", 80), want: all(ep1, ep2, ep3),
				ipt: all(masq(ep1), ep2, ep3), why: hairpinEveryEndpoint},
		}},
		{name: "cluster IP, an endpoint on this node", objs: []any{web(), webV4Ep2Local()}, flows: []parityFlow{
			{name: "a local endpoint's hairpin is masqueraded", p: pkt("10.200.2.12", "10.96.0.10", 80), want: all(ep1, masq(ep2), ep3)},
		}},
		{name: "node port", objs: []any{web(nodePort), webV4Ready()}, flows: []parityFlow{
			{name: "node IP, masqueraded", p: pkt(client, "10.200.1.1", 30080), want: every},
			{name: "other node IP", p: pkt(client, "10.200.2.1", 30080), want: every},
			{name: "from the node", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: every},
			{name: "not on loopback", p: pkt("127.0.0.1", "127.0.0.1", 30080).local(), want: all(traceAccept)},
			{name: "not on a foreign address", p: pkt(client, "10.200.1.99", 30080), want: all(traceAccept)},
			{name: "other port", p: pkt(client, "10.200.1.1", 30081), want: all(traceAccept)},
			{name: "udp", p: pkt(client, "10.200.1.1", 30080).udp(), want: all(traceAccept)},
		}},
		{name: "nodeport-addresses", cfg: &npAddrs, objs: []any{web(nodePort), webV4Ready()}, flows: []parityFlow{
			{name: "allows", p: pkt(client, "10.200.1.1", 30080), want: every},
			{name: "excludes", p: pkt(client, "10.200.2.1", 30080), want: all(traceAccept)},
			{name: "from the node", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: every},
		}},
		{name: "nodeport-addresses, no endpoints", cfg: &npAddrs, objs: []any{web(nodePort)}, flows: []parityFlow{
			{name: "allowed address refused", p: pkt(client, "10.200.1.1", 30080), want: all(traceReject)},
			{name: "other address untouched", p: pkt(client, "10.200.2.1", 30080), want: all(traceAccept)},
			{name: "loopback untouched", p: pkt("127.0.0.1", "127.0.0.1", 30080).local(), want: all(traceAccept)},
		}},
		{name: "node port, no endpoints", objs: []any{web(nodePort)}, flows: []parityFlow{
			{name: "refused", p: pkt(client, "10.200.2.1", 30080), want: all(traceReject)},
			{name: "from the node refused", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: all(traceReject)},
			{name: "loopback untouched", p: pkt("127.0.0.1", "127.0.0.1", 30080).local(), want: all(traceAccept)},
		}},
	})
}

func TestParityExternal(t *testing.T) {
	every := all(masq(ep1), masq(ep2), masq(ep3))
	lb := web(mt.LoadBalancerIPs("203.0.113.10"), mt.ProxyModeIngress("203.0.113.11"), mt.ExternalIPs("192.0.2.7"))
	ranged := web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"),
		mt.SourceRanges("10.200.1.0/24"))
	sloppy := web(mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges(" 10.200.1.0/24", "192.000.002.0/24 "))
	unreadable := web(mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges("10.200.1.0/24", "10.200.1.0/33"))
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:200:2::11"))
	runParity(t, []parityCase{
		{name: "LoadBalancer and external IPs", objs: []any{lb, webV4Ready()}, flows: []parityFlow{
			{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: every},
			{name: "LoadBalancer IP from the node", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every},
			{name: "LoadBalancer IP other port", p: pkt(client, "203.0.113.10", 81), want: all(traceAccept)},
			{name: "ipMode Proxy is not captured", p: pkt(client, "203.0.113.11", 80), want: all(traceAccept)},
			{name: "external IP", p: pkt(client, "192.0.2.7", 80), want: every},
			{name: "external IP from the node", p: pkt("10.200.1.1", "192.0.2.7", 80).local(), want: every},
			{name: "node port of a LoadBalancer", p: pkt(client, "10.200.1.1", 30080), want: every},
		}},
		{name: "LoadBalancer and external IPs, no endpoints", objs: []any{lb}, flows: []parityFlow{
			{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: all(traceReject)},
			{name: "LoadBalancer IP from the node", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: all(traceReject)},
			{name: "external IP", p: pkt(client, "192.0.2.7", 80), want: all(traceReject)},
			{name: "external IP from the node", p: pkt("10.200.1.1", "192.0.2.7", 80).local(), want: all(traceReject)},
			{name: "ipMode Proxy untouched", p: pkt(client, "203.0.113.11", 80), want: all(traceAccept)},
		}},
		{name: "source ranges", objs: []any{ranged, webV4Ready(), v6eps}, flows: []parityFlow{
			{name: "allowed source", p: pkt(client, "203.0.113.10", 80), want: every},
			{name: "other source dropped", p: pkt(stranger, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "the node is inside the range", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every},
			{name: "node ports are not subject to source ranges", p: pkt(stranger, "10.200.1.1", 30080), want: every},
			{name: "cluster IP is not subject to source ranges", p: pkt(stranger, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
		}},
		{name: "source ranges as kube-proxy reads them (padded, leading zeros)", objs: []any{sloppy, webV4Ready()}, flows: []parityFlow{
			{name: "allowed source", p: pkt(client, "203.0.113.10", 80), want: every},
			{name: "other source dropped", p: pkt(stranger, "203.0.113.10", 80), want: all(traceDrop)},
		}},
		{name: "source ranges that cannot be understood", objs: []any{unreadable, webV4Ready()}, flows: []parityFlow{
			{name: "the insider is refused too", p: pkt(client, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "other source dropped", p: pkt(stranger, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "from the node dropped", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: all(traceDrop)},
			{name: "node ports are not subject to source ranges", p: pkt(stranger, "10.200.1.1", 30080), want: every},
		}},
		{name: "source ranges, IPv6", fam: model.IPv6, objs: []any{ranged, webV4Ready(), v6eps}, flows: []parityFlow{
			{name: "v4-only ranges close the v6 LoadBalancer IP", p: pkt("fd00:200:1::2", "2001:db8:113::10", 80), want: all(traceDrop)},
			{name: "v6 cluster IP still open", p: pkt("fd00:200:1::2", "fd00:96::10", 80), want: all("[fd00:200:2::11]:8080")},
		}},
		{name: "source ranges, no endpoints", objs: []any{ranged}, flows: []parityFlow{
			{name: "allowed source refused", p: pkt(client, "203.0.113.10", 80), want: all(traceReject)},
			{name: "other source dropped", p: pkt(stranger, "203.0.113.10", 80), want: all(traceDrop)},
		}},
	})
	// Nothing about the Proxy-mode address may be in the plan at all.
	if d := buildIPT(t, testCfg, model.IPv4, lb, webV4Ready()).Dump(); strings.Contains(d, "203.0.113.11") {
		t.Errorf("ipMode Proxy address in the plan:\n%s", d)
	}
}

func TestParityTrafficPolicies(t *testing.T) {
	every := all(masq(ep1), masq(ep2), masq(ep3))
	lb := func(mods ...func(*v1.Service)) *v1.Service {
		return web(append([]func(*v1.Service){mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalLocal(32000)}, mods...)...)
	}
	oneLocal := webV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")),
		mt.EP("10.200.2.13", mt.OnNode("backend-3")))
	withCIDR := testCfg
	withCIDR.ClusterCIDRs = mustPrefixes("10.200.2.0/24", "fd00:200:2::/64")
	runParity(t, []parityCase{
		{name: "eTP Local, no local endpoint", objs: []any{lb(), webV4Ready()}, flows: []parityFlow{
			{name: "node port from outside dropped", p: pkt(client, "10.200.1.1", 30080), want: all(traceDrop)},
			{name: "LoadBalancer IP from outside dropped", p: pkt(client, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "node port from the node served", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: every},
			{name: "LoadBalancer IP from the node served", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every},
			{name: "cluster IP served", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
		}},
		{name: "eTP Local with a cluster CIDR, no local endpoint", cfg: &withCIDR, objs: []any{lb(), webV4Ready()}, flows: []parityFlow{
			// A pod elsewhere is outside traffic to this gateway: Policy has no exception for it.
			{name: "pod to LoadBalancer IP dropped", p: pkt("10.200.2.13", "203.0.113.10", 80), want: all(traceDrop)},
			{name: "pod to node port dropped", p: pkt("10.200.2.13", "10.200.1.1", 30080), want: all(traceDrop)},
			{name: "node served", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every},
		}},
		{name: "eTP Local, local endpoint", objs: []any{lb(), oneLocal}, flows: []parityFlow{
			{name: "node port serves only the local endpoint", p: pkt(client, "10.200.1.1", 30080), want: all(ep2)},
			{name: "LoadBalancer IP serves only the local endpoint", p: pkt(client, "203.0.113.10", 80), want: all(ep2)},
			{name: "from the node every endpoint", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every},
			{name: "cluster IP every endpoint", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
			{name: "health check node port untouched", p: pkt(client, "10.200.1.1", 32000), want: all(traceAccept)},
		}},
		{name: "eTP and iTP Local, no local endpoint", objs: []any{lb(mt.InternalLocal()), webV4Ready()}, flows: []parityFlow{
			{name: "LoadBalancer IP from outside dropped", p: pkt(client, "203.0.113.10", 80), want: all(traceDrop)},
			{name: "LoadBalancer IP from the node served", p: pkt("10.200.1.1", "203.0.113.10", 80).local(), want: every},
			{name: "cluster IP dropped", p: pkt(client, "10.96.0.10", 80), want: all(traceDrop)},
		}},
		{name: "eTP Cluster masquerades", objs: []any{web(mt.LoadBalancerIPs("203.0.113.10")), webV4Ready()}, flows: []parityFlow{
			{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: every},
		}},
		{name: "iTP Local, no local endpoint", objs: []any{web(mt.InternalLocal()), webV4Ready()}, flows: []parityFlow{
			{name: "drops", p: pkt(client, "10.96.0.10", 80), want: all(traceDrop)},
			{name: "drops from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: all(traceDrop)},
		}},
		{name: "iTP Local, local endpoint", objs: []any{web(mt.InternalLocal()),
			webV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")))}, flows: []parityFlow{
			{name: "only the local endpoint", p: pkt(client, "10.96.0.10", 80), want: all(ep2)},
			{name: "only the local endpoint from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: all(ep2)},
		}},
		{name: "iTP Local, eTP Cluster, no local endpoint", objs: []any{web(mt.InternalLocal(), mt.LoadBalancerIPs("203.0.113.10")), webV4Ready()},
			flows: []parityFlow{
				{name: "cluster IP dropped", p: pkt(client, "10.96.0.10", 80), want: all(traceDrop)},
				{name: "LoadBalancer IP served", p: pkt(client, "203.0.113.10", 80), want: every},
			}},
	})
}

func TestParityEndpointConditions(t *testing.T) {
	lb := web(mt.LoadBalancerIPs("203.0.113.10"))
	rejected := []parityFlow{
		{name: "cluster IP", p: pkt(client, "10.96.0.10", 80), want: all(traceReject)},
		{name: "cluster IP from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: all(traceReject)},
		{name: "node port", p: pkt(client, "10.200.1.1", 30080), want: all(traceReject)},
		{name: "node port from the node", p: pkt("10.200.1.1", "10.200.1.1", 30080).local(), want: all(traceReject)},
		{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: all(traceReject)},
	}
	served := func(eps ...string) []parityFlow {
		return []parityFlow{{name: "cluster IP", p: pkt(client, "10.96.0.10", 80), want: eps}}
	}
	dns := mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	runParity(t, []parityCase{
		{name: "no endpoints", objs: []any{lb}, flows: rejected},
		{name: "empty slice", objs: []any{lb, webV4()}, flows: rejected},
		{name: "not ready only", objs: []any{lb, webV4(mt.EP("10.200.2.11", mt.NotReady()))}, flows: rejected},
		{name: "terminating, not serving", objs: []any{lb, webV4(mt.EP("10.200.2.11", mt.Terminating(false)))}, flows: rejected},
		{name: "serving-terminating only is served", objs: []any{lb, webV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12", mt.Terminating(false)))}, flows: served(ep1)},
		{name: "ready preferred over serving-terminating", objs: []any{lb, webV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12"), mt.EP("10.200.2.13", mt.NotReady()))}, flows: served(ep2)},
		{name: "udp without endpoints", objs: []any{dns}, flows: []parityFlow{
			{name: "cluster IP", p: pkt(client, "10.96.0.53", 53).udp(), want: all(traceReject)},
		}},
	})
}

func TestParityTopology(t *testing.T) {
	zoned := func(addr, zone string, hints ...string) discovery.Endpoint {
		mods := []func(*discovery.Endpoint){mt.InZone(zone), mt.OnNode("node-" + zone)}
		if len(hints) > 0 {
			mods = append(mods, mt.ZoneHints(hints...))
		}
		return mt.EP(addr, mods...)
	}
	cip := func(eps ...string) []parityFlow {
		return []parityFlow{{name: "cluster IP", p: pkt(client, "10.96.0.10", 80), want: eps}}
	}
	preferClose := web(mt.TrafficDistribution("PreferClose"))
	runParity(t, []parityCase{
		{name: "zone hints", objs: []any{web(), webV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2", "z2"),
			zoned("10.200.2.13", "z1", "z1"))}, flows: cip(ep1, ep3)},
		{name: "no hint for the node's zone", objs: []any{web(), webV4(zoned("10.200.2.11", "z2", "z2"),
			zoned("10.200.2.12", "z3", "z3"))}, flows: cip(ep1, ep2)},
		{name: "node hints", objs: []any{web(), webV4(mt.EP("10.200.2.11", mt.ZoneHints("z1"), mt.NodeHints("node-a")),
			mt.EP("10.200.2.12", mt.ZoneHints("z1"), mt.NodeHints("gw")))}, flows: cip(ep2)},
		{name: "PreferClose without hints", objs: []any{preferClose, webV4(zoned("10.200.2.11", "z1"), zoned("10.200.2.12", "z2"),
			zoned("10.200.2.13", "z1"))}, flows: cip(ep1, ep3)},
	})
}

func TestParityMasquerade(t *testing.T) {
	every := all(masq(ep1), masq(ep2), masq(ep3))
	cidr := testCfg
	cidr.ClusterCIDRs = mustPrefixes("10.200.2.0/24", "fd00:200:2::/64")
	masqAll := testCfg
	masqAll.MasqueradeAll = true
	bit3 := masqAll
	bit3.MasqueradeBit = 3
	runParity(t, []parityCase{
		{name: "cluster CIDR", cfg: &cidr, objs: []any{web(), webV4Ready()}, flows: []parityFlow{
			{name: "from outside the cluster CIDR", p: pkt(client, "10.96.0.10", 80), want: every},
			{name: "from the node", p: pkt("10.200.1.1", "10.96.0.10", 80).local(), want: every},
			{name: "from a pod", p: pkt("10.200.2.13", "10.96.0.10", 80), want: all(ep1, ep2, ep3),
				ipt: all(ep1, ep2, masq(ep3)), why: hairpinEveryEndpoint},
		}},
		{name: "masquerade-all", cfg: &masqAll, objs: []any{web(), webV4Ready()}, flows: []parityFlow{
			{name: "from a pod", p: pkt("10.200.2.13", "10.96.0.10", 80), want: every},
		}},
		{name: "another mark bit", cfg: &bit3, objs: []any{web(), webV4Ready()}, flows: []parityFlow{
			{name: "from outside", p: pkt(client, "10.96.0.10", 80), want: every},
		}},
		{name: "no cluster CIDR", objs: []any{web(), webV4Ep2Local()}, flows: []parityFlow{
			{name: "from outside", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
			{name: "hairpin", p: pkt("10.200.2.12", "10.96.0.10", 80), want: all(ep1, masq(ep2), ep3)},
		}},
	})
	p := buildIPT(t, bit3, model.IPv4, web(), webV4Ready())
	if d := p.Dump(); !strings.Contains(d, "--mark 0x8/0x8") || strings.Contains(d, "0x4000") {
		t.Errorf("masquerade bit 3 not used throughout:\n%s", d)
	}
}

func TestParityDualStack(t *testing.T) {
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("fd00:200:2::11"), mt.EP("fd00:200:2::12", mt.OnNode("gw")))
	svc := web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"))
	v6all := all("[fd00:200:2::11]:8080", "[fd00:200:2::12]:8080")
	v6masq := all(masq("[fd00:200:2::11]:8080"), masq("[fd00:200:2::12]:8080"))
	runParity(t, []parityCase{
		{name: "IPv4", objs: []any{svc, webV4Ready(), v6eps}, flows: []parityFlow{
			{name: "v4 cluster IP", p: pkt(client, "10.96.0.10", 80), want: all(ep1, ep2, ep3)},
		}},
		{name: "IPv6", fam: model.IPv6, objs: []any{svc, webV4Ready(), v6eps}, flows: []parityFlow{
			{name: "v6 cluster IP", p: pkt("fd00:200:1::2", "fd00:96::10", 80), want: v6all},
			{name: "v6 cluster IP from the node", p: pkt("fd00:200:1::1", "fd00:96::10", 80).local(), want: v6all},
			{name: "v6 LoadBalancer IP", p: pkt("fd00:200:1::2", "2001:db8:113::10", 80), want: v6masq},
			{name: "v6 node port", p: pkt("fd00:200:1::2", "fd00:200:1::1", 30080), want: v6masq},
			{name: "v6 node port not on ::1", p: pkt("::1", "::1", 30080).local(), want: all(traceAccept)},
			{name: "v6 hairpin", p: pkt("fd00:200:2::12", "fd00:96::10", 80),
				want: all("[fd00:200:2::11]:8080", masq("[fd00:200:2::12]:8080"))},
		}},
		{name: "IPv6 without v6 endpoints", fam: model.IPv6, objs: []any{svc, webV4Ready()}, flows: []parityFlow{
			{name: "v6 cluster IP refused", p: pkt("fd00:200:1::2", "fd00:96::10", 80), want: all(traceReject)},
			{name: "v6 LoadBalancer IP refused", p: pkt("fd00:200:1::2", "2001:db8:113::10", 80), want: all(traceReject)},
			{name: "v6 node port refused", p: pkt("fd00:200:1::2", "fd00:200:1::1", 30080), want: all(traceReject)},
		}},
	})
}

// TestParityAffinity: a client pinned to an endpoint stays there whatever the random
// choice, in both modes; another client is not pinned.
func TestParityAffinity(t *testing.T) {
	objs := []any{web(mt.Affinity(300), mt.LoadBalancerIPs("203.0.113.10")), webV4Ready()}
	nt := newTracer(t, build(t, testCfg, model.IPv4, objs...), nodeAddrs...)
	it := newIPTTracer(t, buildIPT(t, testCfg, model.IPv4, objs...), nodeAddrs...)
	for _, c := range []struct {
		first  packet
		pinned string
	}{
		{pkt(client, "10.96.0.10", 80), ep2},
		{pkt("10.200.1.3", "203.0.113.10", 80), masq(ep3)},
	} {
		if got, want := it.results(c.first), nt.results(c.first); !cmp.Equal(got, want) || len(got) != 3 {
			t.Fatalf("%v before any connection: iptables %v, nftables %v", c.first, got, want)
		}
		k := map[string]int{ep2: 1, masq(ep3): 2}[c.pinned]
		nt.choose = endpointChoice(k)
		it.choose = pick(k)
		if n, i := nt.trace(c.first), it.trace(c.first); n.String() != c.pinned || i.String() != c.pinned {
			t.Fatalf("%v first connection with choice %d: nftables %v, iptables %v", c.first, k, n, i)
		}
		nt.choose, it.choose = nil, nil
		for _, got := range [][]string{nt.results(c.first), it.results(c.first)} {
			if !cmp.Equal(got, all(c.pinned)) {
				t.Errorf("%v: pinned client can reach %v", c.first, got)
			}
		}
	}
	other := pkt("10.200.1.4", "10.96.0.10", 80)
	if got := it.results(other); !cmp.Equal(got, all(ep1, ep2, ep3)) {
		t.Errorf("another client is pinned too: %v", got)
	}
}

// TestParityConflicts: two services claiming the same cluster IP, LoadBalancer IP and node
// port. Both modes give them to the service that sorts first while it has endpoints. When
// it has none, nftables keeps refusing (its maps hold one owner per key) while iptables,
// like kube-proxy, has no rule of the first service in nat and DNATs to the second one's
// endpoint before the filter table's refusal could apply.
func TestParityConflicts(t *testing.T) {
	svc := func(name string) *v1.Service {
		return mt.Service("default", name, "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
			mt.LoadBalancerIPs("203.0.113.10"))
	}
	alphaEPs := mt.Slice("default", "alpha-1", "alpha", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"))
	betaEPs := mt.Slice("default", "beta-1", "beta", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.12"))
	const why = "iptables has no owner per key: the first service with endpoints takes it"
	flows := func(cip, lbip, np string, ipt ...string) []parityFlow {
		fl := []parityFlow{
			{name: "cluster IP", p: pkt(client, "10.96.0.10", 80), want: all(cip)},
			{name: "LoadBalancer IP", p: pkt(client, "203.0.113.10", 80), want: all(lbip)},
			{name: "node port", p: pkt(client, "10.200.1.1", 30080), want: all(np)},
		}
		for i := range ipt {
			fl[i].ipt, fl[i].why = all(ipt[i]), why
		}
		return fl
	}
	runParity(t, []parityCase{
		{name: "both with endpoints", objs: []any{svc("alpha"), alphaEPs, svc("beta"), betaEPs},
			flows: flows(ep1, masq(ep1), masq(ep1))},
		{name: "second without endpoints", objs: []any{svc("alpha"), alphaEPs, svc("beta")},
			flows: flows(ep1, masq(ep1), masq(ep1))},
		{name: "first without endpoints", objs: []any{svc("alpha"), svc("beta"), betaEPs},
			flows: flows(traceReject, traceReject, traceReject, ep2, masq(ep2), masq(ep2))},
	})
}
