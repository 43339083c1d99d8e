package model

import (
	"cmp"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// DefaultAffinityTimeout is Kubernetes' default ClientIP affinity timeout (3 hours).
const DefaultAffinityTimeout = 10800

// TriggerTimeAnnotation is set by the EndpointSlice controller to the time of the change
// that caused the slice's last update; network programming latency is measured from it.
const TriggerTimeAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"

// Skipped reports whether a Service has no data plane at all: ExternalName and headless
// services are resolved by DNS, not by the proxy.
func Skipped(svc *v1.Service) bool {
	if svc.Spec.Type == v1.ServiceTypeExternalName {
		return true
	}
	return svc.Spec.ClusterIP == v1.ClusterIPNone || svc.Spec.ClusterIP == ""
}

// ServicePorts builds the ServicePorts of one Service from it and its EndpointSlices.
// Inputs are expected to be valid (see ValidateService / ValidateEndpointSlice); fields
// that still fail to parse are left out rather than guessed.
func ServicePorts(svc *v1.Service, eps []*discovery.EndpointSlice) []*ServicePort {
	if svc == nil || Skipped(svc) {
		return nil
	}
	name := ServiceName{Namespace: svc.Namespace, Name: svc.Name}
	typ := Type(svc.Spec.Type)
	if typ == "" {
		typ = ClusterIP
	}
	clusterIPs := parseAddrs(svc.Spec.ClusterIPs)
	if len(clusterIPs) == 0 {
		clusterIPs = parseAddrs([]string{svc.Spec.ClusterIP})
	}
	externalIPs := parseAddrs(svc.Spec.ExternalIPs)
	var lbIPs []IngressIP
	if typ == LoadBalancer {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			a, ok := ParseAddr(ing.IP)
			if !ok {
				continue
			}
			lbIPs = append(lbIPs, IngressIP{Addr: a.Unmap(), Proxy: ing.IPMode != nil && *ing.IPMode == v1.LoadBalancerIPModeProxy})
		}
		slices.SortFunc(lbIPs, func(a, b IngressIP) int { return a.Addr.Compare(b.Addr) })
	}
	var ranges []netip.Prefix
	var closed bool
	if typ == LoadBalancer {
		ranges, closed = sourceRanges(svc.Spec.LoadBalancerSourceRanges)
	}
	external := typ == NodePort || typ == LoadBalancer
	// As in Kubernetes, the external policy applies to everything reachable from outside the
	// cluster: node ports, LoadBalancer IPs and external IPs.
	externalLocal := (external || len(externalIPs) > 0) && svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
	var affinity uint32
	if svc.Spec.SessionAffinity == v1.ServiceAffinityClientIP {
		affinity = DefaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			affinity = uint32(*c.ClientIP.TimeoutSeconds)
		}
	}
	var sameZone, sameNode bool
	if td := svc.Spec.TrafficDistribution; td != nil {
		switch *td {
		case v1.ServiceTrafficDistributionPreferClose, v1.ServiceTrafficDistributionPreferSameZone:
			sameZone = true
		case v1.ServiceTrafficDistributionPreferSameNode:
			sameNode = true
		}
	}

	// Validated before: an annotation that does not parse rejected the Service.
	var protection *Protection
	if v, ok := svc.Annotations[ProtectionAnnotation]; ok && (external || len(externalIPs) > 0) {
		protection, _ = ParseProtection([]byte(v))
	}
	var out []*ServicePort
	for _, p := range svc.Spec.Ports {
		proto := Protocol(p.Protocol)
		if proto == "" {
			proto = TCP
		}
		sp := &ServicePort{
			Name:            ServicePortName{ServiceName: name, Port: p.Name, Protocol: proto},
			Type:            typ,
			Port:            uint16(p.Port),
			ClusterIPs:      clusterIPs,
			ExternalIPs:     externalIPs,
			LoadBalancerIPs: lbIPs,
			SourceRanges:    ranges,
			SourcesClosed:   closed,
			ExternalLocal:   externalLocal,
			InternalLocal:   svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal,
			AffinityTimeout: affinity,
			PreferSameZone:  sameZone,
			PreferSameNode:  sameNode,
			IPVSScheduler:   svc.Annotations[IPVSSchedulerAnnotation],
			Protection:      protection,
		}
		if external {
			sp.NodePort = uint16(p.NodePort)
		}
		if externalLocal && typ == LoadBalancer {
			sp.HealthCheckPort = uint16(svc.Spec.HealthCheckNodePort)
		}
		sp.Endpoints, sp.TriggerTimeNanos = endpointsFor(p.Name, proto, eps)
		out = append(out, sp)
	}
	return out
}

