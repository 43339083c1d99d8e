package labtest

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/edgegate/edgegate/daemon/plan/ipvs"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/lab"
)

// Namespace holds every Service of the traffic matrix.
const Namespace = "matrix"

// A serviceMod changes one aspect of a Service fixture.
type serviceMod func(*v1.Service)

// service builds a Service in Namespace with ClusterIPs ips (one per family, the
// families in that order) and one port named "p" (TCP port 80 → BackendTCPPort unless
// changed by udpPort).
func service(name string, ips []string, mods ...serviceMod) *v1.Service {
	svc := &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  ips[0],
			ClusterIPs: ips,
			Ports: []v1.ServicePort{{
				Name: "p", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(lab.BackendTCPPort),
			}},
		},
	}
	for _, ip := range ips {
		fam := v1.IPv4Protocol
		if netip.MustParseAddr(ip).Is6() {
			fam = v1.IPv6Protocol
		}
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, fam)
	}
	if len(ips) > 1 {
		p := v1.IPFamilyPolicyRequireDualStack
		svc.Spec.IPFamilyPolicy = &p
	}
	for _, m := range mods {
		m(svc)
	}
	return svc
}

// nodePort makes the Service type NodePort on port np.
func nodePort(np int32) serviceMod {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = np
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	}
}

// loadBalancer makes the Service type LoadBalancer on node port np with status ingress ips.
func loadBalancer(np int32, ips ...string) serviceMod {
	return func(s *v1.Service) {
		nodePort(np)(s)
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

// externalIPs sets spec.externalIPs.
func externalIPs(ips ...string) serviceMod {
	return func(s *v1.Service) { s.Spec.ExternalIPs = ips }
}

// ipvsScheduler picks the Service's IPVS scheduler with edgegate's annotation (ipvs mode
// only; the other modes ignore it).
func ipvsScheduler(name string) serviceMod {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[ipvs.SchedulerAnnotation] = name
	}
}

// protection sets the Service's edgegate.dev/protection annotation.
func protection(spec string) serviceMod {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[model.ProtectionAnnotation] = spec
	}
}

func sourceRanges(cidrs ...string) serviceMod {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = cidrs }
}

func clientIPAffinity(timeoutSeconds int32) serviceMod {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &timeoutSeconds}}
	}
}

// externalLocal sets externalTrafficPolicy Local with healthCheckNodePort hc.
func externalLocal(hc int32) serviceMod {
	return func(s *v1.Service) {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hc
	}
}

// udpPort makes the port UDP port → BackendUDPPort.
func udpPort(port int32) serviceMod {
	return func(s *v1.Service) {
		s.Spec.Ports[0].Protocol = v1.ProtocolUDP
		s.Spec.Ports[0].Port = port
		s.Spec.Ports[0].TargetPort = intstr.FromInt32(lab.BackendUDPPort)
	}
}

// endpoint is one EndpointSlice endpoint of a fixture: backend index (1..3) and conditions.
type endpoint struct {
	backend                     int
	ready, serving, terminating bool
	node                        string
}

// ready returns ready, serving endpoints for the given backends on node worker-<n>, so
// none is local to the gateway.
func ready(backends ...int) []endpoint {
	var eps []endpoint
	for _, b := range backends {
		eps = append(eps, endpoint{backend: b, ready: true, serving: true, node: fmt.Sprintf("worker-%d", b)})
	}
	return eps
}

// slice builds the EndpointSlice of svc for one family with eps; its port matches svc's
// first port (name, protocol, target port).
func slice(svc *v1.Service, family discovery.AddressType, eps []endpoint) *discovery.EndpointSlice {
	sp := svc.Spec.Ports[0]
	port := sp.TargetPort.IntVal
	es := &discovery.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace,
			Name:      fmt.Sprintf("%s-%s", svc.Name, strings.ToLower(string(family))),
			Labels:    map[string]string{discovery.LabelServiceName: svc.Name},
		},
		AddressType: family,
		Ports:       []discovery.EndpointPort{{Name: &sp.Name, Protocol: &sp.Protocol, Port: &port}},
	}
	for _, e := range eps {
		addr := fmt.Sprintf("10.200.2.1%d", e.backend)
		if family == discovery.AddressTypeIPv6 {
			addr = fmt.Sprintf("fd00:200:2::1%d", e.backend)
		}
		ready, serving, terminating, node := e.ready, e.serving, e.terminating, e.node
		es.Endpoints = append(es.Endpoints, discovery.Endpoint{
			Addresses:  []string{addr},
			Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
			NodeName:   &node,
		})
	}
	return es
}

// threeReady is the scenario most of the matrix is: svc with one IPv4 slice of backends 1, 2
// and 3, all ready, and check.
func threeReady(name string, svc *v1.Service, check func(t *testing.T, l *lab.Lab, g *Gateway)) Scenario {
	return Scenario{
		Name:      name,
		Manifests: manifests(svc, slice(svc, discovery.AddressTypeIPv4, ready(1, 2, 3))),
		Check:     check,
	}
}

// openHTTP opens a keep-alive HTTP connection from h to addr, or fails t.
func openHTTP(t *testing.T, h *lab.Host, addr string) *lab.HTTPConn {
	t.Helper()
	c, err := h.OpenHTTP(addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// manifests renders objects as one multi-document YAML file.
func manifests(objs ...any) string {
	docs := make([]string, 0, len(objs))
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			panic(fmt.Sprintf("render fixture %T: %v", o, err)) // fixtures are static: a bug here is a bug in this file
		}
		docs = append(docs, string(b))
	}
	return strings.Join(docs, "---\n")
}
