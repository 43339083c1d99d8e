package model_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// Addresses: cluster IPs 10.96.0.10 / fd00:96::10, external IP 192.0.2.7, ingress
// 203.0.113.10 (VIP) and 203.0.113.11 (Proxy), endpoints 10.200.2.11-13 and
// fd00:200:2::11 on port 8080.

// addrCmp lets cmp compare netip values, which have unexported fields.
var addrCmp = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// only converts a service that must yield exactly one port.
func only(t *testing.T, svc *v1.Service, eps ...*discovery.EndpointSlice) *model.ServicePort {
	t.Helper()
	sps := model.ServicePorts(svc, eps)
	if len(sps) != 1 {
		t.Fatalf("got %d ports, want 1: %+v", len(sps), sps)
	}
	return sps[0]
}

func TestServicePortsEverything(t *testing.T) {
	svc := mt.Service("prod", "web", "10.96.0.10",
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
		mt.DualStack("fd00:96::10"),
		mt.ExternalIPs("192.0.2.7", "192.0.2.7"),
		mt.LoadBalancerIPs("203.0.113.10"),
		mt.ProxyModeIngress("203.0.113.11"),
		mt.SourceRanges("10.200.1.7/24", "10.200.1.0/24", "2001:db8::/32"),
		mt.ExternalLocal(32000),
		mt.InternalLocal(),
		mt.Affinity(60),
		mt.TrafficDistribution(v1.ServiceTrafficDistributionPreferClose))
	v4 := mt.Slice("prod", "web-v4", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.200.2.12", mt.OnNode("b"), mt.InZone("z2"), mt.ZoneHints("z2", "z1")),
		mt.EP("10.200.2.11", mt.OnNode("a"), mt.InZone("z1")))
	v6 := mt.Slice("prod", "web-v6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:200:2::11", mt.Terminating(true)))
	want := &model.ServicePort{
		Name:            model.ServicePortName{ServiceName: model.ServiceName{Namespace: "prod", Name: "web"}, Port: "http", Protocol: model.TCP},
		Type:            model.LoadBalancer,
		Port:            80,
		NodePort:        30080,
		ClusterIPs:      addrs("10.96.0.10", "fd00:96::10"),
		ExternalIPs:     addrs("192.0.2.7"),
		LoadBalancerIPs: []model.IngressIP{{Addr: netip.MustParseAddr("203.0.113.10")}, {Addr: netip.MustParseAddr("203.0.113.11"), Proxy: true}},
		SourceRanges:    []netip.Prefix{netip.MustParsePrefix("10.200.1.0/24"), netip.MustParsePrefix("2001:db8::/32")},
		ExternalLocal:   true,
		InternalLocal:   true,
		HealthCheckPort: 32000,
		AffinityTimeout: 60,
		PreferSameZone:  true,
		Endpoints: []model.Endpoint{
			{Addr: netip.MustParseAddr("10.200.2.11"), Port: 8080, Ready: true, Serving: true, NodeName: "a", Zone: "z1"},
			{Addr: netip.MustParseAddr("10.200.2.12"), Port: 8080, Ready: true, Serving: true, NodeName: "b", Zone: "z2", Hints: &model.Hints{Zones: []string{"z1", "z2"}}},
			{Addr: netip.MustParseAddr("fd00:200:2::11"), Port: 8080, Serving: true, Terminating: true},
		},
	}
	if d := cmp.Diff(want, only(t, svc, v4, v6), addrCmp); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestServicePortsDefaults(t *testing.T) {
	svc := mt.Service("default", "web", "10.96.0.10", mt.Port("", "", 80, 8080, 0), mt.Type(""),
		func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityClientIP })
	eps := mt.Slice("default", "web-1", "web", "", "", 8080, mt.EP("10.200.2.11"))
	eps.Ports[0].Protocol = nil // nil protocol means TCP too
	sp := only(t, svc, eps)
	if sp.Type != model.ClusterIP || sp.Name.Protocol != model.TCP {
		t.Errorf("type %q protocol %q, want ClusterIP TCP", sp.Type, sp.Name.Protocol)
	}
	if model.DefaultAffinityTimeout != 10800 || sp.AffinityTimeout != 10800 {
		t.Errorf("affinity without config: %d, want 10800", sp.AffinityTimeout)
	}
	if len(sp.Endpoints) != 1 {
		t.Errorf("endpoints of an unnamed TCP port: %v", sp.Endpoints)
	}
	if sp.NodePort != 0 || sp.ExternalLocal || sp.UsesExternal() {
		t.Errorf("ClusterIP service is external: %+v", sp)
	}
	none := only(t, mt.Service("default", "web", "10.96.0.10", mt.Port("", "", 80, 8080, 0)))
	if none.AffinityTimeout != 0 {
		t.Errorf("no affinity: timeout %d", none.AffinityTimeout)
	}
}

