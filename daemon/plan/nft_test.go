package plan

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// IP plan of the packet-flow tests (the demo lab's, see daemon/source/manifests/default):
//
//	node "gw", zone "z1"   10.200.1.1, 10.200.2.1, fd00:200:1::1, fd00:200:2::1 (+ loopback)
//	clients                10.200.1.2, fd00:200:1::2 (inside source range 10.200.1.0/24)
//	                       198.51.100.7 (outside it)
//	endpoints (pods)       10.200.2.11-13:8080, fd00:200:2::11-13:8080 on nodes backend-1..3
//	cluster CIDR           10.200.2.0/24, fd00:200:2::/64 (only where a test configures it)
//	cluster IPs            10.96.0.0/16, fd00:96::/64 (web: 10.96.0.10, fd00:96::10, port 80)
//	node port              30080
//	LoadBalancer IPs       203.0.113.10, 2001:db8:113::10; 203.0.113.11 is an ipMode Proxy one
//	external IPs           192.0.2.7

var (
	nodeAddrs = []string{"10.200.1.1", "10.200.2.1", "127.0.0.1", "fd00:200:1::1", "fd00:200:2::1", "::1"}
	testCfg   = Config{NodeName: "gw", Zone: "z1"}
)

const (
	ep1, ep2, ep3 = "10.200.2.11:8080", "10.200.2.12:8080", "10.200.2.13:8080"
	client        = "10.200.1.2"
	stranger      = "198.51.100.7"
)

func masq(ep string) string { return ep + " (masqueraded)" }

// web is the demo's web service (TCP 80 -> 8080, node port 30080) as a ClusterIP service;
// modifiers make it more.
func web(mods ...func(*v1.Service)) *v1.Service {
	return mt.Service("default", "web", "10.96.0.10",
		append([]func(*v1.Service){mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080)}, mods...)...)
}

func nodePort(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }

// webV4 is web's IPv4 slice; webV4Ready has the three demo backends, ready.
func webV4(eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return mt.Slice("default", "web-v4", "web", "http", v1.ProtocolTCP, 8080, eps...)
}

// webV4Ep2Local is webV4Ready with its second endpoint on this node (testCfg's gw).
func webV4Ep2Local() *discovery.EndpointSlice {
	return webV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")),
		mt.EP("10.200.2.13", mt.OnNode("backend-3")))
}

func webV4Ready() *discovery.EndpointSlice {
	return webV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("backend-2")),
		mt.EP("10.200.2.13", mt.OnNode("backend-3")))
}

// build plans one family and proves the plan is one the kernel would take.
func build(t *testing.T, cfg Config, f model.Family, objs ...any) *Table {
	t.Helper()
	tab := NFT(mt.Snapshot(objs...), f, cfg)
	if err := tab.Validate(); err != nil {
		t.Fatalf("Validate: %v\n%s", err, tab.Dump())
	}
	return tab
}

type flow struct {
	name string
	p    packet
	// want is every possible result over all numgen choices, sorted.
	want []string
}

func runFlows(t *testing.T, tab *Table, flows []flow) {
	t.Helper()
	for _, fl := range flows {
		t.Run(fl.name, func(t *testing.T) {
			tr := newTracer(t, tab, nodeAddrs...)
			if got := tr.results(fl.p); !cmp.Equal(fl.want, got) {
				var trail []string
				for _, o := range tr.all(fl.p) {
					trail = append(trail, o.String()+":\n\t"+strings.Join(o.Matched, "\n\t"))
				}
				t.Errorf("%v: (-want +got)\n%s\ntraces:\n%s", fl.p, cmp.Diff(fl.want, got), strings.Join(trail, "\n"))
			}
		})
	}
}

func all(eps ...string) []string { return eps }

