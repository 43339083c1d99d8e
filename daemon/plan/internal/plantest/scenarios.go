package plantest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
)

// The scenarios every proxy mode runs: each flow goes through the mode's plan with the
// mode's tracer, on the fixtures and IP plan of world.go, and must end where Want says.
// nftables mode is the reference: its result is always Want. Where iptables or IPVS mode
// differs for a reason that belongs to its layout, the flow says what that mode gives
// instead and why.
//
// One difference holds for every refusal and needs no entry: iptables refuses traffic from
// outside in filter FORWARD or INPUT, after routing, where nftables refuses it in prerouting;
// the tracer's outcome, REJECT or DROP, is the same.

// Flow is one packet of a scenario and where it must end.
type Flow struct {
	Name string
	P    Packet
	Want []string // every possible result, sorted
	// IPT and IPVS, when set, are that mode's result instead, for the reason in IPTWhy or
	// IPVSWhy.
	IPT, IPVS       []string
	IPTWhy, IPVSWhy string
}

// want is the flow's result in mode m.
func (f Flow) want(m plan.Mode) []string {
	switch {
	case m == plan.ModeIPTables && f.IPT != nil:
		return f.IPT
	case m == plan.ModeIPVS && f.IPVS != nil:
		return f.IPVS
	}
	return f.Want
}

// Scenario is a set of objects planned in one family with one configuration, and the
// flows through that plan.
type Scenario struct {
	Name  string
	Cfg   *plan.Config // nil: Cfg
	Fam   model.Family // 0: IPv4
	Objs  []any
	Flows []Flow
}

// Plan is what the shared tests need of every mode's plan.
type Plan interface{ Dump() string }

// Mode is one proxy mode as the shared tests (RunScenarios, Dumps, FuzzPlan) drive it.
type Mode[P Plan] struct {
	Mode plan.Mode
	Plan func(snap *model.Snapshot, f model.Family, cfg plan.Config) P
	// Check proves a plan is one the kernel would take.
	Check func(P) error
	// Tracer traces p on a node with the addresses local.
	Tracer func(t *testing.T, p P, local ...string) Tracer
	// Conflicts, when set, reports whether two service ports of p claim one address or
	// node port.
	Conflicts func(snap *model.Snapshot, f model.Family, cfg plan.Config, p P) bool
}

// Build plans objs in family f and fails t if the plan fails m.Check.
func (m Mode[P]) Build(t *testing.T, cfg plan.Config, f model.Family, objs ...any) P {
	t.Helper()
	return m.checked(t, m.Plan(mt.Snapshot(objs...), f, cfg), f)
}

func (m Mode[P]) checked(t *testing.T, p P, f model.Family) P {
	t.Helper()
	if err := m.Check(p); err != nil {
		t.Fatalf("%s %v plan fails its check: %v\n%s", m.Mode, f, err, p.Dump())
	}
	return p
}

// Dumps is the dump GoldenDumps keeps: the plans of m with cfg.
func (m Mode[P]) Dumps(cfg plan.Config) func(t *testing.T, f model.Family, objs ...any) string {
	return func(t *testing.T, f model.Family, objs ...any) string {
		return m.Build(t, cfg, f, objs...).Dump()
	}
}

// NoDataPlane proves that Services without a data plane (ExternalName, headless) plan
// nothing in mode m, and that an IPv4-only Service leaves the IPv6 plan as if it did not
// exist.
func NoDataPlane[P Plan](t *testing.T, m Mode[P]) {
	empty := m.Build(t, Cfg, model.IPv4).Dump()
	for name, svc := range map[string]*v1.Service{
		"ExternalName": Web(mt.ExternalName("db.example.com")),
		"headless":     Web(mt.Headless()),
	} {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(empty, m.Build(t, Cfg, model.IPv4, svc, WebV4Ready()).Dump()); d != "" {
				t.Errorf("%s: plan differs from the empty one (-empty +got):\n%s", m.Mode, d)
			}
		})
	}
	if d := cmp.Diff(m.Build(t, Cfg, model.IPv6).Dump(), m.Build(t, Cfg, model.IPv6, Web(NodePort), WebV4Ready()).Dump()); d != "" {
		t.Errorf("%s: v4-only service in the v6 plan (-empty +got):\n%s", m.Mode, d)
	}
}

