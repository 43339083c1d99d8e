package plantest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// The fuzz world of every mode's FuzzPlan: arbitrary bytes become Services and
// EndpointSlices drawn from a small world (a few addresses, ports, policies and conditions,
// so that collisions and corner cases are common).
//
// The world: node "gw" (10.200.1.1, fd00:200:1::1); cluster IPs 10.96.0.1-2, fd00:96::1-2;
// external and LoadBalancer IPs 192.0.2.1-2, 203.0.113.1, 2001:db8::1; endpoints
// 10.200.2.1-3, fd00:200:2::1-2; ports 53, 80, 443; node ports 30080, 30081; client
// 10.200.1.2 / fd00:200:1::2.

// FuzzSeeds adds the seed corpus every mode's FuzzPlan starts from; mult varies the long seed.
func FuzzSeeds(f *testing.F, name string, mult int) {
	f.Add([]byte{})
	f.Add([]byte(name))
	f.Add([]byte{3, 2, 1, 1, 0, 1, 2, 0, 1, 1, 0, 1, 2, 3, 4, 0, 1, 0, 1, 1, 1, 5, 4, 3, 2, 1, 0, 2, 2, 2, 1, 0})
	seed := make([]byte, 256)
	for i := range seed {
		seed[i] = byte(i * mult)
	}
	f.Add(seed)
}

// FuzzMode is what a mode draws from the fuzzer's bytes beyond the common world.
type FuzzMode struct {
	// Config, when set, draws the mode's configuration after the common one.
	Config func(*FuzzInput)
	// Annotate, when set, may change each Service before it is added; then no Service is
	// deleted again.
	Annotate func(*FuzzInput, *v1.Service)
}

// FuzzWorld turns the fuzzer's bytes into a configuration and a snapshot.
func FuzzWorld(data []byte, m FuzzMode) (*FuzzInput, plan.Config, *model.Snapshot) {
	in := &FuzzInput{b: data}
	cfg := in.config()
	if m.Config != nil {
		m.Config(in)
	}
	annotate := m.Annotate
	tr := model.NewTracker()
	var services []*v1.Service
	for range 1 + in.N(4) {
		svc := in.service()
		if annotate != nil {
			annotate(in, svc)
		}
		services = append(services, svc)
		tr.UpsertService(svc)
	}
	for i := range 1 + in.N(8) {
		tr.UpsertSlice(in.slice(i, services))
	}
	if annotate == nil && in.N(4) == 0 {
		tr.DeleteService("default", in.Pick("a", "b", "c"))
	}
	snap, _ := tr.Snapshot()
	return in, cfg, snap
}

// FuzzPlan is the FuzzPlan of a mode planned with the common configuration: both families
// of the fuzz world planned by m.Build (which checks each plan), the shared UDP plan made,
// and, where no two services clash, traffic to each cluster IP and node port checked by
// CheckFlows.
func FuzzPlan[P Plan](f *testing.F, m Mode[P], name string, mult int) {
	FuzzSeeds(f, name, mult)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, cfg, snap := FuzzWorld(data, FuzzMode{})
		for _, fam := range []model.Family{model.IPv4, model.IPv6} {
			p := m.checked(t, m.Plan(snap, fam, cfg), fam)
			_ = plan.UDP(snap, fam, cfg)
			CheckFlows(t, snap, cfg, ModePlan{Mode: m.Mode, Family: fam, Conflicts: m.Conflicts != nil && m.Conflicts(snap, fam, cfg, p),
				Dump: p.Dump, Tracer: func(node string) Tracer { return m.Tracer(t, p, node) }})
		}
	})
}

// ModePlan is one mode's plan of one family, as CheckFlows sees it.
type ModePlan struct {
	Mode      plan.Mode
	Family    model.Family
	Conflicts bool // two service ports claim one address or node port
	Dump      func() string
	// Tracer returns a tracer for which node is the node's only address.
	Tracer func(node string) Tracer
	// NodeMeetsExternalPolicy: the node's own traffic to a node port meets the external
	// traffic policy too (IPVS mode has one virtual server for both).
	NodeMeetsExternalPolicy bool
}

