package model

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// ServiceNameLabel links an EndpointSlice to its Service.
const ServiceNameLabel = discovery.LabelServiceName

// Snapshot is an immutable view of every ServicePort. Unchanged ServicePorts are shared
// between consecutive snapshots, and so are the parts of Ports no change touched: building
// one costs what changed, not a copy of everything.
type Snapshot struct {
	Ports Ports
	// Generation counts the snapshots a Tracker has made.
	Generation uint64
	// Lineage identifies the Tracker that made the snapshot (zero: none), and Changed the
	// ports that differ from that Tracker's snapshot of Generation From (zero: unknown). A
	// planner that planned generation From of the same lineage last need look at no other
	// port: at 10,000 Services, visiting every port was most of a one-endpoint sync's time
	// outside the kernel.
	Lineage, From uint64
	Changed       map[ServicePortName]struct{}
}

// Port returns the ServicePort of that name, nil if there is none.
func (s *Snapshot) Port(n ServicePortName) *ServicePort {
	sp, _ := s.Ports.Get(n)
	return sp
}

// Sorted returns the ServicePorts in a stable order (namespace, name, port, protocol).
func (s *Snapshot) Sorted() []*ServicePort {
	out := make([]*ServicePort, 0, s.Ports.Len())
	for _, sp := range s.Ports.All() {
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b *ServicePort) int { return compareNames(a.Name, b.Name) })
	return out
}

func compareNames(a, b ServicePortName) int {
	for _, c := range [][2]string{{a.Namespace, b.Namespace}, {a.Name, b.Name}, {a.Port, b.Port}, {string(a.Protocol), string(b.Protocol)}} {
		if c[0] < c[1] {
			return -1
		}
		if c[0] > c[1] {
			return 1
		}
	}
	return 0
}

// Changes says what a new Snapshot changed against the previous one.
type Changes struct {
	// Ports holds every ServicePortName that was added, removed or modified.
	Ports map[ServicePortName]struct{}
	// Services and Endpoints count the object events folded into this snapshot, as
	// kube-proxy's service/endpoint change counters do.
	Services, Endpoints int
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Ports) == 0 }

type sliceKey struct{ Namespace, Name string }

// Tracker keeps the current Services and EndpointSlices and builds Snapshots from them,
// recomputing only the services whose objects changed. It is safe for concurrent use.
type Tracker struct {
	mu       sync.Mutex
	services map[ServiceName]*v1.Service
	refused  map[ServiceName]bool // taken without endpoints (see RefuseService)
	slices   map[sliceKey]*discovery.EndpointSlice
	bySvc    map[ServiceName][]sliceKey // each sorted by name: a Service's slices in a stable order
	dirty    map[ServiceName]struct{}
	built    map[ServiceName][]*ServicePort
	ports    portTable
	gen      uint64
	lineage  uint64
	svcEv    int
	epEv     int
	// protectionOf is the pools' protection by LoadBalancer IP (SetPoolProtection).
	protectionOf func(netip.Addr) *Protection
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{
		services: map[ServiceName]*v1.Service{},
		refused:  map[ServiceName]bool{},
		slices:   map[sliceKey]*discovery.EndpointSlice{},
		bySvc:    map[ServiceName][]sliceKey{},
		dirty:    map[ServiceName]struct{}{},
		built:    map[ServiceName][]*ServicePort{},
		lineage:  lineages.Add(1),
	}
}

var lineages atomic.Uint64

// SetPoolProtection gives the protection of the pool of each LoadBalancer IP (nil for an
// address of no pool, or of a pool without one): a Service without its own
// ProtectionAnnotation takes the protection of the pool of its first LoadBalancer IP that
// has one, for all its external frontends. Every LoadBalancer Service is built again at
// the next Snapshot; SetPoolProtection returns how many, so that a caller syncs only when
// there is something to rebuild. nil turns pool protection off.
func (t *Tracker) SetPoolProtection(of func(netip.Addr) *Protection) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.protectionOf = of
	n := 0
	for name, svc := range t.services {
		if len(svc.Status.LoadBalancer.Ingress) > 0 {
			t.dirty[name] = struct{}{}
			t.svcEv++
			n++
		}
	}
	return n
}

// poolProtection gives ports without a protection of their own their pool's.
func (t *Tracker) poolProtection(ports []*ServicePort) {
	if t.protectionOf == nil {
		return
	}
	for _, sp := range ports {
		if sp.Protection != nil {
			continue
		}
		for _, ip := range sp.LoadBalancerIPs {
			if p := t.protectionOf(ip.Addr); p.Any() && !ip.Proxy {
				sp.Protection = p
				break
			}
		}
	}
}

// UpsertService adds or replaces a Service.
func (t *Tracker) UpsertService(svc *v1.Service) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.upsertService(svc)
}

func (t *Tracker) upsertService(svc *v1.Service) {
	t.setService(svc, false)
}

// RefuseService adds or replaces a Service that failed validation and has no good version
// to keep (see Admission): its ports are built from what can be read of it, without
// endpoints, so that its addresses refuse everyone. An UpsertService takes it back.
func (t *Tracker) RefuseService(svc *v1.Service) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setService(svc, true)
}

func (t *Tracker) setService(svc *v1.Service, refused bool) {
	n := ServiceName{Namespace: svc.Namespace, Name: svc.Name}
	if old, ok := t.services[n]; ok && t.refused[n] == refused && reflect.DeepEqual(old.Spec, svc.Spec) &&
		reflect.DeepEqual(old.Status, svc.Status) && sameAnnotationsRead(old, svc) {
		return
	}
	t.services[n] = svc
	if refused {
		t.refused[n] = true
	} else {
		delete(t.refused, n)
	}
	t.dirty[n] = struct{}{}
	t.svcEv++
}