// RunScenarios runs every scenario through mode m.
func RunScenarios[P Plan](t *testing.T, m Mode[P]) {
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases() {
				t.Run(c.Name, func(t *testing.T) {
					cfg := Cfg
					if c.Cfg != nil {
						cfg = *c.Cfg
					}
					fam := c.Fam
					if fam == 0 {
						fam = model.IPv4
					}
					for _, fl := range c.Flows {
						t.Run(fl.Name, func(t *testing.T) {
							p := m.Build(t, cfg, fam, c.Objs...)
							tr := m.Tracer(t, p, NodeAddrs...)
							if want, got := fl.want(m.Mode), tr.Results(fl.P); !cmp.Equal(want, got) {
								t.Errorf("%s: %v: (-want +got)\n%s\n%s\n%s", m.Mode, fl.P, cmp.Diff(want, got), Trails(tr.All(fl.P)), p.Dump())
							}
						})
					}
				})
			}
		})
	}
}

// groups are the scenario tables, by what they cover.
var groups = []struct {
	name  string
	cases func() []Scenario
}{
	{"ClusterIPAndNodePort", clusterIPAndNodePort},
	{"External", external},
	{"TrafficPolicies", trafficPolicies},
	{"EndpointConditions", endpointConditions},
	{"Topology", topology},
	{"Masquerade", masquerade},
	{"DualStack", dualStack},
	{"Conflicts", conflicts},
}

// clusterIPNoSuchPort: nftables refuses traffic to a cluster IP that no service port took
// (its cluster-ips set, as kube-proxy's nftables mode does); iptables mode, like kube-proxy's,
// has rules per service port only and leaves other traffic to routing.
const clusterIPNoSuchPort = "iptables has no per-cluster-IP catch-all refusal"

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

// hairpinEveryEndpoint: kube-proxy's iptables mode marks every endpoint's connections to
// itself for masquerade (each endpoint chain's -s rule); its nftables and IPVS modes, and
// edgegate's, only local endpoints', the only ones this node's DNAT can send to themselves.
const hairpinEveryEndpoint = "iptables mode masquerades the hairpin of every endpoint, not only local ones"

