package plan

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgegate/edgegate/daemon/model"
)

// FuzzPlan turns arbitrary bytes into Services and EndpointSlices drawn from a small world
// (a few addresses, ports, policies and conditions, so that collisions and corner cases
// are common), plans both families in nftables and iptables mode and checks that planning
// never panics, that every plan Validates (nftables) or passes checkIPT (iptables), that
// the tracers can walk them, and, where no two services clash, that traffic to each cluster
// IP and node port goes where Policy says in both modes.
//
// The world: node "gw" (10.200.1.1, fd00:200:1::1); cluster IPs 10.96.0.1-2, fd00:96::1-2;
// external and LoadBalancer IPs 192.0.2.1-2, 203.0.113.1, 2001:db8::1; endpoints
// 10.200.2.1-3, fd00:200:2::1-2; ports 53, 80, 443; node ports 30080, 30081; client
// 10.200.1.2 / fd00:200:1::2.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("edgegate"))
	f.Add([]byte{3, 2, 1, 1, 0, 1, 2, 0, 1, 1, 0, 1, 2, 3, 4, 0, 1, 0, 1, 1, 1, 5, 4, 3, 2, 1, 0, 2, 2, 2, 1, 0})
	seed := make([]byte, 256)
	for i := range seed {
		seed[i] = byte(i * 7)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{b: data}
		cfg := in.config()
		tr := model.NewTracker()
		var services []*v1.Service
		for range 1 + in.n(4) {
			services = append(services, in.service())
			tr.UpsertService(services[len(services)-1])
		}
		for i := range 1 + in.n(8) {
			tr.UpsertSlice(in.slice(i, services))
		}
		if in.n(4) == 0 {
			tr.DeleteService("default", in.pick("a", "b", "c"))
		}
		snap, _ := tr.Snapshot()
		for _, fam := range []model.Family{model.IPv4, model.IPv6} {
			tab := NFT(snap, fam, cfg)
			if err := tab.Validate(); err != nil {
				t.Fatalf("%v plan does not validate: %v\n%s", fam, err, tab.Dump())
			}
			_ = tab.Dump()
			_ = UDP(snap, fam, cfg)
			// The iptables plan has no conflict report; the clash the nftables plan
			// reports is the same one.
			conflicts := len(tab.Conflicts) > 0
			checkFlows(t, snap, cfg, modePlan{"nftables", fam, conflicts, tab.Dump,
				func(node string) flowTracer { return newTracer(t, tab, node) }})
			ipt := IPT(snap, fam, cfg)
			if err := checkIPT(ipt); err != nil {
				t.Fatalf("%v iptables plan fails checkIPT: %v\n%s", fam, err, ipt.Dump())
			}
			checkFlows(t, snap, cfg, modePlan{"iptables", fam, conflicts, ipt.Dump,
				func(node string) flowTracer { return newIPTTracer(t, ipt, node) }})
		}
	})
}

// flowTracer is what checkFlows needs of a mode's tracer: every result a packet can have.
type flowTracer interface{ results(packet) []string }

// modePlan is one mode's plan of one family, as checkFlows sees it.
type modePlan struct {
	mode      string
	family    model.Family
	conflicts bool // two service ports claim one address or node port
	dump      func() string
	// tracer returns a tracer for which node is the node's only address.
	tracer func(node string) flowTracer
}

