package alloc_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgegate/edgegate/daemon/lb/alloc"
	"github.com/edgegate/edgegate/daemon/lb/pool"
)

// The lab's pools: site has 4 IPv4 and 2 IPv6 addresses and assigns them automatically;
// spare has one address, given only on request.
const labPools = `
pools:
- {name: site, addresses: [192.0.2.0/30, "2001:db8:1b::/127"], interfaces: [eth0]}
- {name: spare, addresses: [203.0.113.10], interfaces: [eth1], autoAssign: false}
`

func requireDualStack(s *v1.Service) {
	p := v1.IPFamilyPolicyRequireDualStack
	s.Spec.IPFamilyPolicy = &p
	s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
}

// TestAllocator drives one allocator, as the gateway's identity, through a Service's life:
// allocation with an Event, dual-stack, exhaustion with a Warning, reuse of a released
// address, requested addresses, type changes, other classes, and pools changing, broken and
// deleted.
func TestAllocator(t *testing.T) {
	e := newEnv(t, labPools)
	g := e.gateway(t, "gw-a")
	// The gateway's pools watcher, shared with the allocator as the daemon shares it with the
	// announcer.
	w := startWatcher(t, g, testLogger(t).With("gateway", g.name, "component", "pools"))
	a := startAllocator(t, g, alloc.Options{Pools: w})
	waitFor(t, "gw-a to lead", 30*time.Second, a.Leading)
	const wantPools = "site: 192.0.2.0/30,2001:db8:1b::/127 on eth0"
	if got := a.Pools().String(); !strings.Contains(got, wantPools) {
		t.Fatalf("pools %q, want %q in them", got, wantPools)
	}

	t.Log("a Service gets the lowest address and an IPAllocated event")
	e.create(t, lbService("web"))
	e.waitIngress(t, "web", "192.0.2.0/VIP")
	ev := e.waitEvent(t, "web", alloc.ReasonAllocated, "assigned 192.0.2.0 (pool site)")
	web := e.service(t, "web")
	if ev.Type != v1.EventTypeNormal || ev.InvolvedObject.UID != web.UID || ev.ReportingInstance != "gw-a" || ev.Source.Host != "gw-a" {
		t.Errorf("IPAllocated event: type %s, about %s, reported by %q / %q", ev.Type, ev.InvolvedObject.UID, ev.ReportingInstance, ev.Source.Host)
	}

	t.Log("RequireDualStack gets one address per family, in the Service's order")
	e.create(t, lbService("dual", requireDualStack))
	e.waitIngress(t, "dual", "192.0.2.1/VIP 2001:db8:1b::/VIP")

	t.Log("the pool runs out: a Warning event names the Service and the pool")
	e.create(t, lbService("fill-a"))
	e.waitIngress(t, "fill-a", "192.0.2.2/VIP")
	e.create(t, lbService("fill-b"))
	e.waitIngress(t, "fill-b", "192.0.2.3/VIP")
	e.create(t, lbService("extra"))
	ev = e.waitEvent(t, "extra", alloc.ReasonFailed, `service apps/extra: no free IPv4 address left in address pool "site"`)
	if ev.Type != v1.EventTypeWarning {
		t.Errorf("AllocationFailed event of type %s", ev.Type)
	}
	e.waitIngress(t, "extra", "")

	t.Log("a deleted Service's address goes to the waiting one")
	e.delete(t, "fill-a")
	e.waitIngress(t, "extra", "192.0.2.2/VIP")
	e.waitEvent(t, "extra", alloc.ReasonAllocated, "assigned 192.0.2.2 (pool site)")

	t.Log("requested addresses: from a requested-only pool, and one in use")
	e.create(t, lbService("pinned", func(s *v1.Service) { s.Spec.LoadBalancerIP = "203.0.113.10" }))
	e.waitIngress(t, "pinned", "203.0.113.10/VIP")
	e.create(t, lbService("taken", func(s *v1.Service) {
		s.Annotations = map[string]string{pool.AnnotationIPs: "192.0.2.0"}
	}))
	e.waitEvent(t, "taken", alloc.ReasonFailed, "service apps/taken: requested IP 192.0.2.0 is in use by Service apps/web")

	t.Log("a Service that stops being a LoadBalancer releases its address")
	e.create(t, lbService("late"))
	e.waitEvent(t, "late", alloc.ReasonFailed, "no free IPv4 address left")
	fillB := e.service(t, "fill-b")
	fillB.Spec.Type = v1.ServiceTypeClusterIP
	if _, err := e.admin.CoreV1().Services(appNS).Update(t.Context(), fillB, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitIngress(t, "late", "192.0.2.3/VIP")
	e.waitIngress(t, "fill-b", "")

	t.Log("Services of another class, or of none, are left alone; statuses are written only when they change")
	e.create(t, lbService("other-class", func(s *v1.Service) { c := "example.com/lb"; s.Spec.LoadBalancerClass = &c }))
	e.create(t, lbService("no-class", func(s *v1.Service) { s.Spec.LoadBalancerClass = nil }))
	before := e.service(t, "web").ResourceVersion
	// The probe's Warning shows that a sync ran after both were created.
	e.create(t, lbService("probe"))
	e.waitEvent(t, "probe", alloc.ReasonFailed, "no free IPv4 address left")
	for _, name := range []string{"other-class", "no-class"} {
		if got := ingress(e.service(t, name)); got != "" {
			t.Errorf("service %s (not edgegate's) got status %q", name, got)
		}
		for _, r := range []string{alloc.ReasonAllocated, alloc.ReasonFailed} {
			if evs := e.events(t, name, r); len(evs) > 0 {
				t.Errorf("service %s (not edgegate's) got a %s event: %s", name, r, evs[0].Message)
			}
		}
	}
	if after := e.service(t, "web").ResourceVersion; after != before {
		t.Errorf("service web was written again (resourceVersion %s -> %s) though its addresses did not change", before, after)
	}
	if n := g.writesTo("web"); n != 1 {
		t.Errorf("%d status writes to web, want 1", n)
	}
	if evs := e.events(t, "web", alloc.ReasonAllocated); len(evs) != 1 {
		t.Errorf("%d IPAllocated events on web, want 1", len(evs))
	}

	t.Log("a bad pools document keeps the last good pools, and allocation goes on from them")
	good := w.Pools()
	e.writePools(t, "pools:\n- {name: site, addresses: [bogus], interfaces: [eth0]}\n")
	waitFor(t, "the watcher to report the bad document", 30*time.Second, func() bool { return w.State().Err != nil })
	if err := w.State().Err.Error(); !strings.Contains(err, `configmap kube-system/edgegate-lb-pools: pool "site": addresses[0]: "bogus"`) {
		t.Errorf("error %q does not name the ConfigMap, the pool and the field", err)
	}
	if !w.Pools().Equal(good) || !a.Pools().Equal(good) {
		t.Errorf("pools changed to %s on a bad document", w.Pools())
	}
	e.delete(t, "dual")
	// probe is the oldest Service waiting for any address; taken wants 192.0.2.0 only.
	e.waitIngress(t, "probe", "192.0.2.1/VIP")

	t.Log("a good document takes effect: waiting Services get addresses")
	e.writePools(t, `
pools:
- {name: site, addresses: [192.0.2.0/29, "2001:db8:1b::/127"], interfaces: [eth0]}
- {name: spare, addresses: [203.0.113.10], interfaces: [eth1], autoAssign: false}
`)
	e.create(t, lbService("wider"))
	e.waitIngress(t, "wider", "192.0.2.4/VIP")
	if w.State().Err != nil {
		t.Errorf("watcher still reports %v after a good document", w.State().Err)
	}

	t.Log("a deleted ConfigMap keeps the pools too")
	if err := e.admin.CoreV1().ConfigMaps(pool.ConfigMapNamespace).Delete(t.Context(), pool.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watcher to notice the deletion", 30*time.Second, func() bool { return w.State().Err != nil })
	e.create(t, lbService("after-delete"))
	e.waitIngress(t, "after-delete", "192.0.2.5/VIP")
	e.waitIngress(t, "web", "192.0.2.0/VIP")

	e.checkRBAC(t, g)
	// deploy/rbac.yaml's allocator rules are exact: nothing next to them is allowed.
	for _, a := range []authzv1.ResourceAttributes{
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-controller-manager"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: "kube-scheduler"},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system"},
		{Verb: "delete", Group: "coordination.k8s.io", Resource: "leases", Namespace: "kube-system", Name: alloc.DefaultLease},
		{Verb: "list", Resource: "configmaps", Namespace: "kube-system"},
		{Verb: "watch", Resource: "configmaps", Namespace: "kube-system", Name: "kube-proxy"},
		{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: pool.ConfigMapName},
		{Verb: "update", Resource: "configmaps", Namespace: "kube-system", Name: pool.ConfigMapName},
		{Verb: "list", Resource: "configmaps", Namespace: appNS, Name: pool.ConfigMapName},
		{Verb: "update", Resource: "services", Namespace: appNS, Name: "web"},
		{Verb: "patch", Resource: "services", Subresource: "status", Namespace: appNS, Name: "web"},
		{Verb: "patch", Resource: "events", Namespace: appNS},
	} {
		if ok, _ := e.allowed(t, a); ok {
			t.Errorf("deploy/rbac.yaml allows the gateways %+v, which the allocator never needs", a)
		}
	}
}

// TestLeaderElection runs two allocators with different identities: only the leader
// writes; a leader that stops hands over at once; a leader cut off from the API server is
// replaced once its Lease expires, and stays a follower when it comes back. The two never
// lead at the same time.
func TestLeaderElection(t *testing.T) {
	e := newEnv(t, labPools)
	ga, gb := e.gateway(t, "gw-a"), e.gateway(t, "gw-b")
	a := startAllocator(t, ga, alloc.Options{})
	waitFor(t, "gw-a to lead", 30*time.Second, a.Leading)
	b := startAllocator(t, gb, alloc.Options{})

	var both atomic.Bool
	monitorCtx, stopMonitor := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var current atomic.Pointer[allocator]
	current.Store(a)
	wg.Go(func() {
		for monitorCtx.Err() == nil {
			if current.Load().Leading() && b.Leading() {
				both.Store(true)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	defer func() { stopMonitor(); wg.Wait() }()

	// A follower reads the pools too: the announcer needs them on every gateway.
	waitFor(t, "gw-b to read the pools", 30*time.Second, func() bool { return b.Pools().Len() == 2 })
	if b.Leading() {
		t.Fatal("gw-b leads while gw-a holds the Lease")
	}

	e.create(t, lbService("s1"))
	e.waitIngress(t, "s1", "192.0.2.0/VIP")
	e.waitEvent(t, "s1", alloc.ReasonAllocated, "assigned 192.0.2.0")
	e.waitHolder(t, "gw-a")
	if n := ga.writesTo("s1"); n != 1 {
		t.Errorf("gw-a wrote s1's status %d times, want 1", n)
	}
	if w, ev := gb.totals(); w != 0 || ev != 0 {
		t.Errorf("the follower gw-b wrote %d statuses and %d events", w, ev)
	}

	t.Log("the leader stops: it releases the Lease and gw-b takes over")
	a.halt()
	waitFor(t, "gw-b to lead", 30*time.Second, b.Leading)
	e.waitHolder(t, "gw-b")
	aw, aev := ga.totals()
	e.create(t, lbService("s2"))
	e.waitIngress(t, "s2", "192.0.2.1/VIP")
	e.waitEvent(t, "s2", alloc.ReasonAllocated, "assigned 192.0.2.1")
	if n := gb.writesTo("s2"); n != 1 {
		t.Errorf("gw-b wrote s2's status %d times, want 1", n)
	}
	if w, ev := ga.totals(); w != aw || ev != aev {
		t.Errorf("gw-a wrote after it stopped: %d -> %d statuses, %d -> %d events", aw, w, aev, ev)
	}

	t.Log("gw-a comes back as a follower; then the leader gw-b loses the API server")
	a2 := startAllocator(t, ga, alloc.Options{})
	waitFor(t, "gw-a to read the pools", 30*time.Second, func() bool { return a2.Pools().Len() == 2 })
	current.Store(a2)
	if a2.Leading() {
		t.Fatal("gw-a leads while gw-b holds the Lease")
	}
	gb.cut.Store(true)
	waitFor(t, "gw-b to give up leading", 30*time.Second, func() bool { return !b.Leading() })
	waitFor(t, "gw-a to lead again", 30*time.Second, a2.Leading)
	e.waitHolder(t, "gw-a")
	bw, bev := gb.totals()
	e.create(t, lbService("s3"))
	e.waitIngress(t, "s3", "192.0.2.2/VIP")
	if n := ga.writesTo("s3"); n != 1 {
		t.Errorf("gw-a wrote s3's status %d times, want 1", n)
	}

	t.Log("gw-b is back and follows")
	gb.cut.Store(false)
	waitFor(t, "gw-b to reach the API server again", 30*time.Second, func() bool {
		l, err := gb.CoordinationV1().Leases(pool.ConfigMapNamespace).Get(t.Context(), alloc.DefaultLease, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil
	})
	e.create(t, lbService("s4"))
	e.waitIngress(t, "s4", "192.0.2.3/VIP")
	e.waitHolder(t, "gw-a")
	if b.Leading() {
		t.Error("gw-b leads again though gw-a holds the Lease")
	}
	if n := ga.writesTo("s4"); n != 1 {
		t.Errorf("gw-a wrote s4's status %d times, want 1", n)
	}
	if w, ev := gb.totals(); w != bw || ev != bev {
		t.Errorf("gw-b wrote after it lost the Lease: %d -> %d statuses, %d -> %d events", bw, w, bev, ev)
	}
	if both.Load() {
		t.Error("gw-a and gw-b were allocating at the same time")
	}
	e.checkRBAC(t, ga, gb)
}

// waitHolder waits until the allocator's Lease names the gateway.
func (e *env) waitHolder(t *testing.T, id string) {
	t.Helper()
	var holder string
	waitFor(t, "the Lease to be held by "+id, 30*time.Second, func() bool {
		l, err := e.admin.CoordinationV1().Leases(pool.ConfigMapNamespace).Get(t.Context(), alloc.DefaultLease, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		holder = *l.Spec.HolderIdentity
		return holder == id
	})
}

// TestPoolsConfigMapLifecycle starts with no ConfigMap: the allocator leads but leaves every
// Service as it is, including one that holds an address from elsewhere (as MetalLB leaves
// it). A ConfigMap without the key changes nothing; a good one allocates, and the Service
// that held an address of a pool keeps it, with nothing to write.
func TestPoolsConfigMapLifecycle(t *testing.T) {
	e := newEnv(t, "")
	g := e.gateway(t, "gw-a")

	// Written before any allocator runs, as MetalLB would have; the API server defaults
	// ipMode to VIP.
	e.create(t, lbService("migrated"))
	migrated := e.service(t, "migrated")
	migrated.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "192.0.2.3"}}
	if _, err := e.admin.CoreV1().Services(appNS).UpdateStatus(t.Context(), migrated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitIngress(t, "migrated", "192.0.2.3/VIP")
	e.create(t, lbService("fresh"))

	w := startWatcher(t, g, testLogger(t).With("component", "pools"))
	a := startAllocator(t, g, alloc.Options{Pools: w})
	waitFor(t, "gw-a to lead", 30*time.Second, a.Leading)
	waitFor(t, "the watcher to have looked for the ConfigMap", 30*time.Second, func() bool { return w.State().Synced })
	if st := w.State(); st.Loaded || st.Err != nil || st.Pools.Len() != 0 {
		t.Fatalf("without a ConfigMap: loaded %v, error %v, pools %s", st.Loaded, st.Err, st.Pools)
	}

	t.Log("a ConfigMap without the key is reported and changes nothing")
	changed := w.State().Changed
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pool.ConfigMapName}, Data: map[string]string{"pool.yaml": labPools}}
	if _, err := e.admin.CoreV1().ConfigMaps(pool.ConfigMapNamespace).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher did not notice the ConfigMap")
	}
	if st := w.State(); st.Loaded || st.Err == nil || !strings.Contains(st.Err.Error(), "configmap kube-system/edgegate-lb-pools: no key pools.yaml") {
		t.Fatalf("ConfigMap without its key: loaded %v, error %v", st.Loaded, st.Err)
	}
	// The allocator has seen both Services (it leads, so its cache has synced) and a
	// pools change since: nothing is written while there are no pools.
	e.create(t, lbService("probe"))
	time.Sleep(2 * testRetryPeriod)
	for _, name := range []string{"fresh", "probe"} {
		if got := ingress(e.service(t, name)); got != "" {
			t.Errorf("service %s got %q with no pools configured", name, got)
		}
	}
	if w, ev := g.totals(); w != 0 || ev != 0 {
		t.Errorf("with no pools the allocator wrote %d statuses and %d events", w, ev)
	}

	t.Log("good pools: the held address is kept, the others allocated oldest first")
	e.writePools(t, labPools)
	e.waitIngress(t, "fresh", "192.0.2.0/VIP")
	e.waitIngress(t, "probe", "192.0.2.1/VIP")
	e.waitEvent(t, "probe", alloc.ReasonAllocated, "assigned 192.0.2.1 (pool site)")
	if got := ingress(e.service(t, "migrated")); got != "192.0.2.3/VIP" {
		t.Errorf("service migrated has %q, want the address it held", got)
	}
	if n := g.writesTo("migrated"); n != 0 {
		t.Errorf("service migrated's status, already right, was written %d times", n)
	}
	e.checkRBAC(t, g)
}