func clusterIPAndNodePort() []Scenario {
	every := All(Masq(Ep1), Masq(Ep2), Masq(Ep3))
	npAddrs := Cfg
	npAddrs.NodePortAddresses = MustPrefixes("10.200.1.1/32")
	return []Scenario{
		{Name: "cluster IP", Objs: []any{Web(), WebV4Ready()}, Flows: []Flow{
			{Name: "spreads over every endpoint", P: Pkt(Client, "10.96.0.10", 80), Want: All(Ep1, Ep2, Ep3)},
			{Name: "from the node", P: Pkt("10.200.1.1", "10.96.0.10", 80).Local(), Want: All(Ep1, Ep2, Ep3)},
			{Name: "udp from the node", P: Pkt("10.200.1.1", "10.96.0.10", 80).UDP().Local(), Want: All(Reject),
				IPT: All(Accept), IPTWhy: clusterIPNoSuchPort},
			{Name: "undefined port", P: Pkt(Client, "10.96.0.10", 81), Want: All(Reject),
				IPT: All(Accept), IPTWhy: clusterIPNoSuchPort},
			{Name: "undefined port from the node", P: Pkt("10.200.1.1", "10.96.0.10", 81).Local(), Want: All(Reject),
				IPT: All(Accept), IPTWhy: clusterIPNoSuchPort},
			{Name: "udp on a tcp port", P: Pkt(Client, "10.96.0.10", 80).UDP(), Want: All(Reject),
				IPT: All(Accept), IPTWhy: clusterIPNoSuchPort},
			{Name: "other traffic untouched", P: Pkt(Client, "10.96.0.99", 80), Want: All(Accept)},
			{Name: "no node port on a ClusterIP service", P: Pkt(Client, "10.200.1.1", 30080), Want: All(Accept)},
			{Name: "a remote endpoint's hairpin", P: Pkt("10.200.2.11", "10.96.0.10", 80), Want: All(Ep1, Ep2, Ep3),
				IPT: All(Masq(Ep1), Ep2, Ep3), IPTWhy: hairpinEveryEndpoint},
		}},
		{Name: "cluster IP, an endpoint on this node", Objs: []any{Web(), WebV4Ep2Local()}, Flows: []Flow{
			{Name: "a local endpoint's hairpin is masqueraded", P: Pkt("10.200.2.12", "10.96.0.10", 80), Want: All(Ep1, Masq(Ep2), Ep3)},
		}},
		{Name: "node port", Objs: []any{Web(NodePort), WebV4Ready()}, Flows: []Flow{
			{Name: "node IP, masqueraded", P: Pkt(Client, "10.200.1.1", 30080), Want: every},
			{Name: "other node IP", P: Pkt(Client, "10.200.2.1", 30080), Want: every},
			{Name: "from the node", P: Pkt("10.200.1.1", "10.200.1.1", 30080).Local(), Want: every},
			{Name: "not on loopback", P: Pkt("127.0.0.1", "127.0.0.1", 30080).Local(), Want: All(Accept)},
			{Name: "not on a foreign address", P: Pkt(Client, "10.200.1.99", 30080), Want: All(Accept)},
			{Name: "other port", P: Pkt(Client, "10.200.1.1", 30081), Want: All(Accept)},
			{Name: "udp", P: Pkt(Client, "10.200.1.1", 30080).UDP(), Want: All(Accept)},
		}},
		{Name: "nodeport-addresses", Cfg: &npAddrs, Objs: []any{Web(NodePort), WebV4Ready()}, Flows: []Flow{
			{Name: "allows", P: Pkt(Client, "10.200.1.1", 30080), Want: every},
			{Name: "excludes", P: Pkt(Client, "10.200.2.1", 30080), Want: All(Accept)},
			{Name: "from the node", P: Pkt("10.200.1.1", "10.200.1.1", 30080).Local(), Want: every},
		}},
		{Name: "nodeport-addresses, no endpoints", Cfg: &npAddrs, Objs: []any{Web(NodePort)}, Flows: []Flow{
			{Name: "allowed address refused", P: Pkt(Client, "10.200.1.1", 30080), Want: All(Reject)},
			{Name: "other address untouched", P: Pkt(Client, "10.200.2.1", 30080), Want: All(Accept)},
			{Name: "loopback untouched", P: Pkt("127.0.0.1", "127.0.0.1", 30080).Local(), Want: All(Accept)},
		}},
		{Name: "node port, no endpoints", Objs: []any{Web(NodePort)}, Flows: []Flow{
			{Name: "refused", P: Pkt(Client, "10.200.2.1", 30080), Want: All(Reject)},
			{Name: "from the node refused", P: Pkt("10.200.1.1", "10.200.1.1", 30080).Local(), Want: All(Reject)},
			{Name: "loopback untouched", P: Pkt("127.0.0.1", "127.0.0.1", 30080).Local(), Want: All(Accept)},
		}},
	}
}

