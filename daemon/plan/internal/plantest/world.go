package plantest

import (
	"net/netip"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
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

// The node's addresses and configuration, the demo's endpoints and clients.
var (
	NodeAddrs = []string{"10.200.1.1", "10.200.2.1", "127.0.0.1", "fd00:200:1::1", "fd00:200:2::1", "::1"}
	Cfg       = plan.Config{NodeName: "gw", Zone: "z1"}
)

const (
	Ep1, Ep2, Ep3 = "10.200.2.11:8080", "10.200.2.12:8080", "10.200.2.13:8080"
	Client        = "10.200.1.2"
	Stranger      = "198.51.100.7"
)

// Masq is an endpoint's result when the connection is masqueraded.
func Masq(ep string) string { return ep + " (masqueraded)" }

// Web is the demo's web service (TCP 80 -> 8080, node port 30080) as a ClusterIP service;
// modifiers make it more.
func Web(mods ...func(*v1.Service)) *v1.Service {
	return mt.Service("default", "web", "10.96.0.10",
		append([]func(*v1.Service){mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080)}, mods...)...)
}

// NodePort makes a Service a NodePort one.
func NodePort(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }

// WebV4 is Web's IPv4 slice; WebV4Ready has the three demo backends, ready.
func WebV4(eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return mt.Slice("default", "web-v4", "web", "http", v1.ProtocolTCP, 8080, eps...)
}

// WebV4Ep2Local is WebV4Ready with its second endpoint on this node (Cfg's gw).
func WebV4Ep2Local() *discovery.EndpointSlice {
	return WebV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")),
		mt.EP("10.200.2.13", mt.OnNode("backend-3")))
}

// WebV4Ready is WebV4 with the three demo backends, ready, on other nodes.
func WebV4Ready() *discovery.EndpointSlice {
	return WebV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("backend-2")),
		mt.EP("10.200.2.13", mt.OnNode("backend-3")))
}

// All lists results: All(Ep1, Masq(Ep2)).
func All(results ...string) []string { return results }

// MustPrefixes parses prefixes.
func MustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
