package model

import (
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Outcome is what the Admission made of an object that failed validation.
type Outcome string

const (
	// KeptLastGood: the object is rejected; its last good version stays in effect.
	KeptLastGood Outcome = "kept-last-good"
	// Refused: a Service that never had a good version is taken without endpoints, so its
	// addresses refuse everyone (REJECT, or DROP where its traffic policy drops) instead of
	// being skipped in silence.
	Refused Outcome = "refused"
	// SourcesClosed: the Service is taken, and its LoadBalancer IPs refuse every source
	// because a loadBalancerSourceRanges entry cannot be understood.
	SourcesClosed Outcome = "source-ranges-closed"
	// SliceSkipped: an EndpointSlice that never had a good version adds no endpoints.
	SliceSkipped Outcome = "skipped"
)

// Rejection reports one version of an object that was not taken as it is.
type Rejection struct {
	Service *v1.Service              // the Service, or nil
	Slice   *discovery.EndpointSlice // the EndpointSlice, or nil
	Outcome Outcome
	Errs    field.ErrorList
}

// Kind is the object's kind, "Service" or "EndpointSlice".
func (r Rejection) Kind() string {
	if r.Service != nil {
		return "Service"
	}
	return "EndpointSlice"
}

// Object is the object's namespace/name.
func (r Rejection) Object() string {
	if r.Service != nil {
		return r.Service.Namespace + "/" + r.Service.Name
	}
	return r.Slice.Namespace + "/" + r.Slice.Name
}

// Admission validates a cluster's Services and EndpointSlices with the manifests' rules
// before they reach the Tracker. A Service that fails keeps its last good version; one
// that never had one is Refused; a restricting field that cannot be understood fails
// closed (SourcesClosed) rather than rejecting, since the last good version may restrict
// nothing. Each rejected object version is reported once, however often it is delivered
// again (relists, the cache). It is safe for concurrent use.
type Admission struct {
	t      *Tracker
	report func(Rejection)

	mu         sync.Mutex
	good       map[ServiceName]*v1.Service
	goodSlices map[sliceKey]*discovery.EndpointSlice
	// reported holds the resourceVersion of each object's last reported rejection.
	reported map[reportKey]string
}

type reportKey struct {
	kind            string
	namespace, name string
}

// NewAdmission returns an Admission in front of t that calls report for every rejected
// object version; report must not block (it runs under the source's locks).
func NewAdmission(t *Tracker, report func(Rejection)) *Admission {
	return &Admission{
		t: t, report: report,
		good:       map[ServiceName]*v1.Service{},
		goodSlices: map[sliceKey]*discovery.EndpointSlice{}, reported: map[reportKey]string{},
	}
}

// UpsertService takes a Service's new version, or keeps its last good one.
func (a *Admission) UpsertService(svc *v1.Service) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch take, refuse := a.admitService(svc); {
	case take:
		a.t.UpsertService(svc)
	case refuse:
		a.t.RefuseService(svc)
	}
}

// admitService validates svc and records what becomes of it: taken as it is, refused, or
// neither (its last good version stays).
func (a *Admission) admitService(svc *v1.Service) (take, refuse bool) {
	n := ServiceName{Namespace: svc.Namespace, Name: svc.Name}
	rejecting, closing := SplitFailClosed(ValidateService(svc))
	switch {
	case len(rejecting) == 0:
		a.good[n] = svc
		if len(closing) > 0 {
			a.reject(Rejection{Service: svc, Outcome: SourcesClosed, Errs: closing})
		} else {
			a.clear("Service", svc.Namespace, svc.Name)
		}
		return true, false
	case a.good[n] != nil:
		a.reject(Rejection{Service: svc, Outcome: KeptLastGood, Errs: append(rejecting, closing...)})
		return false, false
	default:
		a.reject(Rejection{Service: svc, Outcome: Refused, Errs: append(rejecting, closing...)})
		return false, true
	}
}

// DeleteService removes a Service and forgets its last good version.
func (a *Admission) DeleteService(namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := ServiceName{Namespace: namespace, Name: name}
	delete(a.good, n)
	a.clear("Service", namespace, name)
	a.t.DeleteService(namespace, name)
}

// UpsertSlice takes an EndpointSlice's new version, or keeps its last good one.
func (a *Admission) UpsertSlice(s *discovery.EndpointSlice) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.admitSlice(s) {
		a.t.UpsertSlice(s)
	}
}

func (a *Admission) admitSlice(s *discovery.EndpointSlice) bool {
	k := sliceKey{s.Namespace, s.Name}
	errs := ValidateEndpointSlice(s)
	switch {
	case len(errs) == 0:
		a.goodSlices[k] = s
		a.clear("EndpointSlice", s.Namespace, s.Name)
		return true
	case a.goodSlices[k] != nil:
		a.reject(Rejection{Slice: s, Outcome: KeptLastGood, Errs: errs})
	default:
		a.reject(Rejection{Slice: s, Outcome: SliceSkipped, Errs: errs})
	}
	return false
}

// DeleteSlice removes an EndpointSlice and forgets its last good version.
func (a *Admission) DeleteSlice(namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.goodSlices, sliceKey{namespace, name})
	a.clear("EndpointSlice", namespace, name)
	a.t.DeleteSlice(namespace, name)
}

// Replace makes the tracked objects exactly the given ones, each admitted as by the
// Upsert methods: objects that are gone lose their last good versions too.
func (a *Admission) Replace(services []*v1.Service, eps []*discovery.EndpointSlice) {
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[ServiceName]bool{}
	var taken, refused []*v1.Service
	for _, svc := range services {
		n := ServiceName{Namespace: svc.Namespace, Name: svc.Name}
		seen[n] = true
		switch take, refuse := a.admitService(svc); {
		case take:
			taken = append(taken, svc)
		case refuse:
			refused = append(refused, svc)
		default:
			taken = append(taken, a.good[n])
		}
	}
	for n := range a.good {
		if !seen[n] {
			delete(a.good, n)
		}
	}
	seenSlices := map[sliceKey]bool{}
	var slices []*discovery.EndpointSlice
	for _, s := range eps {
		k := sliceKey{s.Namespace, s.Name}
		seenSlices[k] = true
		if a.admitSlice(s) {
			slices = append(slices, s)
		} else if g := a.goodSlices[k]; g != nil {
			slices = append(slices, g)
		}
	}
	for k := range a.goodSlices {
		if !seenSlices[k] {
			delete(a.goodSlices, k)
		}
	}
	for k := range a.reported {
		if k.kind == "Service" && !seen[ServiceName{Namespace: k.namespace, Name: k.name}] ||
			k.kind == "EndpointSlice" && !seenSlices[sliceKey{k.namespace, k.name}] {
			delete(a.reported, k)
		}
	}
	a.t.ReplaceAll(taken, refused, slices)
}

// reject reports r unless this version of its object was reported already.
func (a *Admission) reject(r Rejection) {
	k := reportKey{kind: r.Kind()}
	var version string
	if r.Service != nil {
		k.namespace, k.name, version = r.Service.Namespace, r.Service.Name, r.Service.ResourceVersion
	} else {
		k.namespace, k.name, version = r.Slice.Namespace, r.Slice.Name, r.Slice.ResourceVersion
	}
	if prev, ok := a.reported[k]; ok && prev == version && version != "" {
		return
	}
	a.reported[k] = version
	a.report(r)
}

func (a *Admission) clear(kind, namespace, name string) {
	delete(a.reported, reportKey{kind: kind, namespace: namespace, name: name})
}