// refusedPorts builds the ports of a Service that failed validation and has no good
// version: what can be read of its addresses and ports, with no endpoints, so that every
// address it names refuses its traffic. Ports that cannot be read at all are left out.
func refusedPorts(svc *v1.Service) []*ServicePort {
	readable := *svc
	readable.Spec.Ports = nil
	seen := map[ServicePortName]bool{}
	for _, p := range svc.Spec.Ports {
		proto := cmp.Or(p.Protocol, v1.ProtocolTCP)
		n := ServicePortName{Port: p.Name, Protocol: Protocol(proto)}
		if p.Port < 1 || p.Port > 65535 || !slices.Contains(protocols, proto) || seen[n] {
			continue
		}
		seen[n] = true
		if p.NodePort < 0 || p.NodePort > 65535 {
			p.NodePort = 0
		}
		readable.Spec.Ports = append(readable.Spec.Ports, p)
	}
	if h := readable.Spec.HealthCheckNodePort; h < 0 || h > 65535 {
		readable.Spec.HealthCheckNodePort = 0
	}
	return ServicePorts(&readable, nil)
}

func endpointsFor(portName string, proto Protocol, eps []*discovery.EndpointSlice) ([]Endpoint, int64) {
	// Sized once: grown by append, a Service's endpoints held twice what they need.
	n := 0
	for _, s := range eps {
		n += len(s.Endpoints)
	}
	out := make([]Endpoint, 0, n)
	var trigger int64
	for _, s := range eps {
		if s.AddressType != discovery.AddressTypeIPv4 && s.AddressType != discovery.AddressTypeIPv6 {
			continue
		}
		var port uint16
		found := false
		for _, sp := range s.Ports {
			spProto := TCP
			if sp.Protocol != nil {
				spProto = Protocol(*sp.Protocol)
			}
			spName := ""
			if sp.Name != nil {
				spName = *sp.Name
			}
			if spName == portName && spProto == proto && sp.Port != nil {
				port, found = uint16(*sp.Port), true
				break
			}
		}
		if !found {
			continue
		}
		if t, err := time.Parse(time.RFC3339Nano, s.Annotations[TriggerTimeAnnotation]); err == nil && t.UnixNano() > trigger {
			trigger = t.UnixNano()
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 {
				continue
			}
			a, ok := ParseAddr(e.Addresses[0])
			if !ok {
				continue
			}
			out = append(out, endpointOf(e, a.Unmap(), port))
		}
	}
	slices.SortStableFunc(out, func(a, b Endpoint) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return int(a.Port) - int(b.Port)
	})
	// The same endpoint can appear in two slices while the controller moves it; keep the
	// first (a stable sort keeps slice order) so the result does not flap.
	out = slices.CompactFunc(out, func(a, b Endpoint) bool { return a.Addr == b.Addr && a.Port == b.Port })
	if len(out) == 0 {
		return nil, trigger
	}
	return out, trigger
}

func endpointOf(e discovery.Endpoint, a netip.Addr, port uint16) Endpoint {
	// The API says a nil ready or serving condition means true, nil terminating means false.
	ep := Endpoint{
		Addr:        a,
		Port:        port,
		Ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
		Serving:     e.Conditions.Serving == nil || *e.Conditions.Serving,
		Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
	}
	if e.NodeName != nil {
		ep.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		ep.Zone = *e.Zone
	}
	if e.Hints != nil && len(e.Hints.ForZones)+len(e.Hints.ForNodes) > 0 {
		h := &Hints{}
		for _, z := range e.Hints.ForZones {
			h.Zones = append(h.Zones, z.Name)
		}
		for _, n := range e.Hints.ForNodes {
			h.Nodes = append(h.Nodes, n.Name)
		}
		slices.Sort(h.Zones)
		slices.Sort(h.Nodes)
		ep.Hints = h
	}
	return ep
}

func parseAddrs(ss []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		if a, ok := ParseAddr(s); ok {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// sourceRanges reads loadBalancerSourceRanges as kube-proxy does (ParsePrefix). A range that
// still cannot be understood closes the Service's LoadBalancer IPs to every source: the
// operator restricted who may connect, and a restriction read only in part must not turn
// into none at all (kube-proxy skips such a range, and with it possibly the whole firewall).
func sourceRanges(in []string) (ranges []netip.Prefix, closed bool) {
	for _, r := range in {
		p, ok := ParsePrefix(r)
		if !ok {
			return nil, true
		}
		ranges = append(ranges, p)
	}
	slices.SortFunc(ranges, comparePrefix)
	return slices.Compact(ranges), false
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