func external() []Scenario {
	every := All(Masq(Ep1), Masq(Ep2), Masq(Ep3))
	lb := Web(mt.LoadBalancerIPs("203.0.113.10"), mt.ProxyModeIngress("203.0.113.11"), mt.ExternalIPs("192.0.2.7"))
	ranged := Web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"),
		mt.SourceRanges("10.200.1.0/24"))
	sloppy := Web(mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges(" 10.200.1.0/24", "192.000.002.0/24 "))
	unreadable := Web(mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges("10.200.1.0/24", "10.200.1.0/33"))
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:200:2::11"))
	return []Scenario{
		{Name: "LoadBalancer and external IPs", Objs: []any{lb, WebV4Ready()}, Flows: []Flow{
			{Name: "LoadBalancer IP", P: Pkt(Client, "203.0.113.10", 80), Want: every},
			{Name: "LoadBalancer IP from the node", P: Pkt("10.200.1.1", "203.0.113.10", 80).Local(), Want: every},
			{Name: "LoadBalancer IP other port", P: Pkt(Client, "203.0.113.10", 81), Want: All(Accept),
				IPVS: All(Reject), IPVSWhy: whyVIPIsLocal},
			{Name: "ipMode Proxy is not captured", P: Pkt(Client, "203.0.113.11", 80), Want: All(Accept)},
			{Name: "external IP", P: Pkt(Client, "192.0.2.7", 80), Want: every},
			{Name: "external IP from the node", P: Pkt("10.200.1.1", "192.0.2.7", 80).Local(), Want: every},
			{Name: "node port of a LoadBalancer", P: Pkt(Client, "10.200.1.1", 30080), Want: every},
		}},
		{Name: "LoadBalancer and external IPs, no endpoints", Objs: []any{lb}, Flows: []Flow{
			{Name: "LoadBalancer IP", P: Pkt(Client, "203.0.113.10", 80), Want: All(Reject)},
			{Name: "LoadBalancer IP from the node", P: Pkt("10.200.1.1", "203.0.113.10", 80).Local(), Want: All(Reject)},
			{Name: "external IP", P: Pkt(Client, "192.0.2.7", 80), Want: All(Reject)},
			{Name: "external IP from the node", P: Pkt("10.200.1.1", "192.0.2.7", 80).Local(), Want: All(Reject)},
			{Name: "ipMode Proxy untouched", P: Pkt(Client, "203.0.113.11", 80), Want: All(Accept)},
		}},
		{Name: "source ranges", Objs: []any{ranged, WebV4Ready(), v6eps}, Flows: []Flow{
			{Name: "allowed source", P: Pkt(Client, "203.0.113.10", 80), Want: every},
			{Name: "other source dropped", P: Pkt(Stranger, "203.0.113.10", 80), Want: All(Drop)},
			{Name: "the node is inside the range", P: Pkt("10.200.1.1", "203.0.113.10", 80).Local(), Want: every},
			{Name: "node ports are not subject to source ranges", P: Pkt(Stranger, "10.200.1.1", 30080), Want: every},
			{Name: "cluster IP is not subject to source ranges", P: Pkt(Stranger, "10.96.0.10", 80), Want: All(Ep1, Ep2, Ep3)},
		}},
		{Name: "source ranges as kube-proxy reads them (padded, leading zeros)", Objs: []any{sloppy, WebV4Ready()}, Flows: []Flow{
			{Name: "allowed source", P: Pkt(Client, "203.0.113.10", 80), Want: every},
			{Name: "other source dropped", P: Pkt(Stranger, "203.0.113.10", 80), Want: All(Drop)},
		}},
		{Name: "source ranges that cannot be understood", Objs: []any{unreadable, WebV4Ready()}, Flows: []Flow{
			{Name: "the insider is refused too", P: Pkt(Client, "203.0.113.10", 80), Want: All(Drop)},
			{Name: "other source dropped", P: Pkt(Stranger, "203.0.113.10", 80), Want: All(Drop)},
			{Name: "from the node dropped", P: Pkt("10.200.1.1", "203.0.113.10", 80).Local(), Want: All(Drop)},
			{Name: "node ports are not subject to source ranges", P: Pkt(Stranger, "10.200.1.1", 30080), Want: every},
		}},
		{Name: "source ranges, IPv6", Fam: model.IPv6, Objs: []any{ranged, WebV4Ready(), v6eps}, Flows: []Flow{
			{Name: "v4-only ranges close the v6 LoadBalancer IP", P: Pkt("fd00:200:1::2", "2001:db8:113::10", 80), Want: All(Drop)},
			{Name: "v6 cluster IP still open", P: Pkt("fd00:200:1::2", "fd00:96::10", 80), Want: All("[fd00:200:2::11]:8080")},
		}},
		{Name: "source ranges, no endpoints", Objs: []any{ranged}, Flows: []Flow{
			{Name: "allowed source refused", P: Pkt(Client, "203.0.113.10", 80), Want: All(Reject)},
			{Name: "other source dropped", P: Pkt(Stranger, "203.0.113.10", 80), Want: All(Drop)},
		}},
	}
}

