package model_test

import (
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// Tracker fixtures: web (10.96.0.10) has ports http (80 -> 8080) and metrics (9090), with
// one slice per port; dns (10.96.0.53) is UDP 53 -> 5353. Endpoints 10.200.2.11-13.

func spn(svc, port string, p model.Protocol) model.ServicePortName {
	return model.ServicePortName{ServiceName: model.ServiceName{Namespace: "default", Name: svc}, Port: port, Protocol: p}
}

var (
	webHTTP    = spn("web", "http", model.TCP)
	webMetrics = spn("web", "metrics", model.TCP)
	dnsPort    = spn("dns", "dns", model.UDP)
)

func webSvc(mods ...func(*v1.Service)) *v1.Service {
	return mt.Service("default", "web", "10.96.0.10", append([]func(*v1.Service){
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), mt.Port("metrics", v1.ProtocolTCP, 9090, 9090, 0)}, mods...)...)
}

func webHTTPSlice(addrs ...string) *discovery.EndpointSlice {
	var eps []discovery.Endpoint
	for _, a := range addrs {
		eps = append(eps, mt.EP(a))
	}
	return mt.Slice("default", "web-http", "web", "http", v1.ProtocolTCP, 8080, eps...)
}

func webMetricsSlice() *discovery.EndpointSlice {
	return mt.Slice("default", "web-metrics", "web", "metrics", v1.ProtocolTCP, 9090, mt.EP("10.200.2.11"))
}

func dnsSvc() *v1.Service {
	return mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
}

func dnsSlice() *discovery.EndpointSlice {
	return mt.Slice("default", "dns-1", "dns", "dns", v1.ProtocolUDP, 5353, mt.EP("10.200.2.12"))
}

func changed(ch model.Changes) []model.ServicePortName {
	var out []model.ServicePortName
	for n := range ch.Ports {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b model.ServicePortName) int {
		return cmpStrings(a.Name+"/"+a.Port, b.Name+"/"+b.Port)
	})
	return out
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// populated returns a tracker holding web, dns and their slices, already snapshotted.
func populated(t *testing.T) (*model.Tracker, *model.Snapshot) {
	t.Helper()
	tr := model.NewTracker()
	tr.UpsertService(webSvc())
	tr.UpsertService(dnsSvc())
	tr.UpsertSlice(webHTTPSlice("10.200.2.11", "10.200.2.12"))
	tr.UpsertSlice(webMetricsSlice())
	tr.UpsertSlice(dnsSlice())
	snap, ch := tr.Snapshot()
	if got, want := changed(ch), []model.ServicePortName{dnsPort, webHTTP, webMetrics}; !slices.Equal(got, want) {
		t.Fatalf("first snapshot changes %v, want %v", got, want)
	}
	if ch.Services != 2 || ch.Endpoints != 3 || snap.Generation != 1 {
		t.Fatalf("first snapshot: %d services, %d endpoints events, generation %d", ch.Services, ch.Endpoints, snap.Generation)
	}
	return tr, snap
}

func TestTrackerUnchangedUpsert(t *testing.T) {
	tr, prev := populated(t)
	// Fresh but equal objects, as an informer resync delivers them.
	tr.UpsertService(webSvc())
	tr.UpsertSlice(webHTTPSlice("10.200.2.11", "10.200.2.12"))
	snap, ch := tr.Snapshot()
	if !ch.Empty() || ch.Services != 0 || ch.Endpoints != 0 {
		t.Errorf("unchanged upserts reported %+v", ch)
	}
	if snap.Generation != prev.Generation {
		t.Errorf("generation moved from %d to %d without a change", prev.Generation, snap.Generation)
	}
	// An empty snapshot still counts as the first one.
	if s, _ := model.NewTracker().Snapshot(); s.Generation != 1 || s.Ports.Len() != 0 {
		t.Errorf("empty tracker: %+v", s)
	}
}

