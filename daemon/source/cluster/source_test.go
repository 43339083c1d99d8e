package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/source/cache"
)

func web() *v1.Service {
	return mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0))
}

func webSlice(name, addr string) *discovery.EndpointSlice {
	return mt.Slice("default", name, "web", "http", v1.ProtocolTCP, 8080, mt.EP(addr))
}

func TestSourceFollowsAPI(t *testing.T) {
	ctx := context.Background()
	otherProxy := mt.Service("default", "other", "10.96.0.12", mt.Port("", v1.ProtocolTCP, 80, 80, 0))
	otherProxy.Labels = map[string]string{serviceProxyNameLabel: "someone-else"}
	client := fake.NewClientset(web(), webSlice("web-1", "10.244.1.5"), otherProxy)
	s := start(t, client, Options{}, nil)
	waitReady(t, s.src)

	if diff := cmp.Diff([]string{"eps default/web-1", "svc default/web"}, s.sink.keys()); diff != "" {
		t.Errorf("after sync (-want +got), a service-proxy-name Service must be left out:\n%s", diff)
	}
	if n := s.changed.Load(); n != 1 {
		t.Errorf("Changed called %d times after the sync, want 1", n)
	}

	api := mt.Service("default", "api", "10.96.0.11", mt.Port("", v1.ProtocolTCP, 443, 8443, 0))
	if _, err := client.CoreV1().Services("default").Create(ctx, api, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, webSlice("web-2", "10.244.2.5"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "new objects", func() bool { return len(s.sink.keys()) == 4 })

	moved := webSlice("web-1", "10.244.1.6")
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "updated slice", func() bool {
		s.sink.mu.Lock()
		defer s.sink.mu.Unlock()
		return s.sink.eps["default/web-1"].Endpoints[0].Addresses[0] == "10.244.1.6"
	})

	if err := client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.DiscoveryV1().EndpointSlices("default").Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "deletes", func() bool {
		return cmp.Equal(s.sink.keys(), []string{"eps default/web-1", "svc default/api"})
	})
	if n := s.changed.Load(); n < 6 {
		t.Errorf("Changed called %d times for 6 changes", n)
	}
	lk := s.src.Link()
	if !lk.Reachable || !lk.Synced || !lk.WatchesHealthy || lk.FromCache || lk.LastSuccess.IsZero() {
		t.Errorf("link after a healthy sync: %+v", lk)
	}
}

