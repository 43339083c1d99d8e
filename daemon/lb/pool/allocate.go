package pool

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Options of an allocation.
type Options struct {
	// DefaultClass makes edgegate the cluster's default load balancer: it also allocates for
	// LoadBalancer Services that have no loadBalancerClass.
	DefaultClass bool
}

// What went wrong for a Service; an *Error wraps one of them.
var (
	// ErrInvalid: the Service's request cannot be read (a malformed or contradictory
	// annotation, an address of a family the Service does not have).
	ErrInvalid = errors.New("invalid request")
	// ErrUnknownPool: the Service names a pool that is not configured.
	ErrUnknownPool = errors.New("unknown address pool")
	// ErrNotInPool: a requested address is in no pool, or not in the pool the Service names.
	ErrNotInPool = errors.New("address not in a pool")
	// ErrInUse: a requested address belongs to another Service.
	ErrInUse = errors.New("address in use")
	// ErrExhausted: no pool the Service may use has a free address of a family it needs.
	ErrExhausted = errors.New("no free address")
)

// Error says why a Service got no addresses, naming the Service and the address or pool; the
// message is meant for the Service's Warning event.
type Error struct {
	Service string // namespace/name
	Kind    error  // one of the Err values above
	Detail  string
}

func (e *Error) Error() string { return "service " + e.Service + ": " + e.Detail }
func (e *Error) Unwrap() error { return e.Kind }

// Assignment is the outcome for one of edgegate's Services.
type Assignment struct {
	Service string // namespace/name
	// IPs are the Service's addresses in the order of its ipFamilies, Pools the pool of each.
	// Both are empty when Err is set.
	IPs   []netip.Addr
	Pools []string
	Err   *Error
	// Note says which family a PreferDualStack Service is left without, and why.
	Note string
}

// Allocate decides the addresses of every LoadBalancer Service edgegate serves, from the
// pools and the Services as they are (their status.loadBalancer.ingress is what they hold).
// It is deterministic: the result depends on the set of Services, not on their order, so
// two allocators given the same state agree, and allocating again from a state that holds
// the result changes nothing.
//
// In order: addresses of LoadBalancer Services of other classes are never handed out; each
// Service keeps the addresses it holds while they are still valid for it (in a pool, in the
// pool it names, among those it requests, of a family it has, not held by an older Service);
// then Services that request addresses get them; then the rest get the lowest free address
// of each family from the pool they name, or from the autoAssign pools by name. Older
// Services (creationTimestamp, then namespace/name) go first at each step. A Service that
// cannot have all it needs (one family of PreferDualStack is enough) gets nothing and an
// Error.
//
// Services share an address only when all of them carry the same allow-shared-ip key and
// their ports (protocol and port) differ, as in MetalLB. MetalLB also requires either
// externalTrafficPolicy Cluster or identical selectors, because there the node announcing an
// address must have the endpoints of every Service on it; an edgegate gateway forwards to
// endpoints anywhere, so that rule does not apply.
func Allocate(pools Pools, services []*v1.Service, opts Options) []Assignment {
	t := table{}
	var foreign, ours []*request
	for _, svc := range services {
		switch {
		case svc == nil || !IsLoadBalancer(svc):
		case Ours(svc, opts.DefaultClass):
			ours = append(ours, newRequest(svc))
		default:
			foreign = append(foreign, &request{svc: svc, name: svc.Namespace + "/" + svc.Name})
		}
	}
	slices.SortFunc(foreign, func(a, b *request) int { return strings.Compare(a.name, b.name) })
	for _, r := range foreign {
		h := &holder{name: r.name, foreign: true}
		for _, ing := range r.svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(ing.IP); err == nil {
				t.claim(a, h)
			}
		}
	}
	slices.SortFunc(ours, func(a, b *request) int {
		return cmp.Or(a.svc.CreationTimestamp.Compare(b.svc.CreationTimestamp.Time), strings.Compare(a.name, b.name))
	})
	states := make([]*state, len(ours))
	for i, r := range ours {
		states[i] = &state{request: r, holder: &holder{name: r.name, sharing: r.sharing, ports: r.ports}, got: map[Family]netip.Addr{}, pools: map[Family]string{}}
		if r.err == nil {
			states[i].keep(pools, t)
		}
	}
	// Requests before automatic picks, so that a free requested address is not taken by a
	// Service that would have been happy with any.
	order := slices.Clone(states)
	slices.SortStableFunc(order, func(a, b *state) int {
		return cmp.Compare(btoi(a.ips == nil), btoi(b.ips == nil))
	})
	for _, s := range order {
		s.finish(pools, t)
	}
	out := make([]Assignment, 0, len(states))
	for _, s := range states {
		out = append(out, s.assignment())
	}
	slices.SortFunc(out, func(a, b Assignment) int { return strings.Compare(a.Service, b.Service) })
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// holder is a Service holding an address.
type holder struct {
	name    string
	foreign bool // of another load balancer class: never shared
	sharing string
	ports   []port
}