// CheckFlows traces the cluster IP and node port of every service port. Without conflicts
// the outcome must be what Policy decided; with them the plan need only be walkable.
func CheckFlows(t *testing.T, snap *model.Snapshot, cfg plan.Config, mp ModePlan) {
	t.Helper()
	clientAddr, nodeAddr := "10.200.1.2", "10.200.1.1"
	if mp.Family == model.IPv6 {
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
		p, ok := plan.Policy(sp, mp.Family, cfg)
		if !ok {
			continue
		}
		tr := mp.Tracer(nodeAddr)
		internal := Packet{src: netip.MustParseAddr(clientAddr), dst: p.ClusterIP, proto: sp.Name.Protocol, dport: sp.Port}
		gotInternal := Unmasked(tr.Results(internal))
		fromNode := internal.Local()
		fromNode.src = netip.MustParseAddr(nodeAddr)
		gotLocal := Unmasked(tr.Results(fromNode))
		if mp.Conflicts || outer[netip.AddrPortFrom(p.ClusterIP, sp.Port)] {
			continue
		}
		want := Expected(p.Internal, p.UsesLocalForInternal, &p)
		if !slices.Equal(want, gotInternal) || !slices.Equal(want, gotLocal) {
			t.Fatalf("%s %s %v cluster IP: want %v, got %v from outside and %v from the node\n%s",
				mp.Mode, sp.Name, mp.Family, want, gotInternal, gotLocal, mp.Dump())
		}
		if sp.NodePort == 0 || !NodePortOpen(cfg, mp.Family, nodeAddr) {
			continue
		}
		np := Packet{src: netip.MustParseAddr(clientAddr), dst: netip.MustParseAddr(nodeAddr), proto: sp.Name.Protocol, dport: sp.NodePort}
		want = Expected(p.External, !p.UsesClusterForExternal, &p)
		if mp.Mode == plan.ModeNFTables && synProxied(sp, &p) {
			// The handshake is the kernel's: the synproxy answers it, then opens the
			// connection from the node (checked below).
			want = []string{SynProxied}
		}
		if got := Unmasked(tr.Results(np)); !slices.Equal(want, got) {
			t.Fatalf("%s %s %v node port: want %v, got %v\n%s", mp.Mode, sp.Name, mp.Family, want, got, mp.Dump())
		}
		// From the node itself the traffic policy does not apply: any endpoint serves.
		np.fromNode, np.src = true, np.dst
		if p.External != plan.Reject && !mp.NodeMeetsExternalPolicy {
			want = Expected(plan.Forward, false, &p)
		}
		if got := Unmasked(tr.Results(np)); !slices.Equal(want, got) {
			t.Fatalf("%s %s %v node port from the node: want %v, got %v\n%s", mp.Mode, sp.Name, mp.Family, want, got, mp.Dump())
		}
	}
}

// synProxied reports whether nftables mode SYN-proxies the port's external frontends.
func synProxied(sp *model.ServicePort, p *plan.PortPolicy) bool {
	return sp.Protection != nil && sp.Protection.SynProxy && sp.Name.Protocol == model.TCP && p.External == plan.Forward
}

// Expected lists the trace results an outcome means: every endpoint of the policy's set,
// or REJECT, or DROP.
func Expected(o plan.Outcome, local bool, p *plan.PortPolicy) []string {
	switch o {
	case plan.Reject:
		return []string{Reject}
	case plan.Drop:
		return []string{Drop}
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

// NodePortOpen reports whether a node port answers on addr.
func NodePortOpen(cfg plan.Config, f model.Family, addr string) bool {
	ps := plan.FamilyPrefixes(cfg.NodePortAddresses, f)
	return len(ps) == 0 || slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(netip.MustParseAddr(addr)) })
}

