package pool

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Class is edgegate's loadBalancerClass.
const Class = "edgegate.dev/lb"

// Annotations a Service uses to ask for addresses. MetalLB's equivalents are read too, so
// Services move from MetalLB to edgegate unchanged; when both are set they must agree.
const (
	// AnnotationIPs requests addresses: comma-separated, at most one per family.
	AnnotationIPs = "edgegate.dev/load-balancer-ips"
	// AnnotationPool names the pool to allocate from, autoAssign or not.
	AnnotationPool = "edgegate.dev/address-pool"
	// AnnotationSharing lets Services with the same key share an address when their ports
	// differ.
	AnnotationSharing = "edgegate.dev/allow-shared-ip"

	MetalLBAnnotationIPs     = "metallb.universe.tf/loadBalancerIPs"
	MetalLBAnnotationPool    = "metallb.universe.tf/address-pool"
	MetalLBAnnotationSharing = "metallb.universe.tf/allow-shared-ip"
)

// Family is an IP family.
type Family int

const (
	IPv4 Family = iota
	IPv6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

func familyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// IsLoadBalancer reports whether svc is of type LoadBalancer.
func IsLoadBalancer(svc *v1.Service) bool {
	return svc.Spec.Type == v1.ServiceTypeLoadBalancer
}

// Ours reports whether edgegate allocates for svc: a LoadBalancer of edgegate's class, or of
// no class when edgegate is the cluster's default load balancer.
func Ours(svc *v1.Service, defaultClass bool) bool {
	if !IsLoadBalancer(svc) {
		return false
	}
	if c := svc.Spec.LoadBalancerClass; c != nil {
		return *c == Class
	}
	return defaultClass
}

// port is what two Services sharing an address must not both use.
type port struct {
	proto v1.Protocol
	port  int32
}

// request is what one Service asks for.
type request struct {
	svc  *v1.Service
	name string // namespace/name
	// families in the Service's order (spec.ipFamilies); all says whether each must get an
	// address (SingleStack, RequireDualStack) or one is enough (PreferDualStack).
	families []Family
	all      bool
	// ips are the requested addresses, ordered like families; nil when none were requested.
	ips     []netip.Addr
	pool    string
	sharing string
	ports   []port
	err     error // the request itself is unusable
}

func newRequest(svc *v1.Service) *request {
	r := &request{svc: svc, name: svc.Namespace + "/" + svc.Name}
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		r.ports = append(r.ports, port{proto, p.Port})
	}
	var err error
	if r.ips, err = requestedIPs(svc); err != nil {
		r.err = err
		return r
	}
	if r.pool, err = annotation(svc, AnnotationPool, MetalLBAnnotationPool); err != nil {
		r.err = err
		return r
	}
	if r.sharing, err = annotation(svc, AnnotationSharing, MetalLBAnnotationSharing); err != nil {
		r.err = err
		return r
	}
	r.err = r.resolveFamilies()
	return r
}