func TestFlowClusterIP(t *testing.T) {
	tab := build(t, testCfg, model.IPv4, web(), webV4Ready())
	runFlows(t, tab, []flow{
		{"spreads over every endpoint", pkt(client, "10.96.0.10", 80), all(ep1, ep2, ep3)},
		{"from the node", pkt("10.200.1.1", "10.96.0.10", 80).local(), all(ep1, ep2, ep3)},
		{"undefined port rejected", pkt(client, "10.96.0.10", 81), all(traceReject)},
		{"undefined port from the node rejected", pkt("10.200.1.1", "10.96.0.10", 81).local(), all(traceReject)},
		{"udp on a tcp port rejected", pkt(client, "10.96.0.10", 80).udp(), all(traceReject)},
		{"other traffic untouched", pkt(client, "10.96.0.99", 80), all(traceAccept)},
		{"no node port on a ClusterIP service", pkt(client, "10.200.1.1", 30080), all(traceAccept)},
		// Another node's pod reaches a ClusterIP through its own node, never this one.
		{"a remote endpoint's hairpin is not masqueraded", pkt("10.200.2.11", "10.96.0.10", 80), all(ep1, ep2, ep3)},
	})
	runFlows(t, build(t, testCfg, model.IPv4, web(), webV4Ep2Local()), []flow{
		{"a local endpoint's hairpin is masqueraded", pkt("10.200.2.12", "10.96.0.10", 80), all(ep1, masq(ep2), ep3)},
	})
}

func TestFlowNodePort(t *testing.T) {
	tab := build(t, testCfg, model.IPv4, web(nodePort), webV4Ready())
	runFlows(t, tab, []flow{
		{"node IP, masqueraded", pkt(client, "10.200.1.1", 30080), all(masq(ep1), masq(ep2), masq(ep3))},
		{"other node IP", pkt(client, "10.200.2.1", 30080), all(masq(ep1), masq(ep2), masq(ep3))},
		{"from the node", pkt("10.200.1.1", "10.200.1.1", 30080).local(), all(masq(ep1), masq(ep2), masq(ep3))},
		{"not on loopback", pkt("127.0.0.1", "127.0.0.1", 30080).local(), all(traceAccept)},
		{"not on a foreign address", pkt(client, "10.200.1.99", 30080), all(traceAccept)},
		{"other port", pkt(client, "10.200.1.1", 30081), all(traceAccept)},
	})

	cfg := testCfg
	cfg.NodePortAddresses = mustPrefixes("10.200.1.1/32")
	tab = build(t, cfg, model.IPv4, web(nodePort), webV4Ready())
	runFlows(t, tab, []flow{
		{"nodeport-addresses allows", pkt(client, "10.200.1.1", 30080), all(masq(ep1), masq(ep2), masq(ep3))},
		{"nodeport-addresses excludes", pkt(client, "10.200.2.1", 30080), all(traceAccept)},
	})
}

func TestFlowLoadBalancerAndExternalIPs(t *testing.T) {
	svc := web(mt.LoadBalancerIPs("203.0.113.10"), mt.ProxyModeIngress("203.0.113.11"), mt.ExternalIPs("192.0.2.7"))
	tab := build(t, testCfg, model.IPv4, svc, webV4Ready())
	every := all(masq(ep1), masq(ep2), masq(ep3))
	runFlows(t, tab, []flow{
		{"LoadBalancer IP", pkt(client, "203.0.113.10", 80), every},
		{"LoadBalancer IP from the node", pkt("10.200.1.1", "203.0.113.10", 80).local(), every},
		{"LoadBalancer IP other port", pkt(client, "203.0.113.10", 81), all(traceAccept)},
		{"ipMode Proxy is not captured", pkt(client, "203.0.113.11", 80), all(traceAccept)},
		{"external IP", pkt(client, "192.0.2.7", 80), every},
		{"node port of a LoadBalancer", pkt(client, "10.200.1.1", 30080), every},
	})
	// Nothing about the Proxy-mode address may be in the plan at all.
	if d := tab.Dump(); strings.Contains(d, "203.0.113.11") {
		t.Errorf("ipMode Proxy address in the plan:\n%s", d)
	}
	// Without endpoints the Proxy-mode address is still left alone, not rejected.
	tab = build(t, testCfg, model.IPv4, svc)
	runFlows(t, tab, []flow{{"ipMode Proxy, no endpoints", pkt(client, "203.0.113.11", 80), all(traceAccept)}})
}