// Unmasked drops the masquerade marker from results.
func Unmasked(rs []string) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = strings.TrimSuffix(r, " (masqueraded)")
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// FuzzInput hands out small choices from the fuzzer's bytes; exhausted input reads as 0.
type FuzzInput struct{ b []byte }

// N draws a number in [0, k).
func (in *FuzzInput) N(k int) int {
	if len(in.b) == 0 {
		return 0
	}
	v := int(in.b[0]) % k
	in.b = in.b[1:]
	return v
}

// Pick draws one of xs.
func (in *FuzzInput) Pick(xs ...string) string { return xs[in.N(len(xs))] }

func (in *FuzzInput) flag() bool { return in.N(2) == 1 }

func (in *FuzzInput) optBool() *bool {
	switch in.N(3) {
	case 1:
		t := true
		return &t
	case 2:
		f := false
		return &f
	}
	return nil
}

func (in *FuzzInput) config() plan.Config {
	cfg := plan.Config{NodeName: "gw", Zone: in.Pick("", "z1", "z2"), MasqueradeAll: in.flag(), MasqueradeBit: uint(in.N(40))}
	for range in.N(3) {
		cfg.NodePortAddresses = append(cfg.NodePortAddresses,
			netip.MustParsePrefix(in.Pick("10.200.1.1/32", "10.200.9.0/24", "fd00:200:1::/64", "0.0.0.0/0")))
	}
	for range in.N(3) {
		cfg.ClusterCIDRs = append(cfg.ClusterCIDRs, netip.MustParsePrefix(in.Pick("10.200.2.0/24", "fd00:200:2::/64", "10.200.1.0/24")))
	}
	return cfg
}

var (
	fuzzClusterIPs = []string{"10.96.0.1", "10.96.0.2", "fd00:96::1", "fd00:96::2", "None", "", "bogus"}
	fuzzOuterIPs   = []string{"192.0.2.1", "192.0.2.2", "203.0.113.1", "2001:db8::1", "10.96.0.1", "bogus"}
	fuzzEndpoints  = []string{"10.200.2.1", "10.200.2.2", "10.200.2.3", "fd00:200:2::1", "fd00:200:2::2", "::ffff:10.200.2.1"}
)

func (in *FuzzInput) service() *v1.Service {
	s := &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: in.Pick("default", "default", "default", "other"), Name: in.Pick("a", "b", "c")}}
	sp := &s.Spec
	sp.Type = v1.ServiceType(in.Pick("ClusterIP", "NodePort", "LoadBalancer", "ExternalName", ""))
	sp.ClusterIP = in.Pick(fuzzClusterIPs...)
	sp.ClusterIPs = []string{sp.ClusterIP}
	if in.flag() {
		sp.ClusterIPs = append(sp.ClusterIPs, in.Pick(fuzzClusterIPs...))
	}
	for range 1 + in.N(3) {
		sp.Ports = append(sp.Ports, v1.ServicePort{
			Name:     in.Pick("", "http", "dns"),
			Protocol: v1.Protocol(in.Pick("TCP", "UDP", "", "SCTP")),
			Port:     int32([]int{53, 80, 443}[in.N(3)]),
			NodePort: int32([]int{0, 30080, 30081}[in.N(3)]),
		})
	}
	for range in.N(3) {
		sp.ExternalIPs = append(sp.ExternalIPs, in.Pick(fuzzOuterIPs...))
	}
	for range in.N(3) {
		ing := v1.LoadBalancerIngress{IP: in.Pick(fuzzOuterIPs...)}
		switch in.N(3) {
		case 1:
			m := v1.LoadBalancerIPModeProxy
			ing.IPMode = &m
		case 2:
			m := v1.LoadBalancerIPModeVIP
			ing.IPMode = &m
		}
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, ing)
	}
	for range in.N(3) {
		sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges, in.Pick("10.200.1.0/24", "0.0.0.0/0", "fd00::/8", "bogus", " 10.200.1.0/24", "010.200.001.0/24"))
	}
	sp.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicy(in.Pick("Cluster", "Local", ""))
	if in.flag() {
		p := v1.ServiceInternalTrafficPolicy(in.Pick("Cluster", "Local"))
		sp.InternalTrafficPolicy = &p
	}
	sp.HealthCheckNodePort = int32(in.N(2) * 32000)
	if in.flag() {
		sp.SessionAffinity = v1.ServiceAffinityClientIP
		if in.flag() {
			secs := int32(in.N(4) * 100)
			sp.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &secs}}
		}
	}
	if in.flag() {
		td := in.Pick("PreferClose", "PreferSameZone", "PreferSameNode", "Other")
		sp.TrafficDistribution = &td
	}
	if in.N(3) == 0 {
		s.Annotations = map[string]string{model.ProtectionAnnotation: in.Pick("{synProxy: true}", "{maxConnsPerSource: 3}",
			"{synProxy: true, newConnsPerSecond: 5, maxConnsPerSource: 9}", "{newConnsPerSecond: 2}", "{synProxy: maybe}")}
	}
	return s
}

