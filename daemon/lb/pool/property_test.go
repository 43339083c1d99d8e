package pool

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// randomServices makes n Services that contend for few addresses: requests, named pools,
// sharing keys, dual-stack, other classes, and statuses holding random addresses.
func randomServices(r *rand.Rand, n int) []*v1.Service {
	addrs := []string{"192.0.2.0", "192.0.2.1", "192.0.2.3", "198.51.100.0", "198.51.100.1", "203.0.113.0", "203.0.113.1",
		"2001:db8:a::", "2001:db8:a::1", "2001:db8:b::1", "10.0.0.1", "2001:db8:ff::1"}
	pick := func() string { return addrs[r.IntN(len(addrs))] }
	var out []*v1.Service
	for i := range n {
		var mods []svcMod
		switch r.IntN(10) {
		case 0:
			mods = append(mods, class(""))
		case 1:
			mods = append(mods, class("example.com/other"))
		case 2:
			mods = append(mods, ofType(v1.ServiceTypeClusterIP))
		}
		switch r.IntN(5) {
		case 0:
			mods = append(mods, families(v1.IPFamilyPolicyRequireDualStack, v4, v6))
		case 1:
			mods = append(mods, families(v1.IPFamilyPolicyPreferDualStack, v6, v4))
		case 2:
			mods = append(mods, families(v1.IPFamilyPolicySingleStack, v6))
		}
		switch r.IntN(6) {
		case 0:
			mods = append(mods, loadBalancerIP(pick()))
		case 1:
			mods = append(mods, annotated(AnnotationIPs, pick()+","+pick()))
		}
		if r.IntN(4) == 0 {
			mods = append(mods, annotated(AnnotationPool, []string{"a", "b", "spare", "nope"}[r.IntN(4)]))
		}
		if r.IntN(3) == 0 {
			mods = append(mods, annotated(AnnotationSharing, []string{"k1", "k2"}[r.IntN(2)]))
		}
		mods = append(mods, ports([]string{"80/TCP", "443/TCP", "53/UDP"}[r.IntN(3)], []string{"8080/TCP", "53/TCP"}[r.IntN(2)]))
		var held []string
		for range r.IntN(3) {
			held = append(held, pick())
		}
		mods = append(mods, holding(held...))
		out = append(out, lb(fmt.Sprintf("ns%d/s%d", r.IntN(3), i), r.IntN(5), mods...))
	}
	return out
}

// checkInvariants fails for any assignment that breaks the allocator's rules.
func checkInvariants(t *testing.T, pools Pools, opts Options, svcs []*v1.Service, as []Assignment) {
	t.Helper()
	byName := map[string]*v1.Service{}
	foreign := map[netip.Addr]bool{}
	for _, s := range svcs {
		byName[s.Namespace+"/"+s.Name] = s
		if IsLoadBalancer(s) && !Ours(s, opts.DefaultClass) {
			for _, ing := range s.Status.LoadBalancer.Ingress {
				foreign[netip.MustParseAddr(ing.IP)] = true
			}
		}
	}
	holders := map[netip.Addr][]*request{}
	for _, a := range as {
		s := byName[a.Service]
		req := newRequest(s)
		if (a.Err == nil) != (len(a.IPs) > 0) || len(a.IPs) != len(a.Pools) {
			t.Errorf("%s: IPs %v pools %v error %v", a.Service, a.IPs, a.Pools, a.Err)
		}
		seen := map[Family]bool{}
		for i, ip := range a.IPs {
			p, ok := pools.Lookup(ip)
			switch {
			case !ok || p.Name != a.Pools[i] || !p.Allocatable(ip):
				t.Errorf("%s: %s is not an allocatable address of pool %q", a.Service, ip, a.Pools[i])
			case req.pool != "" && p.Name != req.pool:
				t.Errorf("%s: %s is from pool %q, the Service names %q", a.Service, ip, p.Name, req.pool)
			case req.ips != nil && !slices.Contains(req.ips, ip):
				t.Errorf("%s: %s was not requested (%v)", a.Service, ip, req.ips)
			case seen[familyOf(ip)] || !slices.Contains(req.families, familyOf(ip)):
				t.Errorf("%s: %s: a second address of its family, or a family the Service lacks", a.Service, ip)
			case foreign[ip]:
				t.Errorf("%s: %s belongs to another load balancer class", a.Service, ip)
			}
			seen[familyOf(ip)] = true
			holders[ip] = append(holders[ip], req)
		}
		if req.ips != nil && a.Err == nil && len(a.IPs) != len(req.ips) {
			t.Errorf("%s: got %v, requested %v", a.Service, a.IPs, req.ips)
		}
	}
	for ip, hs := range holders {
		for i, x := range hs {
			for _, y := range hs[i+1:] {
				if x.sharing == "" || x.sharing != y.sharing || portsOverlap(x.ports, y.ports) {
					t.Errorf("%s and %s both hold %s (keys %q, %q; ports %v, %v)", x.name, y.name, ip, x.sharing, y.sharing, x.ports, y.ports)
				}
			}
		}
	}
}

// The same Services in any order give the same allocation (two allocators agree); the
// result follows every rule; allocating again from the written result keeps every address
// and settles within a few rounds (only Services that failed or lacked a family gain).
func TestAllocateProperties(t *testing.T) {
	pools := mustParse(t, testPools)
	r := rand.New(rand.NewPCG(8, 1))
	for round := range 1000 {
		svcs := randomServices(r, 1+r.IntN(16))
		opts := Options{DefaultClass: r.IntN(2) == 0}
		want := Allocate(pools, svcs, opts)
		shuffled := slices.Clone(svcs)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if diff := cmp.Diff(dump(want), dump(Allocate(pools, shuffled, opts))); diff != "" {
			t.Fatalf("round %d: the order of the Services changed the result (-first +shuffled):\n%s", round, diff)
		}
		checkInvariants(t, pools, opts, svcs, want)
		prev := want
		settled := false
		for step := 0; step < 5 && !settled; step++ {
			svcs = written(svcs, prev)
			next := Allocate(pools, svcs, opts)
			checkInvariants(t, pools, opts, svcs, next)
			for i, a := range prev {
				for _, ip := range a.IPs {
					if !slices.Contains(next[i].IPs, ip) {
						t.Fatalf("round %d step %d: %s lost %s it held:\nbefore\n%safter\n%s", round, step, a.Service, ip, dump(prev), dump(next))
					}
				}
			}
			settled = dump(next) == dump(prev)
			prev = next
		}
		if !settled {
			t.Fatalf("round %d: no fixed point after 5 rounds:\n%s", round, dump(prev))
		}
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
	}
}