// The real tracker skips what the model skips: an ExternalName Service yields no ports.
func TestSourceFeedsTracker(t *testing.T) {
	ext := mt.Service("default", "db", "", mt.Port("", v1.ProtocolTCP, 5432, 5432, 0), mt.ExternalName("db.example.com"))
	client := fake.NewClientset(web(), webSlice("web-1", "10.244.1.5"), ext)
	tracker := model.NewTracker()
	src, err := New(client, tracker, Options{NodeName: "gw1", Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitReady(t, src)
	snap, _ := tracker.Snapshot()
	var got []string
	for _, sp := range snap.Sorted() {
		got = append(got, sp.Name.String())
	}
	if diff := cmp.Diff([]string{"default/web:http"}, got); diff != "" {
		t.Errorf("service ports (-want +got):\n%s", diff)
	}
}

func TestSourceHandlesTombstones(t *testing.T) {
	client := fake.NewClientset(web(), webSlice("web-1", "10.244.1.5"), webSlice("web-2", "10.244.2.5"))
	s := start(t, client, Options{}, nil)
	waitReady(t, s.src)
	// A delete missed while the watch was down reaches the handlers as a tombstone, with
	// the last known object or only its key.
	s.src.deleteService(toolscache.DeletedFinalStateUnknown{Key: "default/web", Obj: web()})
	s.src.deleteSlice(toolscache.DeletedFinalStateUnknown{Key: "default/web-2"})
	if diff := cmp.Diff([]string{"eps default/web-1"}, s.sink.keys()); diff != "" {
		t.Errorf("after tombstones (-want +got):\n%s", diff)
	}
}

func TestSourceServesFromCacheUntilAPIAnswers(t *testing.T) {
	dir := t.TempDir()
	saved := time.Date(2026, 2, 1, 8, 0, 0, 0, time.UTC)
	old := mt.Service("default", "old", "10.96.0.20", mt.Port("", v1.ProtocolTCP, 80, 80, 0))
	f := writeCache(t, dir, cache.State{
		SavedAt:        saved,
		Services:       []*v1.Service{old, web()},
		EndpointSlices: []*discovery.EndpointSlice{webSlice("web-1", "10.244.1.5")},
		Nodes:          []*v1.Node{node("n1", "192.168.1.11", "10.244.1.0/24")},
	})
	client := fake.NewClientset(web(), webSlice("web-9", "10.244.9.5"), node("n2", "192.168.1.12", "10.244.2.0/24"))
	var down outage
	down.on.Store(true)
	down.install(client)
	s := start(t, client, Options{Cache: f, SyncTimeout: 100 * time.Millisecond}, fastWriter)
	waitReady(t, s.src)

	if diff := cmp.Diff([]string{"eps default/web-1", "svc default/old", "svc default/web"}, s.sink.keys()); diff != "" {
		t.Errorf("from the cache (-want +got):\n%s", diff)
	}
	lk := s.src.Link()
	if !lk.FromCache || lk.CacheSince.IsZero() || !lk.CacheSavedAt.Equal(saved) || lk.Reachable || lk.Synced || lk.WatchesHealthy {
		t.Errorf("link while serving from the cache: %+v", lk)
	}
	if !strings.Contains(lk.LastError, "connection refused") {
		t.Errorf("link's last error %q, want the refused connection", lk.LastError)
	}
	if got := nodeNames(s.src.Nodes()); !cmp.Equal(got, []string{"n1"}) {
		t.Errorf("Nodes from the cache: %v, want [n1]", got)
	}

	down.on.Store(false)
	// The reflector retries after its backoff (under 2 s for the first retry).
	waitFor(t, "the API's state", func() bool {
		return cmp.Equal(s.sink.keys(), []string{"eps default/web-9", "svc default/web"})
	})
	waitFor(t, "the API's nodes", func() bool { return cmp.Equal(nodeNames(s.src.Nodes()), []string{"n2"}) })
	lk = s.src.Link()
	if lk.FromCache || !lk.Reachable || !lk.Synced {
		t.Errorf("link after the API answered: %+v", lk)
	}
	// And the API's state is what is cached now.
	waitFor(t, "the cache rewritten", func() bool {
		st, err := f.Load()
		return err == nil && len(st.Services) == 1 && len(st.Nodes) == 1 && st.Nodes[0].Name == "n2"
	})
}

func TestSourceIgnoresCorruptCache(t *testing.T) {
	dir := t.TempDir()
	f := cache.NewFile(dir)
	if err := os.WriteFile(f.Path(), []byte(`{"apiVersion":"edgegate.dev/v1","kind":"ClusterState","state":{"services":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(web())
	var down outage
	down.on.Store(true)
	down.install(client)
	s := start(t, client, Options{Cache: f, SyncTimeout: 50 * time.Millisecond}, nil)
	waitFor(t, "the sync timeout", func() bool { return s.src.Link().LastError != "" })
	select {
	case <-s.src.Ready():
		t.Fatal("ready from a corrupt cache")
	case <-time.After(200 * time.Millisecond):
	}
	if got := s.sink.keys(); len(got) != 0 {
		t.Errorf("a corrupt cache fed %v", got)
	}
	if lk := s.src.Link(); lk.FromCache {
		t.Errorf("link says FromCache for a corrupt cache: %+v", lk)
	}
	down.on.Store(false)
	waitReady(t, s.src)
	waitFor(t, "the API's state", func() bool { return cmp.Equal(s.sink.keys(), []string{"svc default/web"}) })
}

// TestSourceWithoutCacheWaitsForTheAPI: with neither the API server nor a cache there is no
// whole state, so the source is not ready (nothing is programmed, and the rules a previous
// run left keep forwarding) until the API server answers.
func TestSourceWithoutCacheWaitsForTheAPI(t *testing.T) {
	client := fake.NewClientset(web())
	var down outage
	down.on.Store(true)
	down.install(client)
	s := start(t, client, Options{Cache: cache.NewFile(filepath.Join(t.TempDir(), "none")), SyncTimeout: 50 * time.Millisecond}, nil)
	waitFor(t, "the sync timeout's warning", func() bool { return !s.src.Link().Reachable && s.src.Link().LastError != "" })
	select {
	case <-s.src.Ready():
		t.Fatal("ready with neither the API server nor a cache")
	case <-time.After(200 * time.Millisecond):
	}
	if got := s.sink.keys(); len(got) != 0 || s.changed.Load() != 0 {
		t.Errorf("with neither API nor cache: sink %v, %d Changed calls; want nothing", got, s.changed.Load())
	}
	down.on.Store(false)
	waitReady(t, s.src)
	waitFor(t, "the API's state", func() bool { return cmp.Equal(s.sink.keys(), []string{"svc default/web"}) })
}

func TestSourceSavesCache(t *testing.T) {
	f := cache.NewFile(t.TempDir())
	n1 := node("n1", "192.168.1.11", "10.244.1.0/24")
	n1.Status.Images = []v1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}
	n1.ResourceVersion = "42"
	svc := web()
	svc.Annotations = map[string]string{v1.LastAppliedConfigAnnotation: "{...}", "keep": "me"}
	svc.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	client := fake.NewClientset(svc, webSlice("web-1", "10.244.1.5"), n1)
	s := start(t, client, Options{Cache: f}, fastWriter)
	waitReady(t, s.src)
	var st cache.State
	waitFor(t, "the cache written", func() bool {
		var err error
		st, err = f.Load()
		return err == nil
	})
	waitFor(t, "the write reported", func() bool { return !s.src.Link().CacheWritten.IsZero() })
	if len(st.Services) != 1 || len(st.EndpointSlices) != 1 || len(st.Nodes) != 1 {
		t.Fatalf("cached %d services, %d slices, %d nodes; want 1 each", len(st.Services), len(st.EndpointSlices), len(st.Nodes))
	}
	if got := st.Services[0]; got.ManagedFields != nil || !cmp.Equal(got.Annotations, map[string]string{"keep": "me"}) {
		t.Errorf("cached service keeps managedFields %v / annotations %v", got.ManagedFields, got.Annotations)
	}
	if got := st.Nodes[0]; got.ResourceVersion != "" || got.Status.Images != nil || !cmp.Equal(got.Spec.PodCIDRs, []string{"10.244.1.0/24"}) {
		t.Errorf("cached node is not reduced to what routes need: %+v", got)
	}
}

func nodeNames(ns []*v1.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

func TestSourceNodes(t *testing.T) {
	ctx := context.Background()
	gw := node("gw1", "192.168.1.2")
	client := fake.NewClientset(node("n2", "192.168.1.12", "10.244.2.0/24"), node("n1", "192.168.1.11", "10.244.1.0/24"), gw)
	s := start(t, client, Options{}, nil)
	waitReady(t, s.src)
	waitFor(t, "nodes live", func() bool { return s.nodesChanged.Load() > 0 })
	if got := nodeNames(s.src.Nodes()); !cmp.Equal(got, []string{"gw1", "n1", "n2"}) {
		t.Errorf("Nodes: %v", got)
	}
	if own := s.src.OwnNode(); own == nil || own.Name != "gw1" {
		t.Errorf("OwnNode: %v", own)
	}
	before := s.nodesChanged.Load()

	// A heartbeat: conditions change, nothing routes read does.
	n1, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n1.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	n1.ResourceVersion = "7"
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A real change: a new address.
	n2, err := client.CoreV1().Nodes().Get(ctx, "n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n2.Status.Addresses[0].Address = "192.168.1.22"
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Events reach the handler in order: once the address change is seen, so was the
	// heartbeat before it.
	waitFor(t, "NodesChanged for n2's new address", func() bool { return s.nodesChanged.Load() > before })
	if got := s.nodesChanged.Load() - before; got != 1 {
		t.Errorf("NodesChanged called %d times for a heartbeat and an address change, want 1", got)
	}
	var addr string
	for _, n := range s.src.Nodes() {
		if n.Name == "n2" {
			addr = n.Status.Addresses[0].Address
		}
	}
	if addr != "192.168.1.22" {
		t.Errorf("n2's address %q after the change", addr)
	}
	for _, n := range s.src.Nodes() {
		if n.Status.Conditions != nil {
			t.Errorf("node %s keeps its conditions; only what routes need is kept", n.Name)
		}
	}

	if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n1 gone", func() bool { return cmp.Equal(nodeNames(s.src.Nodes()), []string{"gw1", "n2"}) })
}

// The gateway's own Node being marked for removal is a change NodesChanged reports (the
// daemon drains on it), although routes read nothing of it.
func TestSourceReportsOwnNodeMarkedForRemoval(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(node("gw1", "192.168.1.2"))
	s := start(t, client, Options{}, nil)
	waitReady(t, s.src)
	waitFor(t, "nodes live", func() bool { return s.nodesChanged.Load() > 0 })
	before := s.nodesChanged.Load()
	gw, err := client.CoreV1().Nodes().Get(ctx, "gw1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gw.Spec.Taints = append(gw.Spec.Taints, v1.Taint{Key: "ToBeDeletedByClusterAutoscaler", Effect: v1.TaintEffectNoSchedule})
	if _, err := client.CoreV1().Nodes().Update(ctx, gw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "NodesChanged for the taint", func() bool { return s.nodesChanged.Load() > before })
	if own := s.src.OwnNode(); own == nil || len(own.Spec.Taints) == 0 {
		t.Errorf("OwnNode after the taint: %v", own)
	}
}

// TestSlimSliceKeepsWhatTheProxyReads: the transform drops Pod references, hostnames and
// field ownership, and keeps what the tracker reads of an endpoint.
func TestSlimSliceKeepsWhatTheProxyReads(t *testing.T) {
	zone, host := "z1", "web-0"
	es := mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.244.1.5", mt.OnNode("n1"), mt.ZoneHints("z1"), mt.Terminating(true)))
	es.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}
	es.Endpoints[0].Zone, es.Endpoints[0].Hostname = &zone, &host
	es.Endpoints[0].TargetRef = &v1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0", UID: "u-1"}
	want := es.DeepCopy()
	want.ManagedFields = nil
	want.Endpoints[0].TargetRef, want.Endpoints[0].Hostname = nil, nil
	got, err := slimSlice(es)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("slimmed slice (-want +got):\n%s", diff)
	}
}

// TestSlimSliceSharesNames: endpoints on one node, in one slice or another, hold one copy of
// its name, and a slice's endpoints take exactly the room they need.
func TestSlimSliceSharesNames(t *testing.T) {
	slice := func(name string, addrs ...string) *discovery.EndpointSlice {
		es := mt.Slice("default", name, "web", "http", v1.ProtocolTCP, 8080)
		for _, a := range addrs {
			node, zone := "n1", "z1"
			es.Endpoints = append(es.Endpoints, discovery.Endpoint{Addresses: []string{a}, NodeName: &node, Zone: &zone})
		}
		return es
	}
	a, b := slice("web-1", "10.244.1.5", "10.244.1.6", "10.244.1.7"), slice("web-2", "10.244.1.8")
	var out []discovery.Endpoint
	for _, es := range []*discovery.EndpointSlice{a, b} {
		got, err := slimSlice(es)
		if err != nil {
			t.Fatal(err)
		}
		gs := got.(*discovery.EndpointSlice)
		if cap(gs.Endpoints) != len(gs.Endpoints) {
			t.Errorf("%s: room for %d endpoints, holds %d", gs.Name, cap(gs.Endpoints), len(gs.Endpoints))
		}
		out = append(out, gs.Endpoints...)
	}
	for _, e := range out[1:] {
		if e.NodeName != out[0].NodeName || e.Zone != out[0].Zone {
			t.Errorf("%s: node %p zone %p, want the first endpoint's %p %p", e.Addresses[0], e.NodeName, e.Zone, out[0].NodeName, out[0].Zone)
		}
		if *e.NodeName != "n1" || *e.Zone != "z1" {
			t.Errorf("%s: node %q zone %q", e.Addresses[0], *e.NodeName, *e.Zone)
		}
	}
}