func TestFlowSourceRanges(t *testing.T) {
	svc := web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"),
		mt.SourceRanges("10.200.1.0/24"))
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:200:2::11"))
	v4 := build(t, testCfg, model.IPv4, svc, webV4Ready(), v6eps)
	every := all(masq(ep1), masq(ep2), masq(ep3))
	runFlows(t, v4, []flow{
		{"allowed source", pkt(client, "203.0.113.10", 80), every},
		{"other source dropped", pkt(stranger, "203.0.113.10", 80), all(traceDrop)},
		{"node ports are not subject to source ranges", pkt(stranger, "10.200.1.1", 30080), every},
		{"cluster IP is not subject to source ranges", pkt(stranger, "10.96.0.10", 80), all(ep1, ep2, ep3)},
	})
	v6 := build(t, testCfg, model.IPv6, svc, webV4Ready(), v6eps)
	runFlows(t, v6, []flow{
		{"v4-only ranges close the v6 LoadBalancer IP", pkt("fd00:200:1::2", "2001:db8:113::10", 80), all(traceDrop)},
		{"v6 cluster IP still open", pkt("fd00:200:1::2", "fd00:96::10", 80), all("[fd00:200:2::11]:8080")},
	})
}

func TestFlowAffinityPinsClient(t *testing.T) {
	tab := build(t, testCfg, model.IPv4, web(mt.Affinity(300)), webV4Ready())
	tr := newTracer(t, tab, nodeAddrs...)
	first := pkt(client, "10.96.0.10", 80)
	if got := tr.results(first); !cmp.Equal(got, all(ep1, ep2, ep3)) {
		t.Fatalf("before any connection: %v", got)
	}
	tr.choose = endpointChoice(1)
	if got := tr.trace(first); got.Result != ep2 {
		t.Fatalf("first connection with choice 1: %v", got)
	}
	for _, choice := range []uint32{0, 2} {
		tr.choose = func(uint32) uint32 { return choice }
		if got := tr.trace(first); got.Result != ep2 {
			t.Errorf("pinned client with choice %d went to %v\n%s", choice, got, strings.Join(got.Matched, "\n"))
		}
	}
	if got := tr.results(first); !cmp.Equal(got, all(ep2)) {
		t.Errorf("pinned client can reach %v", got)
	}
	if got := tr.results(pkt("10.200.1.3", "10.96.0.10", 80)); !cmp.Equal(got, all(ep1, ep2, ep3)) {
		t.Errorf("another client is pinned too: %v", got)
	}
}