func TestTrackerEndpointChangeReportsOnlyItsPort(t *testing.T) {
	tr, prev := populated(t)
	tr.UpsertSlice(webHTTPSlice("10.200.2.11", "10.200.2.13"))
	snap, ch := tr.Snapshot()
	if got := changed(ch); !slices.Equal(got, []model.ServicePortName{webHTTP}) {
		t.Errorf("changes %v, want only %v", got, webHTTP)
	}
	if ch.Endpoints != 1 || ch.Services != 0 {
		t.Errorf("event counts %+v", ch)
	}
	if snap.Generation != prev.Generation+1 {
		t.Errorf("generation %d after %d", snap.Generation, prev.Generation)
	}
	// Unchanged ports are shared, not rebuilt: the same pointers as before.
	if snap.Port(webMetrics) != prev.Port(webMetrics) || snap.Port(dnsPort) != prev.Port(dnsPort) {
		t.Error("unchanged ports were rebuilt")
	}
	if snap.Port(webHTTP) == prev.Port(webHTTP) {
		t.Error("changed port kept its old pointer")
	}
	// The old snapshot is immutable.
	if got := prev.Port(webHTTP).Endpoints[1].Addr.String(); got != "10.200.2.12" {
		t.Errorf("old snapshot changed: %s", got)
	}
}

func TestTrackerServiceChange(t *testing.T) {
	tr, prev := populated(t)
	tr.UpsertService(webSvc(mt.Affinity(60)))
	snap, ch := tr.Snapshot()
	if got := changed(ch); !slices.Equal(got, []model.ServicePortName{webHTTP, webMetrics}) || ch.Services != 1 {
		t.Errorf("changes %v (%+v)", got, ch)
	}
	if snap.Port(dnsPort) != prev.Port(dnsPort) {
		t.Error("dns rebuilt for a web change")
	}
	// A status-only change is a change too (LoadBalancer ingress lives there).
	tr.UpsertService(webSvc(mt.Affinity(60), mt.LoadBalancerIPs("203.0.113.10")))
	tr.Snapshot()
	tr.UpsertService(webSvc(mt.Affinity(60), mt.LoadBalancerIPs("203.0.113.10", "203.0.113.11")))
	if _, ch := tr.Snapshot(); len(ch.Ports) != 2 || ch.Services != 1 {
		t.Errorf("status change: %v (%+v)", changed(ch), ch)
	}
	// A renamed port removes the old name and adds the new one.
	tr.UpsertService(mt.Service("default", "web", "10.96.0.10", mt.Port("www", v1.ProtocolTCP, 80, 8080, 0)))
	snap, ch = tr.Snapshot()
	www := spn("web", "www", model.TCP)
	if got := changed(ch); !slices.Equal(got, []model.ServicePortName{webHTTP, webMetrics, www}) {
		t.Errorf("rename changes %v", got)
	}
	if _, ok := snap.Ports.Get(webHTTP); ok || snap.Port(www) == nil {
		t.Errorf("after rename: %v", snap.Sorted())
	}
}

func TestTrackerDeletes(t *testing.T) {
	tr, _ := populated(t)
	tr.DeleteSlice("default", "web-http")
	tr.DeleteSlice("default", "no-such-slice")
	snap, ch := tr.Snapshot()
	if got := changed(ch); !slices.Equal(got, []model.ServicePortName{webHTTP}) || ch.Endpoints != 1 {
		t.Errorf("slice delete changes %v (%+v)", got, ch)
	}
	if n := len(snap.Port(webHTTP).Endpoints); n != 0 {
		t.Errorf("deleted slice left %d endpoints", n)
	}
	tr.DeleteService("default", "web")
	tr.DeleteService("default", "no-such-service")
	snap, ch = tr.Snapshot()
	if got := changed(ch); !slices.Equal(got, []model.ServicePortName{webHTTP, webMetrics}) || ch.Services != 1 {
		t.Errorf("service delete changes %v (%+v)", got, ch)
	}
	if snap.Ports.Len() != 1 || snap.Port(dnsPort) == nil {
		t.Errorf("after delete: %v", snap.Sorted())
	}
	// The web-metrics slice is still tracked: the service coming back finds it.
	tr.UpsertService(webSvc())
	snap, _ = tr.Snapshot()
	if n := len(snap.Port(webMetrics).Endpoints); n != 1 {
		t.Errorf("re-added service has %d metrics endpoints", n)
	}
}