func trafficPolicies() []Scenario {
	every := All(Masq(Ep1), Masq(Ep2), Masq(Ep3))
	lb := func(mods ...func(*v1.Service)) *v1.Service {
		return Web(append([]func(*v1.Service){mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalLocal(32000)}, mods...)...)
	}
	oneLocal := WebV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")),
		mt.EP("10.200.2.13", mt.OnNode("backend-3")))
	withCIDR := Cfg
	withCIDR.ClusterCIDRs = MustPrefixes("10.200.2.0/24", "fd00:200:2::/64")
	return []Scenario{
		{Name: "eTP Local, no local endpoint", Objs: []any{lb(), WebV4Ready()}, Flows: []Flow{
			{Name: "node port from outside dropped", P: Pkt(Client, "10.200.1.1", 30080), Want: All(Drop)},
			{Name: "LoadBalancer IP from outside dropped", P: Pkt(Client, "203.0.113.10", 80), Want: All(Drop)},
			{Name: "node port from the node served", P: Pkt("10.200.1.1", "10.200.1.1", 30080).Local(), Want: every,
				IPVS: All(Drop), IPVSWhy: whyOneVirtualServer},
			{Name: "LoadBalancer IP from the node served", P: Pkt("10.200.1.1", "203.0.113.10", 80).Local(), Want: every,
				IPVS: All(Drop), IPVSWhy: whyOneVirtualServer},
			{Name: "cluster IP served", P: Pkt(Client, "10.96.0.10", 80), Want: All(Ep1, Ep2, Ep3)},
		}},
		{Name: "eTP Local with a cluster CIDR, no local endpoint", Cfg: &withCIDR, Objs: []any{lb(), WebV4Ready()}, Flows: []Flow{
			// A pod elsewhere is outside traffic to this gateway: Policy has no exception for it.
			{Name: "pod to LoadBalancer IP dropped", P: Pkt("10.200.2.13", "203.0.113.10", 80), Want: All(Drop)},
			{Name: "pod to node port dropped", P: Pkt("10.200.2.13", "10.200.1.1", 30080), Want: All(Drop)},
			{Name: "node served", P: Pkt("10.200.1.1", "203.0.113.10", 80).Local(), Want: every,
				IPVS: All(Drop), IPVSWhy: whyOneVirtualServer},
		}},
		{Name: "eTP Local, local endpoint", Objs: []any{lb(), oneLocal}, Flows: []Flow{
			{Name: "node port serves only the local endpoint", P: Pkt(Client, "10.200.1.1", 30080), Want: All(Ep2)},
			{Name: "LoadBalancer IP serves only the local endpoint", P: Pkt(Client, "203.0.113.10", 80), Want: All(Ep2)},
			{Name: "from the node every endpoint", P: Pkt("10.200.1.1", "203.0.113.10", 80).Local(), Want: every,
				IPVS: All(Ep2), IPVSWhy: whyOneVirtualServer},
			// Only IPVS mode puts the LoadBalancer IP on the node, which makes it the source of
			// the node's own connection; the other modes never see such a packet.
			{Name: "from the node's VIP, masqueraded", P: Pkt("203.0.113.10", "203.0.113.10", 80).Local(), Want: All(Ep2),
				IPVS: All(Masq(Ep2)), IPVSWhy: "an endpoint must not answer a VIP of this node"},
			{Name: "cluster IP every endpoint", P: Pkt(Client, "10.96.0.10", 80), Want: All(Ep1, Ep2, Ep3)},
			{Name: "health check node port untouched", P: Pkt(Client, "10.200.1.1", 32000), Want: All(Accept)},
		}},
		{Name: "eTP and iTP Local, no local endpoint", Objs: []any{lb(mt.InternalLocal()), WebV4Ready()}, Flows: []Flow{
			{Name: "LoadBalancer IP from outside dropped", P: Pkt(Client, "203.0.113.10", 80), Want: All(Drop)},
			{Name: "LoadBalancer IP from the node served", P: Pkt("10.200.1.1", "203.0.113.10", 80).Local(), Want: every,
				IPVS: All(Drop), IPVSWhy: whyOneVirtualServer},
			{Name: "cluster IP dropped", P: Pkt(Client, "10.96.0.10", 80), Want: All(Drop)},
		}},
		{Name: "eTP Cluster masquerades", Objs: []any{Web(mt.LoadBalancerIPs("203.0.113.10")), WebV4Ready()}, Flows: []Flow{
			{Name: "LoadBalancer IP", P: Pkt(Client, "203.0.113.10", 80), Want: every},
		}},
		{Name: "iTP Local, no local endpoint", Objs: []any{Web(mt.InternalLocal()), WebV4Ready()}, Flows: []Flow{
			{Name: "drops", P: Pkt(Client, "10.96.0.10", 80), Want: All(Drop)},
			{Name: "drops from the node", P: Pkt("10.200.1.1", "10.96.0.10", 80).Local(), Want: All(Drop)},
		}},
		{Name: "iTP Local, local endpoint", Objs: []any{Web(mt.InternalLocal()),
			WebV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")))}, Flows: []Flow{
			{Name: "only the local endpoint", P: Pkt(Client, "10.96.0.10", 80), Want: All(Ep2)},
			{Name: "only the local endpoint from the node", P: Pkt("10.200.1.1", "10.96.0.10", 80).Local(), Want: All(Ep2)},
		}},
		{Name: "iTP Local, eTP Cluster, no local endpoint", Objs: []any{Web(mt.InternalLocal(), mt.LoadBalancerIPs("203.0.113.10")), WebV4Ready()},
			Flows: []Flow{
				{Name: "cluster IP dropped", P: Pkt(Client, "10.96.0.10", 80), Want: All(Drop)},
				{Name: "LoadBalancer IP served", P: Pkt(Client, "203.0.113.10", 80), Want: every},
			}},
	}
}