func TestFlowExternalTrafficPolicyLocal(t *testing.T) {
	lb := func(mods ...func(*v1.Service)) *v1.Service {
		return web(append([]func(*v1.Service){mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalLocal(32000)}, mods...)...)
	}
	every := all(masq(ep1), masq(ep2), masq(ep3))
	t.Run("no local endpoint", func(t *testing.T) {
		tab := build(t, testCfg, model.IPv4, lb(), webV4Ready())
		runFlows(t, tab, []flow{
			{"node port from outside dropped", pkt(client, "10.200.1.1", 30080), all(traceDrop)},
			{"LoadBalancer IP from outside dropped", pkt(client, "203.0.113.10", 80), all(traceDrop)},
			{"node port from the node served", pkt("10.200.1.1", "10.200.1.1", 30080).local(), every},
			{"LoadBalancer IP from the node served", pkt("10.200.1.1", "203.0.113.10", 80).local(), every},
			{"cluster IP served", pkt(client, "10.96.0.10", 80), all(ep1, ep2, ep3)},
		})
	})
	t.Run("local endpoint", func(t *testing.T) {
		eps := webV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")),
			mt.EP("10.200.2.13", mt.OnNode("backend-3")))
		tab := build(t, testCfg, model.IPv4, lb(), eps)
		runFlows(t, tab, []flow{
			{"node port serves only the local endpoint", pkt(client, "10.200.1.1", 30080), all(ep2)},
			{"LoadBalancer IP serves only the local endpoint", pkt(client, "203.0.113.10", 80), all(ep2)},
			{"from the node every endpoint", pkt("10.200.1.1", "203.0.113.10", 80).local(), every},
			{"cluster IP every endpoint", pkt(client, "10.96.0.10", 80), all(ep1, ep2, ep3)},
		})
	})
	t.Run("internal Local too, no local endpoint", func(t *testing.T) {
		tab := build(t, testCfg, model.IPv4, lb(mt.InternalLocal()), webV4Ready())
		runFlows(t, tab, []flow{
			{"LoadBalancer IP from outside dropped", pkt(client, "203.0.113.10", 80), all(traceDrop)},
			{"LoadBalancer IP from the node served", pkt("10.200.1.1", "203.0.113.10", 80).local(), every},
			{"cluster IP dropped", pkt(client, "10.96.0.10", 80), all(traceDrop)},
		})
	})
	t.Run("Cluster policy masquerades", func(t *testing.T) {
		tab := build(t, testCfg, model.IPv4, web(mt.LoadBalancerIPs("203.0.113.10")), webV4Ready())
		runFlows(t, tab, []flow{{"LoadBalancer IP", pkt(client, "203.0.113.10", 80), every}})
	})
}

func TestFlowInternalTrafficPolicyLocal(t *testing.T) {
	tab := build(t, testCfg, model.IPv4, web(mt.InternalLocal()), webV4Ready())
	runFlows(t, tab, []flow{
		{"no local endpoint drops", pkt(client, "10.96.0.10", 80), all(traceDrop)},
		{"no local endpoint drops from the node", pkt("10.200.1.1", "10.96.0.10", 80).local(), all(traceDrop)},
	})
	eps := webV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")))
	tab = build(t, testCfg, model.IPv4, web(mt.InternalLocal()), eps)
	runFlows(t, tab, []flow{{"only the local endpoint", pkt(client, "10.96.0.10", 80), all(ep2)}})
}

