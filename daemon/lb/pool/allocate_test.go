package pool

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The tests' address plan:
//
//	pool a     192.0.2.0/30 (4 addresses) and 2001:db8:a::/127 (2), autoAssign, on eth0
//	pool b     198.51.100.0/31 (2) and 2001:db8:b::1, autoAssign, on eth1
//	pool spare 203.0.113.0/31 (2), requested only, on eth2
const testPools = `
pools:
- {name: a, addresses: [192.0.2.0/30, "2001:db8:a::/127"], interfaces: [eth0]}
- {name: b, addresses: [198.51.100.0/31, "2001:db8:b::1"], interfaces: [eth1]}
- {name: spare, addresses: [203.0.113.0/31], interfaces: [eth2], autoAssign: false}
`

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type svcMod func(*v1.Service)

// lb is a LoadBalancer Service of edgegate's class in namespace default, single-stack IPv4,
// port 80/TCP, created `age` seconds after the epoch (lower is older).
func lb(name string, age int, mods ...svcMod) *v1.Service {
	class := Class
	single := v1.IPFamilyPolicySingleStack
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Second))},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol}, IPFamilyPolicy: &single,
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}},
		},
	}
	if ns, n, ok := strings.Cut(name, "/"); ok {
		s.Namespace, s.Name = ns, n
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func holding(ips ...string) svcMod {
	return func(s *v1.Service) {
		s.Status.LoadBalancer.Ingress = nil
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
		}
	}
}

func annotated(kv ...string) svcMod {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func loadBalancerIP(ip string) svcMod { return func(s *v1.Service) { s.Spec.LoadBalancerIP = ip } }

func families(policy v1.IPFamilyPolicy, fams ...v1.IPFamily) svcMod {
	return func(s *v1.Service) { s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = &policy, fams }
}

func class(c string) svcMod {
	return func(s *v1.Service) {
		if c == "" {
			s.Spec.LoadBalancerClass = nil
		} else {
			s.Spec.LoadBalancerClass = &c
		}
	}
}

func ofType(t v1.ServiceType) svcMod {
	return func(s *v1.Service) { s.Spec.Type, s.Spec.LoadBalancerClass = t, nil }
}

func ports(ps ...string) svcMod {
	return func(s *v1.Service) {
		s.Spec.Ports = nil
		for _, p := range ps {
			var port int32
			var proto string
			fmt.Sscanf(strings.Replace(p, "/", " ", 1), "%d %s", &port, &proto)
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Port: port, Protocol: v1.Protocol(proto)})
		}
	}
}

const v4, v6 = v1.IPv4Protocol, v1.IPv6Protocol