func TestEndpointConditions(t *testing.T) {
	cases := []struct {
		name                        string
		cond                        discovery.EndpointConditions
		ready, serving, terminating bool
	}{
		{"all nil: ready and serving", discovery.EndpointConditions{}, true, true, false},
		{"serving nil means true (API), even when not ready", discovery.EndpointConditions{Ready: ptr.To(false)}, false, true, false},
		{"serving nil with ready true", discovery.EndpointConditions{Ready: ptr.To(true)}, true, true, false},
		{"serving-terminating", discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}, false, true, true},
		{"terminating, not serving", discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}, false, false, true},
		{"ready nil, serving false", discovery.EndpointConditions{Serving: ptr.To(false)}, true, false, false},
	}
	svc := mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ep := discovery.Endpoint{Addresses: []string{"10.200.2.11"}, Conditions: c.cond}
			sp := only(t, svc, mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, ep))
			e := sp.Endpoints[0]
			if e.Ready != c.ready || e.Serving != c.serving || e.Terminating != c.terminating {
				t.Errorf("ready/serving/terminating = %v/%v/%v, want %v/%v/%v",
					e.Ready, e.Serving, e.Terminating, c.ready, c.serving, c.terminating)
			}
		})
	}
}

func TestEndpointSelection(t *testing.T) {
	svc := mt.Service("default", "web", "10.96.0.10",
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	http := func(name string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
		return mt.Slice("default", name, "web", "http", v1.ProtocolTCP, 8080, eps...)
	}
	metrics := mt.Slice("default", "web-metrics", "web", "metrics", v1.ProtocolTCP, 9090, mt.EP("10.200.2.13"))
	udpHTTP := mt.Slice("default", "web-udp", "web", "http", v1.ProtocolUDP, 8080, mt.EP("10.200.2.14"))
	// An FQDN slice is ignored by its type, even where an address would parse.
	fqdn := http("web-fqdn", mt.EP("10.200.2.16"))
	fqdn.AddressType = discovery.AddressTypeFQDN
	noAddr := http("web-noaddr", discovery.Endpoint{}, mt.EP("not-an-ip"))
	noPort := http("web-noport", mt.EP("10.200.2.15"))
	noPort.Ports[0].Port = nil
	// The same endpoint in two slices while the controller moves it: the first slice wins.
	first := http("web-a", mt.EP("10.200.2.11"), mt.EP("::ffff:10.200.2.12"))
	second := http("web-b", mt.EP("10.200.2.11", mt.NotReady()), mt.EP("10.200.2.12", mt.NotReady()))

	sps := model.ServicePorts(svc, []*discovery.EndpointSlice{first, second, metrics, udpHTTP, fqdn, noAddr, noPort})
	if len(sps) != 2 {
		t.Fatalf("got %d ports", len(sps))
	}
	byName := map[string]*model.ServicePort{}
	for _, sp := range sps {
		byName[sp.Name.Port] = sp
	}
	want := []model.Endpoint{
		{Addr: netip.MustParseAddr("10.200.2.11"), Port: 8080, Ready: true, Serving: true},
		{Addr: netip.MustParseAddr("10.200.2.12"), Port: 8080, Ready: true, Serving: true},
	}
	if d := cmp.Diff(want, byName["http"].Endpoints, addrCmp); d != "" {
		t.Errorf("http endpoints (-want +got):\n%s", d)
	}
	if n := len(byName["dns"].Endpoints); n != 0 {
		t.Errorf("dns got %d endpoints from slices of other ports", n)
	}
	// Reversed slice order keeps the other copy: the order is the caller's (the Tracker
	// sorts slices by name), never a map's.
	sps = model.ServicePorts(svc, []*discovery.EndpointSlice{second, first})
	if e := sps[0].Endpoints; len(e) != 2 || e[0].Ready || e[1].Ready {
		t.Errorf("reversed order: %+v", e)
	}
}

func TestExternalFields(t *testing.T) {
	base := func(mods ...func(*v1.Service)) *model.ServicePort {
		svc := mt.Service("default", "web", "10.96.0.10", append([]func(*v1.Service){
			mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
			func(s *v1.Service) {
				// Status and source ranges that only a LoadBalancer may use.
				s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "203.0.113.10"}, {Hostname: "lb.example.com"}}
				s.Spec.LoadBalancerSourceRanges = []string{"10.200.1.0/24", " 10.201.0.0/16"}
			},
		}, mods...)...)
		return model.ServicePorts(svc, nil)[0]
	}
	cases := []struct {
		name                    string
		sp                      *model.ServicePort
		nodePort, hc            uint16
		lbIPs, ranges           int
		externalLocal, external bool
	}{
		{"ClusterIP ignores LoadBalancer fields", base(), 0, 0, 0, 0, false, false},
		{"ClusterIP with eTP Local is not Local", base(mt.ExternalLocal(32000)), 0, 0, 0, 0, false, false},
		{"ClusterIP with external IPs and eTP Local", base(mt.ExternalIPs("192.0.2.7"), mt.ExternalLocal(32000)), 0, 0, 0, 0, true, true},
		{"NodePort", base(mt.Type(v1.ServiceTypeNodePort)), 30080, 0, 0, 0, false, true},
		{"NodePort eTP Local, no health check port", base(mt.Type(v1.ServiceTypeNodePort), mt.ExternalLocal(32000)), 30080, 0, 0, 0, true, true},
		{"LoadBalancer", base(mt.Type(v1.ServiceTypeLoadBalancer)), 30080, 0, 1, 2, false, true},
		{"LoadBalancer eTP Local", base(mt.Type(v1.ServiceTypeLoadBalancer), mt.ExternalLocal(32000)), 30080, 32000, 1, 2, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := c.sp
			if sp.NodePort != c.nodePort || sp.HealthCheckPort != c.hc || len(sp.LoadBalancerIPs) != c.lbIPs ||
				len(sp.SourceRanges) != c.ranges || sp.ExternalLocal != c.externalLocal || sp.UsesExternal() != c.external {
				t.Errorf("nodePort %d hc %d lbIPs %v ranges %v externalLocal %v external %v; want %d %d %d %d %v %v",
					sp.NodePort, sp.HealthCheckPort, sp.LoadBalancerIPs, sp.SourceRanges, sp.ExternalLocal, sp.UsesExternal(),
					c.nodePort, c.hc, c.lbIPs, c.ranges, c.externalLocal, c.external)
			}
		})
	}
}