// resolveFamilies reads spec.ipFamilies and spec.ipFamilyPolicy and orders the requested
// addresses by family.
func (r *request) resolveFamilies() error {
	spec := r.svc.Spec
	for _, f := range spec.IPFamilies {
		fam := IPv4
		if f == v1.IPv6Protocol {
			fam = IPv6
		}
		if !slices.Contains(r.families, fam) {
			r.families = append(r.families, fam)
		}
	}
	if len(r.families) == 0 {
		// The API server always fills ipFamilies; an object without them (an old cache, a
		// test) wants the families of its requested addresses, or IPv4.
		for _, a := range r.ips {
			if f := familyOf(a); !slices.Contains(r.families, f) {
				r.families = append(r.families, f)
			}
		}
		if len(r.families) == 0 {
			r.families = []Family{IPv4}
		}
	}
	policy := v1.IPFamilyPolicySingleStack
	if spec.IPFamilyPolicy != nil {
		policy = *spec.IPFamilyPolicy
	}
	switch policy {
	case v1.IPFamilyPolicyRequireDualStack:
		r.all = true
		if len(r.families) < 2 {
			r.families = append(r.families, 1-r.families[0])
		}
	case v1.IPFamilyPolicyPreferDualStack:
		r.all = false
	default:
		r.all = true
		r.families = r.families[:1]
	}
	if r.ips == nil {
		return nil
	}
	ordered := make([]netip.Addr, 0, len(r.ips))
	for _, f := range r.families {
		for _, a := range r.ips {
			if familyOf(a) == f {
				ordered = append(ordered, a)
			}
		}
	}
	if len(ordered) != len(r.ips) {
		for _, a := range r.ips {
			if !slices.Contains(r.families, familyOf(a)) {
				return fmt.Errorf("requested IP %s is %s, but the Service's IP families are %s", a, familyOf(a), familyList(r.families))
			}
		}
	}
	if r.all && len(ordered) < len(r.families) {
		return fmt.Errorf("requested IPs %s: a %s Service needs one per family (%s)", addrList(r.ips), policy, familyList(r.families))
	}
	r.ips = ordered
	return nil
}

// annotation reads edgegate's annotation or MetalLB's; both set must agree.
func annotation(svc *v1.Service, ours, metallb string) (string, error) {
	a, aok := svc.Annotations[ours]
	b, bok := svc.Annotations[metallb]
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	switch {
	case aok && bok && a != b:
		return "", fmt.Errorf("annotations %s (%q) and %s (%q) disagree", ours, a, metallb, b)
	case aok:
		return a, nil
	default:
		return b, nil
	}
}

// requestedIPs reads the requested addresses from the annotations and spec.loadBalancerIP,
// which must agree where more than one is set.
func requestedIPs(svc *v1.Service) ([]netip.Addr, error) {
	type source struct {
		what string
		ips  []netip.Addr
	}
	var sources []source
	for _, key := range []string{AnnotationIPs, MetalLBAnnotationIPs} {
		v, ok := svc.Annotations[key]
		if !ok {
			continue
		}
		ips, err := parseIPList(v)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", key, err)
		}
		sources = append(sources, source{"annotation " + key, ips})
	}
	if s := strings.TrimSpace(svc.Spec.LoadBalancerIP); s != "" {
		ips, err := parseIPList(s)
		if err != nil {
			return nil, fmt.Errorf("spec.loadBalancerIP: %w", err)
		}
		if len(ips) != 1 {
			return nil, fmt.Errorf("spec.loadBalancerIP %q: one address only; request more with the %s annotation", s, AnnotationIPs)
		}
		sources = append(sources, source{"spec.loadBalancerIP", ips})
	}
	if len(sources) == 0 {
		return nil, nil
	}
	for _, s := range sources[1:] {
		if !sameAddrs(s.ips, sources[0].ips) {
			return nil, fmt.Errorf("%s asks for %s but %s asks for %s", sources[0].what, addrList(sources[0].ips), s.what, addrList(s.ips))
		}
	}
	return sources[0].ips, nil
}

func parseIPList(v string) ([]netip.Addr, error) {
	var out []netip.Addr
	fams := map[Family]netip.Addr{}
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return nil, fmt.Errorf("%q: empty address", v)
		}
		a, err := parseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", v, err)
		}
		if a.Is4In6() {
			return nil, fmt.Errorf("%q: %s is IPv4-mapped IPv6: write the IPv4 address", v, a)
		}
		if prev, dup := fams[familyOf(a)]; dup {
			return nil, fmt.Errorf("%q: %s and %s are both %s: at most one address per family", v, prev, a, familyOf(a))
		}
		fams[familyOf(a)] = a
		out = append(out, a)
	}
	return out, nil
}

func sameAddrs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func addrList(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func familyList(fs []Family) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = f.String()
	}
	return "[" + strings.Join(s, ",") + "]"
}
