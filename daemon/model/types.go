// Package model turns Kubernetes Services and EndpointSlices into the proxy's own view of the
// world: one ServicePort per (service, port) with the endpoints that back it. It is pure: no
// syscalls, no clocks, no goroutines. Everything the data plane decides is derived from a
// Snapshot by package plan.
package model

import (
	"fmt"
	"net/netip"
	"strings"
)

// Protocol is the L4 protocol of a service port, as Kubernetes spells it.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Number is the IANA protocol number used in packet headers.
func (p Protocol) Number() uint8 {
	switch p {
	case TCP:
		return 6
	case UDP:
		return 17
	case SCTP:
		return 132
	}
	return 0
}

// Lower is the protocol as nftables and chain names write it.
func (p Protocol) Lower() string { return strings.ToLower(string(p)) }

// Family is an IP family.
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// FamilyOf returns the family of an address.
func FamilyOf(a netip.Addr) Family {
	if a.Is4() || a.Is4In6() {
		return IPv4
	}
	return IPv6
}

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// ServiceName identifies a Service.
type ServiceName struct {
	Namespace, Name string
}

func (n ServiceName) String() string { return n.Namespace + "/" + n.Name }

// ServicePortName identifies one port of a Service, as kube-proxy does.
type ServicePortName struct {
	ServiceName
	Port     string // the port's name, "" for a single unnamed port
	Protocol Protocol
}

// String is kube-proxy's spelling: ns/name:port, or ns/name for an unnamed port.
func (n ServicePortName) String() string {
	if n.Port == "" {
		return n.Namespace + "/" + n.Name
	}
	return fmt.Sprintf("%s/%s:%s", n.Namespace, n.Name, n.Port)
}

// Type is the Service type.
type Type string

const (
	ClusterIP    Type = "ClusterIP"
	NodePort     Type = "NodePort"
	LoadBalancer Type = "LoadBalancer"
)

// IngressIP is a LoadBalancer ingress address from the Service status.
type IngressIP struct {
	Addr netip.Addr
	// Proxy is true for ipMode Proxy: the load balancer proxies to the node, so the node must
	// not capture traffic for this address itself.
	Proxy bool
}

// ServicePort is one port of a Service with every field the data plane depends on.
// Slices in it are sorted, so two ServicePorts built from equal objects compare equal.
type ServicePort struct {
	Name     ServicePortName
	Type     Type
	Port     uint16
	NodePort uint16 // 0 when none

	ClusterIPs      []netip.Addr // at most one per family; empty for headless services
	ExternalIPs     []netip.Addr
	LoadBalancerIPs []IngressIP
	SourceRanges    []netip.Prefix // loadBalancerSourceRanges
	// SourcesClosed: loadBalancerSourceRanges holds a range that cannot be understood, so
	// the LoadBalancer IPs refuse every source (SourceRanges is then empty).
	SourcesClosed    bool
	ExternalLocal    bool       // externalTrafficPolicy: Local
	InternalLocal    bool       // internalTrafficPolicy: Local
	HealthCheckPort  uint16     // healthCheckNodePort, for eTP Local
	AffinityTimeout  uint32     // seconds; 0 means no ClientIP affinity
	PreferSameZone   bool       // trafficDistribution PreferClose / PreferSameZone
	PreferSameNode   bool       // trafficDistribution PreferSameNode
	Endpoints        []Endpoint // sorted by address, then port
	TriggerTimeNanos int64      // newest endpoints.kubernetes.io/last-change-trigger-time, 0 if unknown
	// IPVSScheduler is the Service's IPVSSchedulerAnnotation as written (ipvs mode checks it);
	// empty without one.
	IPVSScheduler string
	// Protection guards the external frontends (ProtectionAnnotation); nil without one.
	Protection *Protection
}

// IPVSSchedulerAnnotation on a Service picks its IPVS scheduler instead of --ipvs-scheduler.
const IPVSSchedulerAnnotation = "edgegate.dev/ipvs-scheduler"

// annotationsRead are the Service annotations the data plane depends on: a change of any
// other annotation changes nothing.
var annotationsRead = []string{IPVSSchedulerAnnotation, ProtectionAnnotation}

// Endpoint is one backend address:port of a ServicePort. A cluster has one per Pod and
// Service port, 100,000 at 10,000 Services: it is kept to 72 bytes, the rare topology
// hints behind a pointer.
type Endpoint struct {
	Addr        netip.Addr
	Port        uint16
	Ready       bool
	Serving     bool
	Terminating bool
	NodeName    string
	Zone        string
	Hints       *Hints // nil without topology hints
}

// Hints are an endpoint's topology hints (forZones, forNodes), each sorted.
type Hints struct {
	Zones []string
	Nodes []string
}

// ZoneHints returns the zones the endpoint is hinted for, if any.
func (e Endpoint) ZoneHints() []string {
	if e.Hints == nil {
		return nil
	}
	return e.Hints.Zones
}

// NodeHints returns the nodes the endpoint is hinted for, if any.
func (e Endpoint) NodeHints() []string {
	if e.Hints == nil {
		return nil
	}
	return e.Hints.Nodes
}

func (e Endpoint) String() string { return netip.AddrPortFrom(e.Addr, e.Port).String() }

// ClusterIP returns the service's cluster IP of the given family, if any.
func (sp *ServicePort) ClusterIP(f Family) (netip.Addr, bool) {
	for _, a := range sp.ClusterIPs {
		if FamilyOf(a) == f {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Firewalled reports whether loadBalancerSourceRanges restrict who reaches the LoadBalancer
// IPs: only the ranges of an address's own family pass, none when SourcesClosed.
func (sp *ServicePort) Firewalled() bool { return len(sp.SourceRanges) > 0 || sp.SourcesClosed }

// UsesExternal reports whether the port can be reached from outside the cluster
// (NodePort, external IPs or LoadBalancer IPs).
func (sp *ServicePort) UsesExternal() bool {
	return sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0
}