// checkFlows traces the cluster IP and node port of every service port. Without conflicts
// the outcome must be what Policy decided; with them the plan need only be walkable.
func checkFlows(t *testing.T, snap *model.Snapshot, cfg Config, mp modePlan) {
	t.Helper()
	clientAddr, nodeAddr := "10.200.1.2", "10.200.1.1"
	if mp.family == model.IPv6 {
		clientAddr, nodeAddr = "fd00:200:1::2", "fd00:200:1::1"
	}
	// A cluster IP that is also some service's external or LoadBalancer IP on the same
	// port is filtered as one (source ranges apply to it): skip its semantic check.
	outer := map[netip.AddrPort]bool{}
	for _, sp := range snap.Ports.All() {
		for _, a := range sp.ExternalIPs {
			outer[netip.AddrPortFrom(a, sp.Port)] = true
		}
		for _, ing := range sp.LoadBalancerIPs {
			outer[netip.AddrPortFrom(ing.Addr, sp.Port)] = true
		}
	}
	for _, sp := range snap.Sorted() {
		p, ok := Policy(sp, mp.family, cfg)
		if !ok {
			continue
		}
		tr := mp.tracer(nodeAddr)
		internal := packet{src: netip.MustParseAddr(clientAddr), dst: p.ClusterIP, proto: sp.Name.Protocol, dport: sp.Port}
		gotInternal := unmasked(tr.results(internal))
		fromNode := internal.local()
		fromNode.src = netip.MustParseAddr(nodeAddr)
		gotLocal := unmasked(tr.results(fromNode))
		if mp.conflicts || outer[netip.AddrPortFrom(p.ClusterIP, sp.Port)] {
			continue
		}
		want := expected(p.Internal, p.UsesLocalForInternal, &p)
		if !slices.Equal(want, gotInternal) || !slices.Equal(want, gotLocal) {
			t.Fatalf("%s %s %v cluster IP: want %v, got %v from outside and %v from the node\n%s",
				mp.mode, sp.Name, mp.family, want, gotInternal, gotLocal, mp.dump())
		}
		if sp.NodePort == 0 || !nodePortOpen(cfg, mp.family, nodeAddr) {
			continue
		}
		np := packet{src: netip.MustParseAddr(clientAddr), dst: netip.MustParseAddr(nodeAddr), proto: sp.Name.Protocol, dport: sp.NodePort}
		want = expected(p.External, !p.UsesClusterForExternal, &p)
		if got := unmasked(tr.results(np)); !slices.Equal(want, got) {
			t.Fatalf("%s %s %v node port: want %v, got %v\n%s", mp.mode, sp.Name, mp.family, want, got, mp.dump())
		}
		// From the node itself the traffic policy does not apply: any endpoint serves.
		np.fromNode, np.src = true, np.dst
		if p.External != Reject {
			want = expected(Forward, false, &p)
		}
		if got := unmasked(tr.results(np)); !slices.Equal(want, got) {
			t.Fatalf("%s %s %v node port from the node: want %v, got %v\n%s", mp.mode, sp.Name, mp.family, want, got, mp.dump())
		}
	}
}

// expected lists the trace results an outcome means: every endpoint of the policy's set,
// or REJECT, or DROP.
func expected(o Outcome, local bool, p *PortPolicy) []string {
	switch o {
	case Reject:
		return []string{traceReject}
	case Drop:
		return []string{traceDrop}
	}
	eps := p.Cluster
	if local {
		eps = p.Local
	}
	var out []string
	for _, e := range eps {
		out = append(out, e.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func nodePortOpen(cfg Config, f model.Family, addr string) bool {
	ps := familyPrefixes(cfg.NodePortAddresses, f)
	return len(ps) == 0 || slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(netip.MustParseAddr(addr)) })
}

func unmasked(rs []string) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = strings.TrimSuffix(r, " (masqueraded)")
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// fuzzInput hands out small choices from the fuzzer's bytes; exhausted input reads as 0.
type fuzzInput struct{ b []byte }

func (in *fuzzInput) n(k int) int {
	if len(in.b) == 0 {
		return 0
	}
	v := int(in.b[0]) % k
	in.b = in.b[1:]
	return v
}

func (in *fuzzInput) pick(xs ...string) string { return xs[in.n(len(xs))] }

func (in *fuzzInput) flag() bool { return in.n(2) == 1 }

func (in *fuzzInput) optBool() *bool {
	switch in.n(3) {
	case 1:
		t := true
		return &t
	case 2:
		f := false
		return &f
	}
	return nil
}

func (in *fuzzInput) config() Config {
	cfg := Config{NodeName: "gw", Zone: in.pick("", "z1", "z2"), MasqueradeAll: in.flag(), MasqueradeBit: uint(in.n(40))}
	for range in.n(3) {
		cfg.NodePortAddresses = append(cfg.NodePortAddresses,
			netip.MustParsePrefix(in.pick("10.200.1.1/32", "10.200.9.0/24", "fd00:200:1::/64", "0.0.0.0/0")))
	}
	for range in.n(3) {
		cfg.ClusterCIDRs = append(cfg.ClusterCIDRs, netip.MustParsePrefix(in.pick("10.200.2.0/24", "fd00:200:2::/64", "10.200.1.0/24")))
	}
	return cfg
}

var (
	fuzzClusterIPs = []string{"10.96.0.1", "10.96.0.2", "fd00:96::1", "fd00:96::2", "None", "", "bogus"}
	fuzzOuterIPs   = []string{"192.0.2.1", "192.0.2.2", "203.0.113.1", "2001:db8::1", "10.96.0.1", "bogus"}
	fuzzEndpoints  = []string{"10.200.2.1", "10.200.2.2", "10.200.2.3", "fd00:200:2::1", "fd00:200:2::2", "::ffff:10.200.2.1"}
)

func (in *fuzzInput) service() *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: in.pick("default", "default", "default", "other"), Name: in.pick("a", "b", "c")}}
	sp := &s.Spec
	sp.Type = v1.ServiceType(in.pick("ClusterIP", "NodePort", "LoadBalancer", "ExternalName", ""))
	sp.ClusterIP = in.pick(fuzzClusterIPs...)
	sp.ClusterIPs = []string{sp.ClusterIP}
	if in.flag() {
		sp.ClusterIPs = append(sp.ClusterIPs, in.pick(fuzzClusterIPs...))
	}
	for range 1 + in.n(3) {
		sp.Ports = append(sp.Ports, v1.ServicePort{
			Name:     in.pick("", "http", "dns"),
			Protocol: v1.Protocol(in.pick("TCP", "UDP", "", "SCTP")),
			Port:     int32([]int{53, 80, 443}[in.n(3)]),
			NodePort: int32([]int{0, 30080, 30081}[in.n(3)]),
		})
	}
	for range in.n(3) {
		sp.ExternalIPs = append(sp.ExternalIPs, in.pick(fuzzOuterIPs...))
	}
	for range in.n(3) {
		ing := v1.LoadBalancerIngress{IP: in.pick(fuzzOuterIPs...)}
		switch in.n(3) {
		case 1:
			m := v1.LoadBalancerIPModeProxy
			ing.IPMode = &m
		case 2:
			m := v1.LoadBalancerIPModeVIP
			ing.IPMode = &m
		}
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, ing)
	}
	for range in.n(3) {
		sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges, in.pick("10.200.1.0/24", "0.0.0.0/0", "fd00::/8", "bogus", " 10.200.1.0/24", "010.200.001.0/24"))
	}
	sp.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicy(in.pick("Cluster", "Local", ""))
	if in.flag() {
		p := v1.ServiceInternalTrafficPolicy(in.pick("Cluster", "Local"))
		sp.InternalTrafficPolicy = &p
	}
	sp.HealthCheckNodePort = int32(in.n(2) * 32000)
	if in.flag() {
		sp.SessionAffinity = v1.ServiceAffinityClientIP
		if in.flag() {
			secs := int32(in.n(4) * 100)
			sp.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &secs}}
		}
	}
	if in.flag() {
		td := in.pick("PreferClose", "PreferSameZone", "PreferSameNode", "Other")
		sp.TrafficDistribution = &td
	}
	return s
}