func TestTrafficDistribution(t *testing.T) {
	for td, want := range map[string][2]bool{
		v1.ServiceTrafficDistributionPreferClose:    {true, false},
		v1.ServiceTrafficDistributionPreferSameZone: {true, false},
		v1.ServiceTrafficDistributionPreferSameNode: {false, true},
		"SomethingNew": {false, false},
	} {
		sp := only(t, mt.Service("default", "web", "10.96.0.10", mt.Port("", v1.ProtocolTCP, 80, 80, 0), mt.TrafficDistribution(td)))
		if got := [2]bool{sp.PreferSameZone, sp.PreferSameNode}; got != want {
			t.Errorf("%s: zone/node = %v, want %v", td, got, want)
		}
	}
}

func TestSkipped(t *testing.T) {
	for name, svc := range map[string]*v1.Service{
		"ExternalName": mt.Service("default", "db", "", mt.Port("", v1.ProtocolTCP, 5432, 5432, 0), mt.ExternalName("db.example.com")),
		"headless":     mt.Service("default", "db", "", mt.Port("", v1.ProtocolTCP, 5432, 5432, 0), mt.Headless()),
		"no cluster IP": mt.Service("default", "db", "", mt.Port("", v1.ProtocolTCP, 5432, 5432, 0),
			func(s *v1.Service) { s.Spec.ClusterIPs = nil }),
	} {
		if !model.Skipped(svc) {
			t.Errorf("%s: not skipped", name)
		}
		if sps := model.ServicePorts(svc, nil); sps != nil {
			t.Errorf("%s: ports %v", name, sps)
		}
	}
	if model.ServicePorts(nil, nil) != nil {
		t.Error("nil service has ports")
	}
}

func TestClusterIPsNormalised(t *testing.T) {
	svc := mt.Service("default", "web", "fd00:96::10", mt.Port("", v1.ProtocolTCP, 80, 80, 0),
		func(s *v1.Service) { s.Spec.ClusterIPs = []string{"fd00:96::10", "::ffff:10.96.0.10", "bogus"} })
	sp := only(t, svc)
	if d := cmp.Diff(addrs("10.96.0.10", "fd00:96::10"), sp.ClusterIPs, addrCmp); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if a, ok := sp.ClusterIP(model.IPv4); !ok || a != netip.MustParseAddr("10.96.0.10") {
		t.Errorf("ClusterIP(IPv4) = %v %v", a, ok)
	}
	single := only(t, mt.Service("default", "web", "10.96.0.10", mt.Port("", v1.ProtocolTCP, 80, 80, 0)))
	if _, ok := single.ClusterIP(model.IPv6); ok {
		t.Error("single-stack service has an IPv6 cluster IP")
	}
}