func TestFlowEndpointConditions(t *testing.T) {
	lb := web(mt.LoadBalancerIPs("203.0.113.10"))
	rejected := []flow{
		{"cluster IP", pkt(client, "10.96.0.10", 80), all(traceReject)},
		{"cluster IP from the node", pkt("10.200.1.1", "10.96.0.10", 80).local(), all(traceReject)},
		{"node port", pkt(client, "10.200.1.1", 30080), all(traceReject)},
		{"node port from the node", pkt("10.200.1.1", "10.200.1.1", 30080).local(), all(traceReject)},
		{"LoadBalancer IP", pkt(client, "203.0.113.10", 80), all(traceReject)},
	}
	cases := []struct {
		name string
		eps  []any
		want []string // for the cluster IP; nil means everything is rejected
	}{
		{"no endpoints", nil, nil},
		{"empty slice", []any{webV4()}, nil},
		{"not ready only", []any{webV4(mt.EP("10.200.2.11", mt.NotReady()))}, nil},
		{"terminating, not serving", []any{webV4(mt.EP("10.200.2.11", mt.Terminating(false)))}, nil},
		{"serving-terminating only is served", []any{webV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12", mt.Terminating(false)))}, all(ep1)},
		{"ready preferred over serving-terminating", []any{webV4(mt.EP("10.200.2.11", mt.Terminating(true)),
			mt.EP("10.200.2.12"), mt.EP("10.200.2.13", mt.NotReady()))}, all(ep2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab := build(t, testCfg, model.IPv4, append([]any{lb}, c.eps...)...)
			if c.want == nil {
				runFlows(t, tab, rejected)
				return
			}
			runFlows(t, tab, []flow{{"cluster IP", pkt(client, "10.96.0.10", 80), c.want}})
		})
	}
	t.Run("udp without endpoints", func(t *testing.T) {
		dns := mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
		tab := build(t, testCfg, model.IPv4, dns)
		runFlows(t, tab, []flow{{"cluster IP", pkt(client, "10.96.0.53", 53).udp(), all(traceReject)}})
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
		{"zone hints restrict to the node's zone", web(),
			webV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2", "z2"), zoned("10.200.2.13", "z1", "z1")),
			all(ep1, ep3)},
		{"no hint for the node's zone: all", web(),
			webV4(zoned("10.200.2.11", "z2", "z2"), zoned("10.200.2.12", "z3", "z3")),
			all(ep1, ep2)},
		{"an endpoint without hints: all", web(),
			webV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2")),
			all(ep1, ep2)},
		{"not-ready endpoints do not count", web(),
			webV4(zoned("10.200.2.11", "z1", "z1"), zoned("10.200.2.12", "z2", "z2"),
				mt.EP("10.200.2.13", mt.NotReady())),
			all(ep1)},
		{"node hints prefer this node", web(),
			webV4(mt.EP("10.200.2.11", mt.ZoneHints("z1"), mt.NodeHints("node-a")),
				mt.EP("10.200.2.12", mt.ZoneHints("z1"), mt.NodeHints("gw"))),
			all(ep2)},
		{"PreferClose without hints uses the zone field", web(mt.TrafficDistribution("PreferClose")),
			webV4(zoned("10.200.2.11", "z1"), zoned("10.200.2.12", "z2"), zoned("10.200.2.13", "z1")),
			all(ep1, ep3)},
		{"PreferClose, nothing in the node's zone: all", web(mt.TrafficDistribution("PreferClose")),
			webV4(zoned("10.200.2.11", "z2"), zoned("10.200.2.12", "z3")),
			all(ep1, ep2)},
		{"zone field ignored once hints exist", web(mt.TrafficDistribution("PreferClose")),
			webV4(zoned("10.200.2.11", "z1", "z2"), zoned("10.200.2.12", "z2", "z2")),
			all(ep1, ep2)},
		{"zone field ignored without PreferClose", web(),
			webV4(zoned("10.200.2.11", "z1"), zoned("10.200.2.12", "z2")),
			all(ep1, ep2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab := build(t, testCfg, model.IPv4, c.svc, c.eps)
			runFlows(t, tab, []flow{{"cluster IP", pkt(client, "10.96.0.10", 80), c.want}})
		})
	}
}

func TestFlowMasquerade(t *testing.T) {
	cfg := testCfg
	cfg.ClusterCIDRs = mustPrefixes("10.200.2.0/24", "fd00:200:2::/64")
	tab := build(t, cfg, model.IPv4, web(), webV4Ready())
	runFlows(t, tab, []flow{
		{"from outside the cluster CIDR", pkt(client, "10.96.0.10", 80), all(masq(ep1), masq(ep2), masq(ep3))},
		{"from a pod", pkt("10.200.2.13", "10.96.0.10", 80), all(ep1, ep2, ep3)},
	})
	cfg = testCfg
	cfg.MasqueradeAll = true
	tab = build(t, cfg, model.IPv4, web(), webV4Ready())
	runFlows(t, tab, []flow{
		{"masquerade-all from a pod", pkt("10.200.2.13", "10.96.0.10", 80), all(masq(ep1), masq(ep2), masq(ep3))},
	})
	cfg.MasqueradeBit = 3
	tab = build(t, cfg, model.IPv4, web(), webV4Ready())
	runFlows(t, tab, []flow{
		{"another mark bit", pkt(client, "10.96.0.10", 80), all(masq(ep1), masq(ep2), masq(ep3))},
	})
	if !strings.Contains(tab.Dump(), "0x00000008") {
		t.Errorf("masquerade bit 3 not in the plan:\n%s", tab.Dump())
	}
}

func TestFlowDualStack(t *testing.T) {
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("fd00:200:2::11"), mt.EP("fd00:200:2::12"))
	svc := web(mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"))
	v4 := build(t, testCfg, model.IPv4, svc, webV4Ready(), v6eps)
	v6 := build(t, testCfg, model.IPv6, svc, webV4Ready(), v6eps)
	runFlows(t, v4, []flow{
		{"v4 cluster IP, v4 endpoints", pkt(client, "10.96.0.10", 80), all(ep1, ep2, ep3)},
		{"v6 address in the v4 table", pkt("fd00:200:1::2", "fd00:96::10", 80), all(traceAccept)},
	})
	runFlows(t, v6, []flow{
		{"v6 cluster IP, v6 endpoints", pkt("fd00:200:1::2", "fd00:96::10", 80),
			all("[fd00:200:2::11]:8080", "[fd00:200:2::12]:8080")},
		{"v6 LoadBalancer IP", pkt("fd00:200:1::2", "2001:db8:113::10", 80),
			all(masq("[fd00:200:2::11]:8080"), masq("[fd00:200:2::12]:8080"))},
		{"v6 node port", pkt("fd00:200:1::2", "fd00:200:1::1", 30080),
			all(masq("[fd00:200:2::11]:8080"), masq("[fd00:200:2::12]:8080"))},
		{"v6 node port not on ::1", pkt("::1", "::1", 30080).local(), all(traceAccept)},
	})

	// A v4-only service leaves the v6 table as if it did not exist.
	empty := build(t, testCfg, model.IPv6).Dump()
	if d := cmp.Diff(empty, build(t, testCfg, model.IPv6, web(nodePort), webV4Ready()).Dump()); d != "" {
		t.Errorf("v4-only service in the v6 table (-empty +got):\n%s", d)
	}
}

func TestNoDataPlane(t *testing.T) {
	empty := build(t, testCfg, model.IPv4).Dump()
	for name, svc := range map[string]*v1.Service{
		"ExternalName": web(mt.ExternalName("db.example.com")),
		"headless":     web(mt.Headless()),
	} {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(empty, build(t, testCfg, model.IPv4, svc, webV4Ready()).Dump()); d != "" {
				t.Errorf("(-empty +got):\n%s", d)
			}
		})
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
		{"both with endpoints", []any{svc("alpha"), alphaEPs, svc("beta"), betaEPs}, all(ep1, masq(ep1), masq(ep1))},
		{"first without endpoints", []any{svc("alpha"), svc("beta"), betaEPs}, all(traceReject, traceReject, traceReject)},
		{"second without endpoints", []any{svc("alpha"), alphaEPs, svc("beta")}, all(ep1, masq(ep1), masq(ep1))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tab := build(t, testCfg, model.IPv4, c.objs...)
			if len(tab.Conflicts) == 0 {
				t.Fatalf("no conflicts reported")
			}
			for _, msg := range tab.Conflicts {
				if !strings.Contains(msg, "default/beta") || !strings.Contains(msg, "; default/alpha") {
					t.Errorf("conflict does not name beta with alpha keeping the key: %s", msg)
				}
			}
			runFlows(t, tab, []flow{
				{"cluster IP", pkt(client, "10.96.0.10", 80), all(c.want[0])},
				{"LoadBalancer IP", pkt(client, "203.0.113.10", 80), all(c.want[1])},
				{"node port", pkt(client, "10.200.1.1", 30080), all(c.want[2])},
			})
		})
	}
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