// slice builds an EndpointSlice, mostly for one of the services and one of its ports.
func (in *fuzzInput) slice(i int, services []*v1.Service) *discovery.EndpointSlice {
	owner := services[in.n(len(services))]
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: owner.Namespace, Name: fmt.Sprint("s", i%6)},
		AddressType: discovery.AddressType(in.pick("IPv4", "IPv4", "IPv6", "FQDN")),
	}
	if in.n(5) == 0 {
		s.Namespace = in.pick("default", "other")
	}
	family := fuzzEndpoints[:3]
	if s.AddressType == discovery.AddressTypeIPv6 {
		family = fuzzEndpoints[3:5]
	}
	if in.n(8) == 0 {
		family = fuzzEndpoints // wrong-family and mapped addresses now and then
	}
	switch in.n(5) {
	case 0:
	case 1:
		s.Labels = map[string]string{model.ServiceNameLabel: in.pick("a", "b", "c")}
	default:
		s.Labels = map[string]string{model.ServiceNameLabel: owner.Name}
	}
	for range 1 + in.n(2) {
		name := in.pick("", "http", "dns")
		proto := v1.Protocol(in.pick("TCP", "UDP", "TCP", "SCTP"))
		if ports := owner.Spec.Ports; in.n(4) != 0 {
			sp := ports[in.n(len(ports))]
			name, proto = sp.Name, sp.Protocol
			if proto == "" {
				proto = v1.ProtocolTCP
			}
		}
		port := int32([]int{8080, 5353, 8080, 0}[in.n(4)])
		ep := discovery.EndpointPort{Name: &name, Protocol: &proto, Port: &port}
		if in.n(5) == 0 {
			ep.Port = nil
		}
		s.Ports = append(s.Ports, ep)
	}
	for range in.n(5) {
		var e discovery.Endpoint
		if in.flag() { // half the endpoints are plainly ready
			e.Conditions = discovery.EndpointConditions{Ready: in.optBool(), Serving: in.optBool(), Terminating: in.optBool()}
		}
		if in.n(6) != 0 {
			e.Addresses = []string{in.pick(family...)}
		}
		if node := in.pick("", "gw", "other"); node != "" {
			e.NodeName = &node
		}
		if zone := in.pick("", "z1", "z2"); zone != "" {
			e.Zone = &zone
		}
		if in.flag() {
			e.Hints = &discovery.EndpointHints{}
			for range in.n(3) {
				e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: in.pick("z1", "z2")})
			}
			for range in.n(3) {
				e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: in.pick("gw", "other")})
			}
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}