func TestTriggerTime(t *testing.T) {
	svc := mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0))
	annotated := func(name, portName, when string) *discovery.EndpointSlice {
		s := mt.Slice("default", name, "web", portName, v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"))
		s.Annotations = map[string]string{model.TriggerTimeAnnotation: when}
		return s
	}
	sp := only(t, svc,
		annotated("a", "http", "2025-01-02T03:04:05Z"),
		annotated("b", "http", "2025-01-02T03:04:06.5Z"),
		annotated("c", "http", "yesterday"),
		annotated("d", "metrics", "2030-01-01T00:00:00Z")) // another port's slice does not count
	if want := int64(1735787046500000000); sp.TriggerTimeNanos != want {
		t.Errorf("trigger time %d, want %d", sp.TriggerTimeNanos, want)
	}
	if sp := only(t, svc, mt.Slice("default", "x", "web", "http", v1.ProtocolTCP, 8080)); sp.TriggerTimeNanos != 0 {
		t.Errorf("unannotated trigger time %d", sp.TriggerTimeNanos)
	}
}

func TestProtocolAndFamily(t *testing.T) {
	for p, n := range map[model.Protocol]uint8{model.TCP: 6, model.UDP: 17, model.SCTP: 132, "ICMP": 0} {
		if p.Number() != n {
			t.Errorf("%s.Number() = %d, want %d", p, p.Number(), n)
		}
	}
	if model.FamilyOf(netip.MustParseAddr("::ffff:10.0.0.1")) != model.IPv4 || model.FamilyOf(netip.MustParseAddr("fd00::1")) != model.IPv6 {
		t.Error("FamilyOf")
	}
	n := model.ServicePortName{ServiceName: model.ServiceName{Namespace: "ns", Name: "web"}, Port: "http", Protocol: model.TCP}
	if n.String() != "ns/web:http" || model.TCP.Lower() != "tcp" {
		t.Errorf("names: %s %s", n, model.TCP.Lower())
	}
}

func TestSourceRangesReadAsKubeProxyReadsThem(t *testing.T) {
	cases := []struct {
		name   string
		ranges []string
		want   []string
		closed bool
	}{
		{"none: not firewalled", nil, nil, false},
		{"padded", []string{" 10.201.1.0/24", "10.202.0.0/16 ", "\t2001:db8::/32\n"}, []string{"10.201.1.0/24", "10.202.0.0/16", "2001:db8::/32"}, false},
		{"leading zeros read as decimal", []string{"010.201.001.000/24"}, []string{"10.201.1.0/24"}, false},
		{"host bits masked, duplicates folded", []string{"10.201.1.7/24", "10.201.1.0/24"}, []string{"10.201.1.0/24"}, false},
		{"one range no parser accepts closes them all", []string{"10.201.1.0/24", "10.201.1.0/33"}, nil, true},
		{"a bare address is not a range", []string{"10.201.1.1"}, nil, true},
		{"IPv4-mapped IPv6", []string{"::ffff:10.201.1.0/120"}, nil, true},
		{"empty string", []string{""}, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svc := mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
				mt.Type(v1.ServiceTypeLoadBalancer), mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges(c.ranges...))
			sp := model.ServicePorts(svc, nil)[0]
			var got []string
			for _, p := range sp.SourceRanges {
				got = append(got, p.String())
			}
			if !slices.Equal(got, c.want) || sp.SourcesClosed != c.closed || sp.Firewalled() != (c.closed || len(c.want) > 0) {
				t.Errorf("ranges %v closed %v firewalled %v; want %v closed %v", got, sp.SourcesClosed, sp.Firewalled(), c.want, c.closed)
			}
		})
	}
}

func TestAddressesReadAsKubeProxyReadsThem(t *testing.T) {
	svc := mt.Service("default", "web", "010.096.000.010", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
		mt.Type(v1.ServiceTypeLoadBalancer), mt.LoadBalancerIPs("203.000.113.010"), mt.ExternalIPs("192.000.002.007"))
	eps := mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"))
	eps.Endpoints[0].Addresses = []string{"10.200.002.011"}
	sp := model.ServicePorts(svc, []*discovery.EndpointSlice{eps})[0]
	got := fmt.Sprint(sp.ClusterIPs, sp.LoadBalancerIPs, sp.ExternalIPs, sp.Endpoints)
	want := "[10.96.0.10] [{203.0.113.10 false}] [192.0.2.7] [10.200.2.11:8080]"
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