// sameAnnotationsRead reports whether two versions of a Service agree on every annotation
// the data plane reads.
func sameAnnotationsRead(a, b *v1.Service) bool {
	for _, k := range annotationsRead {
		if a.Annotations[k] != b.Annotations[k] {
			return false
		}
	}
	return true
}

// DeleteService removes a Service.
func (t *Tracker) DeleteService(namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deleteService(ServiceName{Namespace: namespace, Name: name})
}

func (t *Tracker) deleteService(n ServiceName) {
	if _, ok := t.services[n]; !ok {
		return
	}
	delete(t.services, n)
	delete(t.refused, n)
	t.dirty[n] = struct{}{}
	t.svcEv++
}

// UpsertSlice adds or replaces an EndpointSlice.
func (t *Tracker) UpsertSlice(s *discovery.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.upsertSlice(s)
}

func (t *Tracker) upsertSlice(s *discovery.EndpointSlice) {
	k := sliceKey{s.Namespace, s.Name}
	old, had := t.slices[k]
	if had && reflect.DeepEqual(old, s) {
		return
	}
	if had {
		t.unlinkSlice(k, old)
	}
	t.slices[k] = s
	n := ServiceName{Namespace: s.Namespace, Name: s.Labels[ServiceNameLabel]}
	if i, found := slices.BinarySearchFunc(t.bySvc[n], k, bySliceName); !found {
		t.bySvc[n] = slices.Insert(t.bySvc[n], i, k)
	}
	t.dirty[n] = struct{}{}
	t.epEv++
}

// DeleteSlice removes an EndpointSlice.
func (t *Tracker) DeleteSlice(namespace, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := sliceKey{namespace, name}
	if old, ok := t.slices[k]; ok {
		t.unlinkSlice(k, old)
		delete(t.slices, k)
		t.epEv++
	}
}

// bySliceName orders the slices of one Service (one namespace) by name.
func bySliceName(a, b sliceKey) int { return strings.Compare(a.Name, b.Name) }

func (t *Tracker) unlinkSlice(k sliceKey, s *discovery.EndpointSlice) {
	n := ServiceName{Namespace: s.Namespace, Name: s.Labels[ServiceNameLabel]}
	if i, found := slices.BinarySearchFunc(t.bySvc[n], k, bySliceName); found {
		t.bySvc[n] = slices.Delete(t.bySvc[n], i, i+1)
	}
	if len(t.bySvc[n]) == 0 {
		delete(t.bySvc, n)
	}
	t.dirty[n] = struct{}{}
}

// Replace makes the tracked objects exactly the given ones, as a source that always knows
// the whole desired state (a manifests directory, a cache file) delivers them.
func (t *Tracker) Replace(services []*v1.Service, eps []*discovery.EndpointSlice) {
	t.ReplaceAll(services, nil, eps)
}

// ReplaceAll is Replace with refused Services besides (see RefuseService).
func (t *Tracker) ReplaceAll(services, refused []*v1.Service, eps []*discovery.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keepSvc := map[ServiceName]bool{}
	for _, s := range services {
		keepSvc[ServiceName{Namespace: s.Namespace, Name: s.Name}] = true
		t.setService(s, false)
	}
	for _, s := range refused {
		keepSvc[ServiceName{Namespace: s.Namespace, Name: s.Name}] = true
		t.setService(s, true)
	}
	for n := range t.services {
		if !keepSvc[n] {
			t.deleteService(n)
		}
	}
	keepSlice := map[sliceKey]bool{}
	for _, s := range eps {
		keepSlice[sliceKey{s.Namespace, s.Name}] = true
		t.upsertSlice(s)
	}
	for k, old := range t.slices {
		if !keepSlice[k] {
			t.unlinkSlice(k, old)
			delete(t.slices, k)
			t.epEv++
		}
	}
}

// Snapshot folds every change since the last call into a new Snapshot and reports which
// ServicePorts differ from the previous one.
func (t *Tracker) Snapshot() (*Snapshot, Changes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ch := Changes{Ports: map[ServicePortName]struct{}{}, Services: t.svcEv, Endpoints: t.epEv}
	t.svcEv, t.epEv = 0, 0
	for n := range t.dirty {
		var eps []*discovery.EndpointSlice
		for _, k := range t.bySvc[n] {
			eps = append(eps, t.slices[k])
		}
		var next []*ServicePort
		if t.refused[n] {
			next = refusedPorts(t.services[n])
		} else {
			next = ServicePorts(t.services[n], eps)
			t.poolProtection(next)
		}
		prev := t.built[n]
		seen := map[ServicePortName]bool{}
		for _, sp := range next {
			seen[sp.Name] = true
			if old, ok := t.ports.get(sp.Name); ok && reflect.DeepEqual(old, sp) {
				continue
			}
			t.ports.set(sp)
			ch.Ports[sp.Name] = struct{}{}
		}
		for _, sp := range prev {
			if !seen[sp.Name] {
				t.ports.delete(sp.Name)
				ch.Ports[sp.Name] = struct{}{}
			}
		}
		if len(next) == 0 {
			delete(t.built, n)
		} else {
			// Keep the stored pointers of unchanged ports so later comparisons stay cheap.
			stored := make([]*ServicePort, len(next))
			for i, sp := range next {
				stored[i], _ = t.ports.get(sp.Name)
			}
			t.built[n] = stored
		}
		delete(t.dirty, n)
	}
	from := t.gen
	if !ch.Empty() || t.gen == 0 {
		t.gen++
	}
	return &Snapshot{Ports: t.ports.snapshot(), Generation: t.gen, Lineage: t.lineage, From: from, Changed: ch.Ports}, ch
}