// slice builds an EndpointSlice, mostly for one of the services and one of its ports.
func (in *FuzzInput) slice(i int, services []*v1.Service) *discovery.EndpointSlice {
	owner := services[in.N(len(services))]
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: owner.Namespace, Name: fmt.Sprint("s", i%6)},
		AddressType: discovery.AddressType(in.Pick("IPv4", "IPv4", "IPv6", "FQDN")),
	}
	if in.N(5) == 0 {
		s.Namespace = in.Pick("default", "other")
	}
	family := fuzzEndpoints[:3]
	if s.AddressType == discovery.AddressTypeIPv6 {
		family = fuzzEndpoints[3:5]
	}
	if in.N(8) == 0 {
		family = fuzzEndpoints // wrong-family and mapped addresses now and then
	}
	switch in.N(5) {
	case 0:
	case 1:
		s.Labels = map[string]string{model.ServiceNameLabel: in.Pick("a", "b", "c")}
	default:
		s.Labels = map[string]string{model.ServiceNameLabel: owner.Name}
	}
	for range 1 + in.N(2) {
		name := in.Pick("", "http", "dns")
		proto := v1.Protocol(in.Pick("TCP", "UDP", "TCP", "SCTP"))
		if ports := owner.Spec.Ports; in.N(4) != 0 {
			sp := ports[in.N(len(ports))]
			name, proto = sp.Name, sp.Protocol
			if proto == "" {
				proto = v1.ProtocolTCP
			}
		}
		port := int32([]int{8080, 5353, 8080, 0}[in.N(4)])
		ep := discovery.EndpointPort{Name: &name, Protocol: &proto, Port: &port}
		if in.N(5) == 0 {
			ep.Port = nil
		}
		s.Ports = append(s.Ports, ep)
	}
	for range in.N(5) {
		var e discovery.Endpoint
		if in.flag() { // half the endpoints are plainly ready
			e.Conditions = discovery.EndpointConditions{Ready: in.optBool(), Serving: in.optBool(), Terminating: in.optBool()}
		}
		if in.N(6) != 0 {
			e.Addresses = []string{in.Pick(family...)}
		}
		if node := in.Pick("", "gw", "other"); node != "" {
			e.NodeName = &node
		}
		if zone := in.Pick("", "z1", "z2"); zone != "" {
			e.Zone = &zone
		}
		if in.flag() {
			e.Hints = &discovery.EndpointHints{}
			for range in.N(3) {
				e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: in.Pick("z1", "z2")})
			}
			for range in.N(3) {
				e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: in.Pick("gw", "other")})
			}
		}
		s.Endpoints = append(s.Endpoints, e)
	}
	return s
}