func TestTrackerReplace(t *testing.T) {
	tr, prev := populated(t)
	tr.Replace([]*v1.Service{webSvc(), dnsSvc()}, []*discovery.EndpointSlice{
		webHTTPSlice("10.200.2.11", "10.200.2.12"), webMetricsSlice(), dnsSlice()})
	if snap, ch := tr.Snapshot(); !ch.Empty() || snap.Generation != prev.Generation {
		t.Errorf("identical Replace changed %v", changed(ch))
	}
	// dns disappears, web's metrics slice disappears, a new slice appears for http.
	extra := mt.Slice("default", "web-http-2", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.13"))
	tr.Replace([]*v1.Service{webSvc()}, []*discovery.EndpointSlice{webHTTPSlice("10.200.2.11", "10.200.2.12"), extra})
	snap, ch := tr.Snapshot()
	if got := changed(ch); !slices.Equal(got, []model.ServicePortName{dnsPort, webHTTP, webMetrics}) {
		t.Errorf("Replace changes %v", got)
	}
	if ch.Services != 1 || ch.Endpoints != 3 {
		t.Errorf("Replace event counts %+v, want 1 service and 3 slice events", ch)
	}
	if n := len(snap.Port(webHTTP).Endpoints); n != 3 {
		t.Errorf("http endpoints %d, want 3", n)
	}
	if _, ok := snap.Ports.Get(dnsPort); ok {
		t.Error("dns survived Replace")
	}
}

func TestTrackerSliceMovesBetweenServices(t *testing.T) {
	tr, _ := populated(t)
	tr.UpsertService(mt.Service("default", "web2", "10.96.0.11", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
	tr.Snapshot()
	moved := webHTTPSlice("10.200.2.11", "10.200.2.12")
	moved.Labels[model.ServiceNameLabel] = "web2"
	tr.UpsertSlice(moved)
	snap, ch := tr.Snapshot()
	web2 := spn("web2", "http", model.TCP)
	if got := changed(ch); !slices.Equal(got, []model.ServicePortName{webHTTP, web2}) {
		t.Errorf("move changes %v", got)
	}
	if len(snap.Port(webHTTP).Endpoints) != 0 || len(snap.Port(web2).Endpoints) != 2 {
		t.Errorf("after move: web %v, web2 %v", snap.Port(webHTTP).Endpoints, snap.Port(web2).Endpoints)
	}
	// Deleting it afterwards empties web2, not web.
	tr.DeleteSlice("default", "web-http")
	if _, ch := tr.Snapshot(); !slices.Equal(changed(ch), []model.ServicePortName{web2}) {
		t.Errorf("delete after move changes %v", changed(ch))
	}
}

func TestSnapshotSorted(t *testing.T) {
	_, snap := populated(t)
	var got []model.ServicePortName
	for _, sp := range snap.Sorted() {
		got = append(got, sp.Name)
	}
	if want := []model.ServicePortName{dnsPort, webHTTP, webMetrics}; !cmp.Equal(want, got) {
		t.Errorf("Sorted %v, want %v", got, want)
	}
}

func TestTrackerConcurrentUse(t *testing.T) {
	tr := model.NewTracker()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				if (i+j)%2 == 0 {
					tr.UpsertService(webSvc())
					tr.UpsertSlice(webHTTPSlice("10.200.2.11"))
				} else {
					tr.DeleteSlice("default", "web-http")
				}
				tr.Snapshot()
			}
		}()
	}
	wg.Wait()
	tr.UpsertSlice(webHTTPSlice("10.200.2.11"))
	if snap, _ := tr.Snapshot(); len(snap.Port(webHTTP).Endpoints) != 1 {
		t.Errorf("final state wrong: %+v", snap.Port(webHTTP))
	}
}