// dump renders assignments one per line: "ns/name: ip (pool), ..." or "ns/name: error".
func dump(as []Assignment) string {
	var b strings.Builder
	for _, a := range as {
		b.WriteString(a.Service + ":")
		for i, ip := range a.IPs {
			fmt.Fprintf(&b, " %s (%s)", ip, a.Pools[i])
		}
		if a.Err != nil {
			b.WriteString(" " + a.Err.Detail)
		}
		if a.Note != "" {
			b.WriteString(" [" + a.Note + "]")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func check(t *testing.T, pools Pools, opts Options, svcs []*v1.Service, want string) []Assignment {
	t.Helper()
	got := Allocate(pools, svcs, opts)
	want = strings.TrimLeft(want, "\n")
	if diff := cmp.Diff(want, dump(got)); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
	return got
}

// written returns the Services with each one's status set to its assignment, as the
// controller writes it.
func written(svcs []*v1.Service, as []Assignment) []*v1.Service {
	byName := map[string]Assignment{}
	for _, a := range as {
		byName[a.Service] = a
	}
	out := make([]*v1.Service, len(svcs))
	for i, s := range svcs {
		out[i] = s.DeepCopy()
		if a, ok := byName[s.Namespace+"/"+s.Name]; ok {
			out[i].Status.LoadBalancer.Ingress = Ingress(a.IPs)
		}
	}
	return out
}

func TestAllocateLowestFreeOldestFirst(t *testing.T) {
	pools := mustParse(t, testPools)
	// Listed out of order: the oldest Service gets the lowest address, whatever the order.
	check(t, pools, Options{}, []*v1.Service{lb("c", 3), lb("a", 1), lb("other/b", 2), lb("d", 4), lb("e", 5), lb("f", 6), lb("g", 7)}, `
default/a: 192.0.2.0 (a)
default/c: 192.0.2.2 (a)
default/d: 192.0.2.3 (a)
default/e: 198.51.100.0 (b)
default/f: 198.51.100.1 (b)
default/g: no free IPv4 address left in address pool "a", "b"
other/b: 192.0.2.1 (a)
`)
}

func TestAllocateKeepsValidAddresses(t *testing.T) {
	pools := mustParse(t, testPools)
	check(t, pools, Options{}, []*v1.Service{
		lb("new", 1),
		lb("keeps", 5, holding("192.0.2.3")),
		lb("from-b", 6, holding("198.51.100.1")),
		// Holds an address in no pool (a pool removed, or MetalLB's): moved into a pool.
		lb("stray", 2, holding("10.1.2.3")),
		// The newer of two Services claiming one address gives it up, and then waits its
		// turn behind the older "stray" for a free one.
		lb("dup-old", 3, holding("192.0.2.1")),
		lb("dup-new", 4, holding("192.0.2.1")),
		// An address of a family the Service does not have is not kept.
		lb("wrong-family", 7, holding("2001:db8:a::")),
		// Two addresses of one family: the first is kept.
		lb("two", 8, holding("198.51.100.0", "192.0.2.2")),
	}, `
default/dup-new: no free IPv4 address left in address pool "a", "b"
default/dup-old: 192.0.2.1 (a)
default/from-b: 198.51.100.1 (b)
default/keeps: 192.0.2.3 (a)
default/new: 192.0.2.0 (a)
default/stray: 192.0.2.2 (a)
default/two: 198.51.100.0 (b)
default/wrong-family: no free IPv4 address left in address pool "a", "b"
`)
}

func TestAllocateExhaustion(t *testing.T) {
	pools := mustParse(t, `pools: [{name: tiny, addresses: [192.0.2.0/31], interfaces: [eth0]}]`)
	svcs := []*v1.Service{lb("a", 1), lb("b", 2), lb("c", 3)}
	as := check(t, pools, Options{}, svcs, `
default/a: 192.0.2.0 (tiny)
default/b: 192.0.2.1 (tiny)
default/c: no free IPv4 address left in address pool "tiny"
`)
	err := as[2].Err
	if !errors.Is(err, ErrExhausted) {
		t.Errorf("error %v is not ErrExhausted", err)
	}
	if got, want := err.Error(), `service default/c: no free IPv4 address left in address pool "tiny"`; got != want {
		t.Errorf("event message %q, want %q", got, want)
	}
}

// Addresses go back to the pool when their Service goes, stops being a LoadBalancer, or
// stops being edgegate's; a waiting Service gets them.
func TestAllocateRelease(t *testing.T) {
	pools := mustParse(t, `pools: [{name: tiny, addresses: [192.0.2.0/31], interfaces: [eth0]}]`)
	svcs := []*v1.Service{lb("a", 1), lb("b", 2), lb("c", 3)}
	svcs = written(svcs, Allocate(pools, svcs, Options{}))

	t.Run("deleted", func(t *testing.T) {
		check(t, pools, Options{}, []*v1.Service{svcs[1], svcs[2]}, `
default/b: 192.0.2.1 (tiny)
default/c: 192.0.2.0 (tiny)
`)
	})
	t.Run("type changed", func(t *testing.T) {
		// The API server clears status.loadBalancer when the type changes.
		a := lb("a", 1, ofType(v1.ServiceTypeClusterIP))
		check(t, pools, Options{}, []*v1.Service{a, svcs[1], svcs[2]}, `
default/b: 192.0.2.1 (tiny)
default/c: 192.0.2.0 (tiny)
`)
	})
	t.Run("class changed", func(t *testing.T) {
		// loadBalancerClass is immutable: a new class means the type went away and came
		// back, which cleared the status.
		a := lb("a", 1, class("example.com/other"))
		check(t, pools, Options{}, []*v1.Service{a, svcs[1], svcs[2]}, `
default/b: 192.0.2.1 (tiny)
default/c: 192.0.2.0 (tiny)
`)
	})
	t.Run("pool shrunk", func(t *testing.T) {
		smaller := mustParse(t, `pools: [{name: tiny, addresses: [192.0.2.1], interfaces: [eth0]}]`)
		check(t, smaller, Options{}, svcs, `
default/a: no free IPv4 address left in address pool "tiny"
default/b: 192.0.2.1 (tiny)
default/c: no free IPv4 address left in address pool "tiny"
`)
	})
	t.Run("no pools", func(t *testing.T) {
		check(t, Pools{}, Options{}, svcs, `
default/a: no address pool assigns IPv4 addresses automatically (autoAssign); request an IP or name a pool with edgegate.dev/address-pool
default/b: no address pool assigns IPv4 addresses automatically (autoAssign); request an IP or name a pool with edgegate.dev/address-pool
default/c: no address pool assigns IPv4 addresses automatically (autoAssign); request an IP or name a pool with edgegate.dev/address-pool
`)
	})
}

func TestAllocateClasses(t *testing.T) {
	pools := mustParse(t, testPools)
	svcs := []*v1.Service{
		lb("ours", 1),
		lb("unset", 2, class("")),
		lb("other", 3, class("example.com/lb")),
		lb("cluster-ip", 4, ofType(v1.ServiceTypeClusterIP)),
		lb("node-port", 5, ofType(v1.ServiceTypeNodePort)),
	}
	check(t, pools, Options{}, svcs, `
default/ours: 192.0.2.0 (a)
`)
	check(t, pools, Options{DefaultClass: true}, svcs, `
default/ours: 192.0.2.0 (a)
default/unset: 192.0.2.1 (a)
`)
	// Addresses another load balancer announces are never handed out, nor given when asked
	// for.
	svcs = []*v1.Service{
		lb("metallb", 1, class(""), holding("192.0.2.0")),
		lb("ours", 2),
		lb("wants", 3, loadBalancerIP("192.0.2.0")),
	}
	check(t, pools, Options{}, svcs, `
default/ours: 192.0.2.1 (a)
default/wants: requested IP 192.0.2.0 is in use by Service default/metallb of another load balancer class
`)
}

func TestAllocateRequested(t *testing.T) {
	pools := mustParse(t, testPools)
	const ipsAnn, metallbAnn = AnnotationIPs, MetalLBAnnotationIPs
	as := check(t, pools, Options{}, []*v1.Service{
		// Older, but it takes any address: the Service that asked for .0 gets it.
		lb("auto", 1),
		lb("spec", 9, loadBalancerIP("192.0.2.0")),
		lb("annotation", 3, annotated(ipsAnn, "198.51.100.1")),
		lb("metallb", 4, annotated(metallbAnn, "192.0.2.3")),
		// Pools with autoAssign false give requested addresses.
		lb("spare", 5, annotated(ipsAnn, " 203.0.113.1 ")),
		lb("nowhere", 6, loadBalancerIP("10.9.9.9")),
		lb("taken", 7, annotated(ipsAnn, "192.0.2.3")),
		lb("agree", 8, loadBalancerIP("198.51.100.0"), annotated(ipsAnn, "198.51.100.0", metallbAnn, "198.51.100.0")),
		lb("disagree", 10, loadBalancerIP("192.0.2.1"), annotated(ipsAnn, "192.0.2.2")),
		lb("garbage", 11, annotated(ipsAnn, "192.0.2.1,,")),
		lb("two-v4", 12, annotated(ipsAnn, "192.0.2.1,192.0.2.2")),
		lb("v6-on-v4", 13, annotated(ipsAnn, "2001:db8:a::1")),
		lb("list-in-spec", 14, loadBalancerIP("192.0.2.1,2001:db8:a::1")),
	}, `
default/agree: 198.51.100.0 (b)
default/annotation: 198.51.100.1 (b)
default/auto: 192.0.2.1 (a)
default/disagree: annotation edgegate.dev/load-balancer-ips asks for 192.0.2.2 but spec.loadBalancerIP asks for 192.0.2.1
default/garbage: annotation edgegate.dev/load-balancer-ips: "192.0.2.1,,": empty address
default/list-in-spec: spec.loadBalancerIP "192.0.2.1,2001:db8:a::1": one address only; request more with the edgegate.dev/load-balancer-ips annotation
default/metallb: 192.0.2.3 (a)
default/nowhere: requested IP 10.9.9.9 is not in any address pool
default/spare: 203.0.113.1 (spare)
default/spec: 192.0.2.0 (a)
default/taken: requested IP 192.0.2.3 is in use by Service default/metallb (sharing needs the same edgegate.dev/allow-shared-ip key on both)
default/two-v4: annotation edgegate.dev/load-balancer-ips: "192.0.2.1,192.0.2.2": 192.0.2.1 and 192.0.2.2 are both IPv4: at most one address per family
default/v6-on-v4: requested IP 2001:db8:a::1 is IPv6, but the Service's IP families are [IPv4]
`)
	kinds := map[string]error{"disagree": ErrInvalid, "nowhere": ErrNotInPool, "taken": ErrInUse, "v6-on-v4": ErrInvalid}
	for _, a := range as {
		_, name, _ := strings.Cut(a.Service, "/")
		if want, ok := kinds[name]; ok && !errors.Is(a.Err, want) {
			t.Errorf("%s: error %v is not %v", a.Service, a.Err, want)
		}
	}
}

// A Service that changes the address it asks for moves to it, and frees the old one.
func TestAllocateRequestChanged(t *testing.T) {
	pools := mustParse(t, testPools)
	check(t, pools, Options{}, []*v1.Service{
		lb("moves", 1, holding("192.0.2.0"), loadBalancerIP("192.0.2.2")),
		lb("waits", 2),
	}, `
default/moves: 192.0.2.2 (a)
default/waits: 192.0.2.0 (a)
`)
}

func TestAllocateNamedPool(t *testing.T) {
	pools := mustParse(t, testPools)
	check(t, pools, Options{}, []*v1.Service{
		lb("spare", 1, annotated(AnnotationPool, "spare")),
		lb("metallb", 2, annotated(MetalLBAnnotationPool, "b")),
		lb("unknown", 3, annotated(AnnotationPool, "nope")),
		lb("both-disagree", 4, annotated(AnnotationPool, "a", MetalLBAnnotationPool, "b")),
		lb("wrong-pool", 5, annotated(AnnotationPool, "b"), loadBalancerIP("192.0.2.1")),
		lb("right-pool", 6, annotated(AnnotationPool, "spare"), loadBalancerIP("203.0.113.0")),
		// Holds an address of another pool: moves into the one it names.
		lb("moves", 7, annotated(AnnotationPool, "spare"), holding("192.0.2.0")),
		lb("spare-full", 8, annotated(AnnotationPool, "spare")),
		lb("no-v6-in-spare", 9, annotated(AnnotationPool, "spare"), families(v1.IPFamilyPolicySingleStack, v6)),
	}, `
default/both-disagree: annotations edgegate.dev/address-pool ("a") and metallb.universe.tf/address-pool ("b") disagree
default/metallb: 198.51.100.0 (b)
default/moves: no free IPv4 address left in address pool "spare"
default/no-v6-in-spare: address pool "spare" has no IPv6 addresses
default/right-pool: 203.0.113.0 (spare)
default/spare: 203.0.113.1 (spare)
default/spare-full: no free IPv4 address left in address pool "spare"
default/unknown: address pool "nope" (annotation edgegate.dev/address-pool) does not exist
default/wrong-pool: requested IP 192.0.2.1 is in address pool "a", not in "b" named by annotation edgegate.dev/address-pool
`)
}

func TestAllocateNoAutoAssignPool(t *testing.T) {
	pools := mustParse(t, `pools: [{name: manual, addresses: [192.0.2.0/30], interfaces: [eth0], autoAssign: false}]`)
	check(t, pools, Options{}, []*v1.Service{lb("a", 1), lb("b", 2, annotated(AnnotationPool, "manual"))}, `
default/a: no address pool assigns IPv4 addresses automatically (autoAssign); request an IP or name a pool with edgegate.dev/address-pool
default/b: 192.0.2.0 (manual)
`)
}

func TestAllocateDualStack(t *testing.T) {
	pools := mustParse(t, testPools)
	check(t, pools, Options{}, []*v1.Service{
		lb("require", 1, families(v1.IPFamilyPolicyRequireDualStack, v4, v6)),
		// The Service's family order is the status order. Pool a's IPv6 addresses are gone
		// (to "require" and to "requested", whose request went first): pool b's.
		lb("v6-first", 2, families(v1.IPFamilyPolicyRequireDualStack, v6, v4)),
		// IPv6 is used up now (pool a has 2, pool b 1).
		lb("v6-only", 3, families(v1.IPFamilyPolicySingleStack, v6)),
		// PreferDualStack takes IPv4 alone, and says so.
		lb("prefer", 4, families(v1.IPFamilyPolicyPreferDualStack, v4, v6)),
		// RequireDualStack fails and keeps no IPv4 address either: "prefer-late" gets the
		// 192.0.2.3 it would have had.
		lb("require-late", 5, families(v1.IPFamilyPolicyRequireDualStack, v4, v6)),
		lb("prefer-late", 6, families(v1.IPFamilyPolicyPreferDualStack, v6, v4)),
		lb("v4", 7),
		lb("requested", 8, families(v1.IPFamilyPolicyRequireDualStack, v4, v6), annotated(AnnotationIPs, "2001:db8:a::1, 203.0.113.0")),
		lb("requested-half", 9, families(v1.IPFamilyPolicyRequireDualStack, v4, v6), annotated(AnnotationIPs, "203.0.113.1")),
		lb("prefer-half", 10, families(v1.IPFamilyPolicyPreferDualStack, v4, v6), annotated(AnnotationIPs, "203.0.113.1")),
	}, `
default/prefer: 192.0.2.2 (a) [PreferDualStack, served without: no free IPv6 address left in address pool "a", "b"]
default/prefer-half: 203.0.113.1 (spare)
default/prefer-late: 192.0.2.3 (a) [PreferDualStack, served without: no free IPv6 address left in address pool "a", "b"]
default/requested: 203.0.113.0 (spare) 2001:db8:a::1 (a)
default/requested-half: requested IPs 203.0.113.1: a RequireDualStack Service needs one per family ([IPv4,IPv6])
default/require: 192.0.2.0 (a) 2001:db8:a:: (a)
default/require-late: no free IPv6 address left in address pool "a", "b"
default/v4: 198.51.100.0 (b)
default/v6-first: 2001:db8:b::1 (b) 192.0.2.1 (a)
default/v6-only: no free IPv6 address left in address pool "a", "b"
`)
}

// Services with the same allow-shared-ip key share an address when their ports differ, as
// in MetalLB; the lowest address they may share comes before a free one.
func TestAllocateSharing(t *testing.T) {
	pools := mustParse(t, `pools: [{name: a, addresses: [192.0.2.0/29], interfaces: [eth0]}]`)
	share := func(key string) svcMod { return annotated(AnnotationSharing, key) }
	svcs := []*v1.Service{
		lb("http", 1, share("web"), ports("80/TCP")),
		lb("https", 2, share("web"), ports("443/TCP", "443/UDP")),
		lb("dns", 3, annotated(MetalLBAnnotationSharing, "web"), ports("53/UDP", "53/TCP")),
		// Port 80/TCP is taken on .0: the next address.
		lb("clash", 4, share("web"), ports("80/TCP")),
		// Another key shares neither .0 nor .1.
		lb("smtp", 5, share("mail"), ports("25/TCP")),
		lb("imap", 6, share("mail"), ports("143/TCP")),
		lb("alone", 7, ports("8080/TCP")),
	}
	check(t, pools, Options{}, svcs, `
default/alone: 192.0.2.3 (a)
default/clash: 192.0.2.1 (a)
default/dns: 192.0.2.0 (a)
default/http: 192.0.2.0 (a)
default/https: 192.0.2.0 (a)
default/imap: 192.0.2.2 (a)
default/smtp: 192.0.2.2 (a)
`)
	svcs = written(svcs, Allocate(pools, svcs, Options{}))
	svcs = append(svcs,
		lb("req-shares", 10, share("web"), ports("8443/TCP"), loadBalancerIP("192.0.2.0")),
		lb("req-port", 11, share("web"), ports("443/TCP"), loadBalancerIP("192.0.2.0")),
		lb("req-key", 12, share("web"), ports("993/TCP"), loadBalancerIP("192.0.2.2")),
		lb("req-nokey", 13, ports("9000/TCP"), loadBalancerIP("192.0.2.2")),
		lb("req-alone", 14, share("web"), ports("9000/TCP"), loadBalancerIP("192.0.2.3")),
	)
	check(t, pools, Options{}, svcs, `
default/alone: 192.0.2.3 (a)
default/clash: 192.0.2.1 (a)
default/dns: 192.0.2.0 (a)
default/http: 192.0.2.0 (a)
default/https: 192.0.2.0 (a)
default/imap: 192.0.2.2 (a)
default/req-alone: requested IP 192.0.2.3 is in use by Service default/alone (sharing needs the same edgegate.dev/allow-shared-ip key on both)
default/req-key: requested IP 192.0.2.2 is in use by Service default/smtp, whose edgegate.dev/allow-shared-ip key "mail" differs from "web"
default/req-nokey: requested IP 192.0.2.2 is in use by Service default/smtp (sharing needs the same edgegate.dev/allow-shared-ip key on both)
default/req-port: requested IP 192.0.2.0 is in use by Service default/https, which also uses port 443/TCP
default/req-shares: 192.0.2.0 (a)
default/smtp: 192.0.2.2 (a)
`)
}

// avoidBuggyIPs turned on moves Services off .0 and .255, and refuses them when requested.
func TestAllocateAvoidBuggyIPs(t *testing.T) {
	pools := mustParse(t, `pools: [{name: a, addresses: [192.0.2.254-192.0.3.1], interfaces: [eth0], avoidBuggyIPs: true}]`)
	check(t, pools, Options{}, []*v1.Service{
		lb("held-255", 1, holding("192.0.2.255")),
		lb("next", 2),
		lb("asks-0", 3, loadBalancerIP("192.0.3.0")),
	}, `
default/asks-0: requested IP 192.0.3.0 ends in .0 or .255, which address pool "a" avoids (avoidBuggyIPs)
default/held-255: 192.0.2.254 (a)
default/next: 192.0.3.1 (a)
`)
}

// A PreferDualStack Service left without one family gets it once an address frees up, and
// keeps the one it had.
func TestAllocatePreferDualStackCompletes(t *testing.T) {
	pools := mustParse(t, `pools: [{name: a, addresses: [192.0.2.0/30, "2001:db8::1"], interfaces: [eth0]}]`)
	svcs := []*v1.Service{
		lb("v6", 1, families(v1.IPFamilyPolicySingleStack, v6)),
		lb("prefer", 2, families(v1.IPFamilyPolicyPreferDualStack, v4, v6)),
	}
	svcs = written(svcs, check(t, pools, Options{}, svcs, `
default/prefer: 192.0.2.0 (a) [PreferDualStack, served without: no free IPv6 address left in address pool "a"]
default/v6: 2001:db8::1 (a)
`))
	check(t, pools, Options{}, []*v1.Service{svcs[1]}, `
default/prefer: 192.0.2.0 (a) 2001:db8::1 (a)
`)
}

func TestIngress(t *testing.T) {
	ing := Ingress([]netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")})
	if len(ing) != 2 || ing[0].IP != "192.0.2.1" || ing[1].IP != "2001:db8::1" || *ing[0].IPMode != v1.LoadBalancerIPModeVIP || *ing[1].IPMode != v1.LoadBalancerIPModeVIP {
		t.Fatalf("Ingress = %+v", ing)
	}
	proxy := v1.LoadBalancerIPModeProxy
	for _, tc := range []struct {
		name string
		have []v1.LoadBalancerIngress
		want bool
	}{
		{"same", Ingress([]netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")}), true},
		{"no ipMode (MetalLB's)", []v1.LoadBalancerIngress{{IP: "192.0.2.1"}, {IP: "2001:db8::1"}}, false},
		{"ipMode Proxy", []v1.LoadBalancerIngress{{IP: "192.0.2.1", IPMode: &proxy}, ing[1]}, false},
		{"order", []v1.LoadBalancerIngress{ing[1], ing[0]}, false},
		{"fewer", ing[:1], false},
		{"hostname", []v1.LoadBalancerIngress{ing[0], ing[1], {Hostname: "lb.example.com"}}, false},
		{"ports", []v1.LoadBalancerIngress{ing[0], {IP: "2001:db8::1", IPMode: ing[1].IPMode, Ports: []v1.PortStatus{{Port: 80}}}}, false},
		{"none", nil, false},
	} {
		if got := IngressEqual(tc.have, ing); got != tc.want {
			t.Errorf("%s: IngressEqual = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !IngressEqual(nil, Ingress(nil)) {
		t.Error("no addresses differ from an empty status")
	}
}
