package modeltest

import (
	"fmt"
	"math/rand"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// RandomWorld draws the desired states of the dataplanes' convergence tests: up to six
// services svc0-svc5 in namespace "ns", each with a random subset of endpoints, policies
// and affinity, so consecutive states add, change and remove chains, map elements,
// counters and affinity sets. Every other endpoint is on node "gw" (only those hairpin),
// the rest on "worker". A service's endpoints are in slice <service>-v4 (and -v6).
type RandomWorld struct {
	// DualStack: a service is dual-stack at random, with IPv6 endpoints of its own, and
	// LoadBalancer IPs and source ranges are of both families.
	DualStack bool
	// Shared: every service picks its IPv4 endpoints from one pool (overlapping windows),
	// so services share some.
	Shared bool
}

// Objects draws one state's Services and EndpointSlices.
func (w RandomWorld) Objects(r *rand.Rand) []any {
	var objs []any
	for i := 0; i < 6; i++ {
		if r.Intn(4) == 0 {
			continue
		}
		name := fmt.Sprintf("svc%d", i)
		proto := v1.ProtocolTCP
		if i%3 == 2 {
			proto = v1.ProtocolUDP
		}
		mods := []func(*v1.Service){Port("p", proto, int32(80+i), 8080, int32(30000+i))}
		dual := w.DualStack && r.Intn(2) == 0
		if dual {
			mods = append(mods, DualStack(fmt.Sprintf("fd00:96::%d", 10+i)))
		}
		if r.Intn(2) == 0 {
			mods = append(mods, Affinity(int32(60*(1+r.Intn(3)))))
		}
		if r.Intn(2) == 0 {
			lb, ranges := []string{fmt.Sprintf("203.0.113.%d", 10+i)}, []string{"10.0.0.0/8"}
			if w.DualStack {
				lb, ranges = append(lb, fmt.Sprintf("2001:db8:113::%d", 10+i)), append(ranges, "2001:db8::/32")
			}
			mods = append(mods, LoadBalancerIPs(lb...), SourceRanges(ranges...))
		} else {
			mods = append(mods, Type(v1.ServiceTypeNodePort))
		}
		if r.Intn(3) == 0 {
			mods = append(mods, ExternalLocal(int32(32000+i)))
		}
		objs = append(objs, Service("ns", name, fmt.Sprintf("10.96.0.%d", 10+i), mods...))
		var v4, v6 []discovery.Endpoint
		for e := 0; e < 4; e++ {
			node := OnNode("worker")
			if e%2 == 0 {
				node = OnNode("gw")
			}
			if r.Intn(2) == 0 {
				addr := fmt.Sprintf("10.200.%d.%d", i, 10+e)
				if w.Shared {
					addr = fmt.Sprintf("10.200.0.%d", 10+(2*i+e)%12)
				}
				v4 = append(v4, EP(addr, node))
			}
			if dual && r.Intn(2) == 0 {
				v6 = append(v6, EP(fmt.Sprintf("fd00:200:%d::%d", i, 10+e), node))
			}
		}
		objs = append(objs, Slice("ns", name+"-v4", name, "p", proto, 8080, v4...))
		if len(v6) > 0 {
			objs = append(objs, Slice("ns", name+"-v6", name, "p", proto, 8080, v6...))
		}
	}
	return objs
}