// TestTrackerAnnotations: the IPVS scheduler annotation reaches the ServicePorts and its
// change is a change; any other annotation (kubectl's, a controller's) is not.
func TestTrackerAnnotations(t *testing.T) {
	tr, _ := populated(t)
	annotate := func(kv ...string) func(*v1.Service) {
		return func(s *v1.Service) {
			s.Annotations = map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				s.Annotations[kv[i]] = kv[i+1]
			}
		}
	}
	tr.UpsertService(webSvc(annotate("example.com/owner", "team-a")))
	if _, ch := tr.Snapshot(); !ch.Empty() {
		t.Errorf("an unrelated annotation changed %v", changed(ch))
	}
	tr.UpsertService(webSvc(annotate("example.com/owner", "team-a", model.IPVSSchedulerAnnotation, "sh")))
	snap, ch := tr.Snapshot()
	if got := changed(ch); !slices.Equal(got, []model.ServicePortName{webHTTP, webMetrics}) {
		t.Errorf("the scheduler annotation changed %v, want both web ports", got)
	}
	if got := snap.Port(webHTTP).IPVSScheduler; got != "sh" {
		t.Errorf("IPVSScheduler = %q, want sh", got)
	}
	if got := snap.Port(dnsPort).IPVSScheduler; got != "" {
		t.Errorf("dns IPVSScheduler = %q, want none", got)
	}
	tr.UpsertService(webSvc())
	if snap, ch := tr.Snapshot(); len(ch.Ports) != 2 || snap.Port(webHTTP).IPVSScheduler != "" {
		t.Errorf("removing the annotation: changes %v, scheduler %q", changed(ch), snap.Port(webHTTP).IPVSScheduler)
	}
}

// A pool's protection reaches the LoadBalancer Services of its addresses that have none of
// their own, and only them; changing or dropping the pools rebuilds those Services.
func TestTrackerPoolProtection(t *testing.T) {
	tr := model.NewTracker()
	lb := func(name, ip string, mods ...func(*v1.Service)) *v1.Service {
		return mt.Service("default", name, "10.96.0."+ip[len(ip)-1:], append([]func(*v1.Service){
			mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080), mt.Type(v1.ServiceTypeLoadBalancer), mt.LoadBalancerIPs(ip)}, mods...)...)
	}
	tr.UpsertService(lb("pooled", "203.0.113.1"))
	tr.UpsertService(lb("own", "203.0.113.2", mt.Annotate(model.ProtectionAnnotation, "{maxConnsPerSource: 5}")))
	tr.UpsertService(lb("elsewhere", "198.51.100.3"))
	tr.UpsertService(mt.Service("default", "inside", "10.96.0.4", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
	tr.Snapshot()
	pool := &model.Protection{SynProxy: true}
	of := func(a netip.Addr) *model.Protection {
		if netip.MustParsePrefix("203.0.113.0/24").Contains(a) {
			return pool
		}
		return nil
	}
	if n := tr.SetPoolProtection(of); n != 3 {
		t.Errorf("SetPoolProtection rebuilds %d Services, want the 3 LoadBalancer ones", n)
	}
	snap, ch := tr.Snapshot()
	got := map[string]string{}
	for _, sp := range snap.Sorted() {
		got[sp.Name.Name] = sp.Protection.String()
	}
	want := map[string]string{"pooled": "{synProxy: true}", "own": "{maxConnsPerSource: 5}", "elsewhere": "", "inside": ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("protections (-want +got):\n%s", d)
	}
	if _, ok := ch.Ports[spn("pooled", "http", model.TCP)]; !ok || len(ch.Ports) != 1 {
		t.Errorf("changed ports %v, want pooled's only", ch.Ports)
	}
	tr.SetPoolProtection(nil)
	snap, _ = tr.Snapshot()
	if p := snap.Port(spn("pooled", "http", model.TCP)).Protection; p != nil {
		t.Errorf("pools without protection: pooled keeps %v", p)
	}
}