func endpointConditions() []Scenario {
	lb := Web(mt.LoadBalancerIPs("203.0.113.10"))
	rejected := []Flow{
		{Name: "cluster IP", P: Pkt(Client, "10.96.0.10", 80), Want: All(Reject)},
		{Name: "cluster IP from the node", P: Pkt("10.200.1.1", "10.96.0.10", 80).Local(), Want: All(Reject)},
		{Name: "node port", P: Pkt(Client, "10.200.1.1", 30080), Want: All(Reject)},
		{Name: "node port from the node", P: Pkt("10.200.1.1", "10.200.1.1", 30080).Local(), Want: All(Reject)},
		{Name: "LoadBalancer IP", P: Pkt(Client, "203.0.113.10", 80), Want: All(Reject)},
	}
	served := func(eps ...string) []Flow {
		return []Flow{{Name: "cluster IP", P: Pkt(Client, "10.96.0.10", 80), Want: eps}}
	}
	dns := mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	return []Scenario{
		{Name: "no endpoints", Objs: []any{lb}, Flows: rejected},
		{Name: "empty slice", Objs: []any{lb, WebV4()}, Flows: rejected},
		{Name: "not ready only", Objs: []any{lb, WebV4(mt.EP("10.200.2.11", mt.NotReady()))}, Flows: rejected},
		// In IPVS mode the terminating endpoint is a weight-0 real server: kept for its
		// connections, never chosen, and the service is refused like one without endpoints.
		{Name: "terminating, not serving", Objs: []any{lb, WebV4(mt.EP("10.200.2.11", mt.Terminating(false)))}, Flows: rejected},
		{Name: "serving-terminating only is served", Objs: []any{lb, WebV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12", mt.Terminating(false)))}, Flows: served(Ep1)},
		{Name: "ready preferred over serving-terminating", Objs: []any{lb, WebV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12"), mt.EP("10.200.2.13", mt.NotReady()))}, Flows: served(Ep2)},
		{Name: "udp without endpoints", Objs: []any{dns}, Flows: []Flow{
			{Name: "cluster IP", P: Pkt(Client, "10.96.0.53", 53).UDP(), Want: All(Reject)},
		}},
	}
}

func topology() []Scenario {
	zoned := func(addr, zone string, hints ...string) discovery.Endpoint {
		mods := []func(*discovery.Endpoint){mt.InZone(zone), mt.OnNode("node-" + zone)}
		if len(hints) > 0 {
			mods = append(mods, mt.ZoneHints(hints...))
		}
		return mt.EP(addr, mods...)
	}
	cip := func(eps ...string) []Flow {
		return []Flow{{Name: "cluster IP", P: Pkt(Client, "10.96.0.10", 80), Want: eps}}
	}
	preferClose := Web(mt.TrafficDistribution("PreferClose"))
	return []Scenario{
		{Name: "zone hints", Objs: []any{Web(), WebV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2", "z2"),
			zoned("10.200.2.13", "z1", "z1"))}, Flows: cip(Ep1, Ep3)},
		{Name: "no hint for the node's zone", Objs: []any{Web(), WebV4(zoned("10.200.2.11", "z2", "z2"),
			zoned("10.200.2.12", "z3", "z3"))}, Flows: cip(Ep1, Ep2)},
		{Name: "node hints", Objs: []any{Web(), WebV4(mt.EP("10.200.2.11", mt.ZoneHints("z1"), mt.NodeHints("node-a")),
			mt.EP("10.200.2.12", mt.ZoneHints("z1"), mt.NodeHints("gw")))}, Flows: cip(Ep2)},
		{Name: "PreferClose without hints", Objs: []any{preferClose, WebV4(zoned("10.200.2.11", "z1"), zoned("10.200.2.12", "z2"),
			zoned("10.200.2.13", "z1"))}, Flows: cip(Ep1, Ep3)},
	}
}

func masquerade() []Scenario {
	every := All(Masq(Ep1), Masq(Ep2), Masq(Ep3))
	cidr := Cfg
	cidr.ClusterCIDRs = MustPrefixes("10.200.2.0/24", "fd00:200:2::/64")
	masqAll := Cfg
	masqAll.MasqueradeAll = true
	bit3 := masqAll
	bit3.MasqueradeBit = 3
	return []Scenario{
		{Name: "cluster CIDR", Cfg: &cidr, Objs: []any{Web(), WebV4Ready()}, Flows: []Flow{
			{Name: "from outside the cluster CIDR", P: Pkt(Client, "10.96.0.10", 80), Want: every},
			{Name: "from the node", P: Pkt("10.200.1.1", "10.96.0.10", 80).Local(), Want: every},
			{Name: "from a pod", P: Pkt("10.200.2.13", "10.96.0.10", 80), Want: All(Ep1, Ep2, Ep3),
				IPT: All(Ep1, Ep2, Masq(Ep3)), IPTWhy: hairpinEveryEndpoint},
		}},
		{Name: "masquerade-all", Cfg: &masqAll, Objs: []any{Web(), WebV4Ready()}, Flows: []Flow{
			{Name: "from a pod", P: Pkt("10.200.2.13", "10.96.0.10", 80), Want: every},
		}},
		{Name: "another mark bit", Cfg: &bit3, Objs: []any{Web(), WebV4Ready()}, Flows: []Flow{
			{Name: "from outside", P: Pkt(Client, "10.96.0.10", 80), Want: every},
		}},
		{Name: "no cluster CIDR", Objs: []any{Web(), WebV4Ep2Local()}, Flows: []Flow{
			{Name: "from outside", P: Pkt(Client, "10.96.0.10", 80), Want: All(Ep1, Ep2, Ep3)},
			{Name: "hairpin", P: Pkt("10.200.2.12", "10.96.0.10", 80), Want: All(Ep1, Masq(Ep2), Ep3)},
			// The kernel makes the VIP itself the source of the node's connection to it.
			{Name: "from the node's VIP", P: Pkt("10.96.0.10", "10.96.0.10", 80).Local(), Want: All(Ep1, Ep2, Ep3),
				IPVS: every, IPVSWhy: "an endpoint elsewhere would answer the VIP to its own node: IPVS mode masquerades it"},
		}},
	}
}

func dualStack() []Scenario {
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("fd00:200:2::11"), mt.EP("fd00:200:2::12", mt.OnNode("gw")))
	svc := Web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"))
	v6all := All("[fd00:200:2::11]:8080", "[fd00:200:2::12]:8080")
	v6masq := All(Masq("[fd00:200:2::11]:8080"), Masq("[fd00:200:2::12]:8080"))
	return []Scenario{
		{Name: "IPv4", Objs: []any{svc, WebV4Ready(), v6eps}, Flows: []Flow{
			{Name: "v4 cluster IP", P: Pkt(Client, "10.96.0.10", 80), Want: All(Ep1, Ep2, Ep3)},
		}},
		{Name: "IPv6", Fam: model.IPv6, Objs: []any{svc, WebV4Ready(), v6eps}, Flows: []Flow{
			{Name: "v6 cluster IP", P: Pkt("fd00:200:1::2", "fd00:96::10", 80), Want: v6all},
			{Name: "v6 cluster IP from the node", P: Pkt("fd00:200:1::1", "fd00:96::10", 80).Local(), Want: v6all},
			{Name: "v6 LoadBalancer IP", P: Pkt("fd00:200:1::2", "2001:db8:113::10", 80), Want: v6masq},
			{Name: "v6 node port", P: Pkt("fd00:200:1::2", "fd00:200:1::1", 30080), Want: v6masq},
			{Name: "v6 node port not on ::1", P: Pkt("::1", "::1", 30080).Local(), Want: All(Accept)},
			{Name: "v6 hairpin", P: Pkt("fd00:200:2::12", "fd00:96::10", 80),
				Want: All("[fd00:200:2::11]:8080", Masq("[fd00:200:2::12]:8080"))},
		}},
		{Name: "IPv6 without v6 endpoints", Fam: model.IPv6, Objs: []any{svc, WebV4Ready()}, Flows: []Flow{
			{Name: "v6 cluster IP refused", P: Pkt("fd00:200:1::2", "fd00:96::10", 80), Want: All(Reject)},
			{Name: "v6 LoadBalancer IP refused", P: Pkt("fd00:200:1::2", "2001:db8:113::10", 80), Want: All(Reject)},
			{Name: "v6 node port refused", P: Pkt("fd00:200:1::2", "fd00:200:1::1", 30080), Want: All(Reject)},
		}},
	}
}

// conflicts: two services claiming the same cluster IP, LoadBalancer IP and node port.
// Every mode gives them to the service that sorts first while it has endpoints. When it
// has none, nftables and IPVS mode keep refusing (their maps and virtual servers hold one
// owner per key) while iptables, like kube-proxy, has no rule of the first service in nat
// and DNATs to the second one's endpoint before the filter table's refusal could apply.
func conflicts() []Scenario {
	svc := func(name string) *v1.Service {
		return mt.Service("default", name, "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
			mt.LoadBalancerIPs("203.0.113.10"))
	}
	alphaEPs := mt.Slice("default", "alpha-1", "alpha", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"))
	betaEPs := mt.Slice("default", "beta-1", "beta", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.12"))
	const why = "iptables has no owner per key: the first service with endpoints takes it"
	flows := func(cip, lbip, np string, ipt ...string) []Flow {
		fl := []Flow{
			{Name: "cluster IP", P: Pkt(Client, "10.96.0.10", 80), Want: All(cip)},
			{Name: "LoadBalancer IP", P: Pkt(Client, "203.0.113.10", 80), Want: All(lbip)},
			{Name: "node port", P: Pkt(Client, "10.200.1.1", 30080), Want: All(np)},
		}
		for i := range ipt {
			fl[i].IPT, fl[i].IPTWhy = All(ipt[i]), why
		}
		return fl
	}
	return []Scenario{
		{Name: "both with endpoints", Objs: []any{svc("alpha"), alphaEPs, svc("beta"), betaEPs},
			Flows: flows(Ep1, Masq(Ep1), Masq(Ep1))},
		{Name: "second without endpoints", Objs: []any{svc("alpha"), alphaEPs, svc("beta")},
			Flows: flows(Ep1, Masq(Ep1), Masq(Ep1))},
		{Name: "first without endpoints", Objs: []any{svc("alpha"), svc("beta"), betaEPs},
			Flows: flows(Reject, Reject, Reject, Ep2, Masq(Ep2), Masq(Ep2))},
	}
}
