// Package modeltest builds Service and EndpointSlice fixtures for tests with small modifier
// functions, so a test states only what matters to it.
package modeltest

import (
	"fmt"
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/edgegate/edgegate/daemon/model"
)

// Service returns a ClusterIP Service with the given modifiers applied.
func Service(ns, name, clusterIP string, mods ...func(*v1.Service)) *v1.Service {
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

// Port adds a port.
func Port(name string, proto v1.Protocol, port, target, nodePort int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: name, Protocol: proto, Port: port,
			TargetPort: intstr.FromInt32(target), NodePort: nodePort})
	}
}

// Type sets the service type.
func Type(t v1.ServiceType) func(*v1.Service) { return func(s *v1.Service) { s.Spec.Type = t } }

// DualStack adds a second cluster IP.
func DualStack(ip string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, ip) }
}

// LoadBalancerIPs sets status ingress IPs (ipMode VIP).
func LoadBalancerIPs(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

// ProxyModeIngress adds a status ingress IP with ipMode Proxy.
func ProxyModeIngress(ip string) func(*v1.Service) {
	return func(s *v1.Service) {
		m := v1.LoadBalancerIPModeProxy
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip, IPMode: &m})
	}
}

// SourceRanges sets loadBalancerSourceRanges.
func SourceRanges(r ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = r }
}

// ExternalIPs sets spec.externalIPs.
func ExternalIPs(ips ...string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

// ExternalLocal sets externalTrafficPolicy Local and the health check node port.
func ExternalLocal(hcPort int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hcPort
	}
}

// InternalLocal sets internalTrafficPolicy Local.
func InternalLocal() func(*v1.Service) {
	return func(s *v1.Service) {
		p := v1.ServiceInternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = &p
	}
}

// Affinity sets ClientIP session affinity with a timeout.
func Affinity(seconds int32) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &seconds}}
	}
}

// TrafficDistribution sets spec.trafficDistribution.
func TrafficDistribution(td string) func(*v1.Service) {
	return func(s *v1.Service) { s.Spec.TrafficDistribution = &td }
}

// Slice returns an EndpointSlice for a service with one port.
func Slice(ns, name, service, portName string, proto v1.Protocol, port int32, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	typ := discovery.AddressTypeIPv4
	if len(eps) > 0 && len(eps[0].Addresses) > 0 && netip.MustParseAddr(eps[0].Addresses[0]).Is6() {
		typ = discovery.AddressTypeIPv6
	}
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{model.ServiceNameLabel: service}},
		AddressType: typ,
		Endpoints:   eps,
		Ports:       []discovery.EndpointPort{{Name: &portName, Protocol: &proto, Port: &port}},
	}
}

// EP returns a ready endpoint; modifiers change conditions, node, zone and hints.
func EP(addr string, mods ...func(*discovery.Endpoint)) discovery.Endpoint {
	t := true
	e := discovery.Endpoint{Addresses: []string{addr}, Conditions: discovery.EndpointConditions{Ready: &t, Serving: &t}}
	for _, m := range mods {
		m(&e)
	}
	return e
}

// Terminating marks an endpoint terminating; serving says whether it still serves.
func Terminating(serving bool) func(*discovery.Endpoint) {
	return func(e *discovery.Endpoint) {
		f, t := false, true
		e.Conditions = discovery.EndpointConditions{Ready: &f, Serving: &serving, Terminating: &t}
	}
}

// NotReady marks an endpoint not ready and not serving.
func NotReady() func(*discovery.Endpoint) {
	return func(e *discovery.Endpoint) {
		f := false
		e.Conditions = discovery.EndpointConditions{Ready: &f, Serving: &f}
	}
}

// OnNode sets the endpoint's node name.
func OnNode(n string) func(*discovery.Endpoint) {
	return func(e *discovery.Endpoint) { e.NodeName = &n }
}

// InZone sets the endpoint's zone.
func InZone(z string) func(*discovery.Endpoint) { return func(e *discovery.Endpoint) { e.Zone = &z } }

// ZoneHints sets the endpoint's forZones hints.
func ZoneHints(zones ...string) func(*discovery.Endpoint) {
	return func(e *discovery.Endpoint) {
		h := &discovery.EndpointHints{}
		for _, z := range zones {
			h.ForZones = append(h.ForZones, discovery.ForZone{Name: z})
		}
		e.Hints = h
	}
}

// NodeHints sets the endpoint's forNodes hints.
func NodeHints(nodes ...string) func(*discovery.Endpoint) {
	return func(e *discovery.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discovery.EndpointHints{}
		}
		for _, n := range nodes {
			e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: n})
		}
	}
}

// ExternalName makes the service an ExternalName service (no cluster IP, DNS only).
func ExternalName(host string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeExternalName
		s.Spec.ExternalName = host
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
	}
}

// Headless makes the service headless (clusterIP None).
func Headless() func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = v1.ClusterIPNone, []string{v1.ClusterIPNone}
	}
}

// Upsert adds or updates a Service or an EndpointSlice.
func Upsert(tr *model.Tracker, o any) {
	switch o := o.(type) {
	case *v1.Service:
		tr.UpsertService(o)
	case *discovery.EndpointSlice:
		tr.UpsertSlice(o)
	}
}

// Snapshot builds a Snapshot from objects through a Tracker.
func Snapshot(objs ...any) *model.Snapshot {
	t := model.NewTracker()
	for _, o := range objs {
		Upsert(t, o)
	}
	s, _ := t.Snapshot()
	return s
}

// BenchObjects are services ClusterIP Services of endpoints endpoints each, every endpoint
// on another node: the shape make bench creates in the apiserver, for the backends'
// benchmarks.
func BenchObjects(services, endpoints int) []any {
	objs := make([]any, 0, 2*services)
	for i := range services {
		name := fmt.Sprintf("svc-%05d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		objs = append(objs, Service("bench", name, ip, Port("http", v1.ProtocolTCP, 80, 8080, 0)),
			BenchSlice(i, endpoints, 0))
	}
	return objs
}

// BenchSlice is BenchObjects' EndpointSlice of Service i, its first endpoint moved by shift.
func BenchSlice(i, endpoints, shift int) *discovery.EndpointSlice {
	name := fmt.Sprintf("svc-%05d", i)
	eps := make([]discovery.Endpoint, endpoints)
	for j := range eps {
		n := i*endpoints + j
		if j == 0 {
			n += shift << 21
		}
		eps[j] = EP(fmt.Sprintf("10.%d.%d.%d", 64+n>>16, n>>8&255, n&255), OnNode("other"))
	}
	return Slice("bench", name+"-0", name, "http", v1.ProtocolTCP, 8080, eps...)
}

// Annotate sets an annotation.
func Annotate(key, value string) func(*v1.Service) {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[key] = value
	}
}