// table is who holds each address, in the order they took it.
type table map[netip.Addr][]*holder

// blocker returns the first holder of a that h may not share it with, or nil.
func (t table) blocker(a netip.Addr, h *holder) *holder {
	for _, o := range t[a] {
		if o != h && (o.foreign || h.sharing == "" || o.sharing != h.sharing || portsOverlap(o.ports, h.ports)) {
			return o
		}
	}
	return nil
}

func (t table) claim(a netip.Addr, h *holder) { t[a] = append(t[a], h) }

func (t table) release(a netip.Addr, h *holder) {
	t[a] = slices.DeleteFunc(t[a], func(o *holder) bool { return o == h })
	if len(t[a]) == 0 {
		delete(t, a)
	}
}

func portsOverlap(a, b []port) bool {
	for _, p := range a {
		if slices.Contains(b, p) {
			return true
		}
	}
	return false
}

// state is a Service's allocation in progress.
type state struct {
	*request
	holder *holder
	got    map[Family]netip.Addr
	pools  map[Family]string
	fail   *Error
	note   string
}

func (s *state) take(t table, a netip.Addr, pool string) {
	t.claim(a, s.holder)
	s.got[familyOf(a)] = a
	s.pools[familyOf(a)] = pool
}

// failWith gives up every address the Service took and records why.
func (s *state) failWith(t table, kind error, format string, args ...any) {
	for _, a := range s.got {
		t.release(a, s.holder)
	}
	clear(s.got)
	clear(s.pools)
	s.fail = &Error{Service: s.name, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// keep takes the addresses the Service holds that are still valid for it.
func (s *state) keep(pools Pools, t table) {
	for _, ing := range s.svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(ing.IP)
		if err != nil {
			continue
		}
		f := familyOf(a)
		if !slices.Contains(s.families, f) || s.got[f].IsValid() || s.ips != nil && !slices.Contains(s.ips, a) {
			continue
		}
		p, ok := pools.Lookup(a)
		if !ok || !p.Allocatable(a) || s.pool != "" && p.Name != s.pool || t.blocker(a, s.holder) != nil {
			continue
		}
		s.take(t, a, p.Name)
	}
}

// finish completes the Service's addresses: the requested ones, or free ones.
func (s *state) finish(pools Pools, t table) {
	if s.err != nil {
		s.failWith(t, ErrInvalid, "%v", s.err)
		return
	}
	if s.pool != "" {
		if _, ok := pools.Get(s.pool); !ok {
			s.failWith(t, ErrUnknownPool, "address pool %q (annotation %s) does not exist", s.pool, AnnotationPool)
			return
		}
	}
	if s.ips != nil {
		s.finishRequested(pools, t)
		return
	}
	var missing []string
	for _, f := range s.families {
		if s.got[f].IsValid() {
			continue
		}
		a, pool, why := s.nextFree(pools, t, f)
		if !a.IsValid() {
			if s.all {
				s.failWith(t, ErrExhausted, "%s", why)
				return
			}
			missing = append(missing, why)
			continue
		}
		s.take(t, a, pool)
	}
	if len(s.got) == 0 {
		s.failWith(t, ErrExhausted, "%s", strings.Join(missing, "; "))
		return
	}
	if len(missing) > 0 {
		s.note = "PreferDualStack, served without: " + strings.Join(missing, "; ")
	}
}

func (s *state) finishRequested(pools Pools, t table) {
	for _, a := range s.ips {
		if s.got[familyOf(a)] == a {
			continue
		}
		p, ok := pools.Lookup(a)
		switch {
		case !ok:
			s.failWith(t, ErrNotInPool, "requested IP %s is not in any address pool", a)
			return
		case s.pool != "" && p.Name != s.pool:
			s.failWith(t, ErrNotInPool, "requested IP %s is in address pool %q, not in %q named by annotation %s", a, p.Name, s.pool, AnnotationPool)
			return
		case !p.Allocatable(a):
			s.failWith(t, ErrNotInPool, "requested IP %s ends in .0 or .255, which address pool %q avoids (avoidBuggyIPs)", a, p.Name)
			return
		}
		if b := t.blocker(a, s.holder); b != nil {
			s.failWith(t, ErrInUse, "requested IP %s is in use by %s", a, s.why(b))
			return
		}
		s.take(t, a, p.Name)
	}
}

// why describes a holder that blocks the Service, and what would let them share.
func (s *state) why(b *holder) string {
	switch {
	case b.foreign:
		return "Service " + b.name + " of another load balancer class"
	case s.sharing == "" || b.sharing == "":
		return "Service " + b.name + " (sharing needs the same " + AnnotationSharing + " key on both)"
	case s.sharing != b.sharing:
		return fmt.Sprintf("Service %s, whose %s key %q differs from %q", b.name, AnnotationSharing, b.sharing, s.sharing)
	}
	for _, p := range s.ports {
		if slices.Contains(b.ports, p) {
			return fmt.Sprintf("Service %s, which also uses port %d/%s", b.name, p.port, p.proto)
		}
	}
	return "Service " + b.name
}

// nextFree finds the lowest address of family f the Service may take, from the pool it names
// or the autoAssign pools in name order; when there is none it says why.
func (s *state) nextFree(pools Pools, t table, f Family) (netip.Addr, string, string) {
	var candidates []*Pool
	if s.pool != "" {
		p, _ := pools.Get(s.pool)
		candidates = []*Pool{p}
	} else {
		for i := range pools.pools {
			if pools.pools[i].AutoAssign {
				candidates = append(candidates, &pools.pools[i])
			}
		}
	}
	var names []string
	for _, p := range candidates {
		if !p.HasFamily(f) {
			continue
		}
		names = append(names, fmt.Sprintf("%q", p.Name))
		for _, r := range p.Ranges {
			if familyOf(r.First) != f {
				continue
			}
			for a := r.First; r.Contains(a); a = a.Next() {
				if p.Allocatable(a) && t.blocker(a, s.holder) == nil {
					return a, p.Name, ""
				}
				if a == r.Last {
					break
				}
			}
		}
	}
	switch {
	case s.pool != "" && len(names) == 0:
		return netip.Addr{}, "", fmt.Sprintf("address pool %q has no %s addresses", s.pool, f)
	case s.pool != "":
		return netip.Addr{}, "", fmt.Sprintf("no free %s address left in address pool %q", f, s.pool)
	case len(candidates) == 0:
		return netip.Addr{}, "", fmt.Sprintf("no address pool assigns %s addresses automatically (autoAssign); request an IP or name a pool with %s", f, AnnotationPool)
	case len(names) == 0:
		return netip.Addr{}, "", fmt.Sprintf("no autoAssign address pool has %s addresses", f)
	}
	return netip.Addr{}, "", fmt.Sprintf("no free %s address left in address pool %s", f, strings.Join(names, ", "))
}

func (s *state) assignment() Assignment {
	a := Assignment{Service: s.name, Err: s.fail, Note: s.note}
	for _, f := range s.families {
		if ip, ok := s.got[f]; ok {
			a.IPs = append(a.IPs, ip)
			a.Pools = append(a.Pools, s.pools[f])
		}
	}
	return a
}

// Ingress is the status.loadBalancer.ingress that announces ips: ipMode VIP, because the
// gateways deliver traffic for the address to the Service themselves.
func Ingress(ips []netip.Addr) []v1.LoadBalancerIngress {
	var out []v1.LoadBalancerIngress
	for _, a := range ips {
		mode := v1.LoadBalancerIPModeVIP
		out = append(out, v1.LoadBalancerIngress{IP: a.String(), IPMode: &mode})
	}
	return out
}

// IngressEqual reports whether a Service's status already says exactly want, so that the
// status is written only when it changes.
func IngressEqual(have, want []v1.LoadBalancerIngress) bool {
	return slices.EqualFunc(have, want, func(h, w v1.LoadBalancerIngress) bool {
		return h.IP == w.IP && h.Hostname == w.Hostname && len(h.Ports) == 0 && len(w.Ports) == 0 &&
			(h.IPMode == nil) == (w.IPMode == nil) && (h.IPMode == nil || *h.IPMode == *w.IPMode)
	})
}
