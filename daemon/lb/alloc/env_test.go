package alloc_test

// The cluster tier: these tests run the allocator against the real kube-apiserver that
// lab/cluster builds, with the gateway's token and nothing but deploy/rbac.yaml's rights.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
	"github.com/edgegate/edgegate/daemon/lb/alloc"
	"github.com/edgegate/edgegate/daemon/lb/pool"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
)

// gatewayGroup is the group deploy/rbac.yaml binds.
const gatewayGroup = "system:bootstrappers:edgegate"

const appNS = "apps"

// Short election timings, so that takeovers happen within seconds.
const (
	testLeaseDuration = 4 * time.Second
	testRenewDeadline = 3 * time.Second
	testRetryPeriod   = 500 * time.Millisecond
)

// env is a cluster with deploy/rbac.yaml applied, a namespace for Services and the pools
// ConfigMap.
type env struct {
	c     *cluster.Cluster
	admin kubernetes.Interface
}

// newEnv starts a cluster, applies deploy/rbac.yaml, and writes poolsDoc as the pools
// ConfigMap unless it is empty.
func newEnv(t *testing.T, poolsDoc string) *env {
	t.Helper()
	c := clustertest.Start(t, cluster.Options{GatewayGroups: []string{gatewayGroup}})
	e := &env{c: c, admin: c.Client}
	probe := e.gateway(t, "probe")
	// Without deploy/rbac.yaml the gateway's token may do nothing, or "works with
	// deploy/rbac.yaml" would prove nothing.
	if _, err := probe.CoreV1().ConfigMaps(pool.ConfigMapNamespace).List(t.Context(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", pool.ConfigMapName).String(),
	}); !apierrors.IsForbidden(err) {
		t.Fatalf("before deploy/rbac.yaml the gateway may list the pools ConfigMap (err %v)", err)
	}
	clustertest.ApplyFile(t, e.admin, "../../../deploy/rbac.yaml")
	e.waitRBAC(t)
	if _, err := e.admin.CoreV1().Namespaces().Create(t.Context(), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if poolsDoc != "" {
		e.writePools(t, poolsDoc)
	}
	return e
}

// waitRBAC waits until the authorizer has deploy/rbac.yaml's allocator rules.
func (e *env) waitRBAC(t *testing.T) {
	t.Helper()
	want := []authzv1.ResourceAttributes{
		{Verb: "watch", Resource: "configmaps", Namespace: pool.ConfigMapNamespace, Name: pool.ConfigMapName},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: pool.ConfigMapNamespace, Name: alloc.DefaultLease},
		{Verb: "update", Resource: "services", Subresource: "status", Namespace: appNS},
	}
	waitFor(t, "deploy/rbac.yaml in effect", 30*time.Second, func() bool {
		for _, a := range want {
			if ok, _ := e.allowed(t, a); !ok {
				return false
			}
		}
		return true
	})
}

// allowed asks the API server whether the gateway's identity may do a.
func (e *env) allowed(t *testing.T, a authzv1.ResourceAttributes) (bool, string) {
	t.Helper()
	return clustertest.GatewayAllowed(t, e.admin, gatewayGroup, a)
}

// writePools creates or replaces the pools ConfigMap.
func (e *env) writePools(t *testing.T, doc string) {
	t.Helper()
	cms := e.admin.CoreV1().ConfigMaps(pool.ConfigMapNamespace)
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pool.ConfigMapName}, Data: map[string]string{pool.ConfigMapKey: doc}}
	if _, err := cms.Create(t.Context(), cm, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = cms.Update(t.Context(), cm, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
}

// gw is one gateway's client: it records every request as RBAC sees it, counts the status
// writes and Events that reached the API server, and can be cut off (a partition).
type gw struct {
	kubernetes.Interface
	name string
	cut  atomic.Bool

	mu        sync.Mutex
	requests  map[authzv1.ResourceAttributes]int
	forbidden []string
	writes    map[string]int // successful UpdateStatus per Service
	events    int            // successful Event creates
}

var errCut = errors.New("test partition: the gateway cannot reach the API server")

func (e *env) gateway(t *testing.T, name string) *gw {
	t.Helper()
	g := &gw{name: name, requests: map[authzv1.ResourceAttributes]int{}, writes: map[string]int{}}
	cfg := e.c.GatewayConfig()
	cfg.UserAgent = "edgegate-test/" + name
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			if g.cut.Load() {
				return nil, errCut
			}
			a, isResource := clustertest.Attributes(req)
			resp, err := rt.RoundTrip(req)
			if err != nil || !isResource {
				return resp, err
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			g.requests[a]++
			if resp.StatusCode == http.StatusForbidden {
				g.forbidden = append(g.forbidden, fmt.Sprintf("%+v", a))
			}
			if resp.StatusCode < 300 {
				switch {
				case a.Verb == "update" && a.Resource == "services" && a.Subresource == "status":
					g.writes[a.Namespace+"/"+a.Name]++
				case a.Verb == "create" && a.Resource == "events":
					g.events++
				}
			}
			return resp, nil
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g.Interface = cs
	return g
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// writesTo is how many status writes of this gateway reached svc.
func (g *gw) writesTo(svc string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.writes[appNS+"/"+svc]
}

func (g *gw) totals() (writes, events int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, n := range g.writes {
		writes += n
	}
	return writes, g.events
}

// checkRBAC fails for any request of the gateway the API server refused, asks the API
// server whether deploy/rbac.yaml allows each kind of request it made, and requires the
// kinds that show the allocator at work.
func (e *env) checkRBAC(t *testing.T, gws ...*gw) {
	t.Helper()
	seen := map[authzv1.ResourceAttributes]int{}
	for _, g := range gws {
		g.mu.Lock()
		for _, f := range g.forbidden {
			t.Errorf("gateway %s: the API server refused %s", g.name, f)
		}
		for a, n := range g.requests {
			seen[a] += n
		}
		g.mu.Unlock()
	}
	var kinds []string
	for a, n := range seen {
		kinds = append(kinds, fmt.Sprintf("%s %s/%s/%s ns=%q name=%q ×%d", a.Verb, a.Group, a.Resource, a.Subresource, a.Namespace, a.Name, n))
		if ok, why := e.allowed(t, a); !ok {
			t.Errorf("deploy/rbac.yaml does not allow a request the allocator made: %+v (%s)", a, why)
		}
	}
	slices.Sort(kinds)
	t.Logf("requests of the gateways, as RBAC sees them:\n  %s", strings.Join(kinds, "\n  "))
	lease := func(verb string) authzv1.ResourceAttributes {
		return authzv1.ResourceAttributes{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: pool.ConfigMapNamespace, Name: alloc.DefaultLease}
	}
	for _, a := range []authzv1.ResourceAttributes{
		{Verb: "watch", Resource: "configmaps", Namespace: pool.ConfigMapNamespace, Name: pool.ConfigMapName},
		lease("get"), lease("update"),
		{Verb: "watch", Resource: "services"},
	} {
		if seen[a] == 0 {
			t.Errorf("no %+v request seen: the check did not see the allocator at work", a)
		}
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, within, 50*time.Millisecond, cond)
}

// testLogger logs into the test's output (shown with -v or on failure) until the test's
// cleanup ends; client-go may still log from a goroutine after that, which is dropped.
func testLogger(t *testing.T) *slog.Logger { return testkit.Logger(t, nil) }

// allocator is a running Controller.
type allocator struct {
	*alloc.Controller
	stop context.CancelFunc
	done chan struct{}
}

// startWatcher runs g's pools watcher until the test ends.
func startWatcher(t *testing.T, g *gw, log *slog.Logger) *alloc.Watcher {
	w := alloc.NewWatcher(g, alloc.WatcherOptions{Log: log})
	testkit.GoErr(t, "pools watcher", w.Run)
	return w
}

func startAllocator(t *testing.T, g *gw, o alloc.Options) *allocator {
	t.Helper()
	o.Client = g
	o.Identity = g.name
	o.Log = testLogger(t).With("gateway", g.name)
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = testLeaseDuration, testRenewDeadline, testRetryPeriod
	c, err := alloc.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	a := &allocator{Controller: c, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("allocator %s: %v", g.name, err)
		}
	}()
	t.Cleanup(a.halt)
	return a
}

// halt stops the allocator and waits until Run has returned.
func (a *allocator) halt() {
	a.stop()
	<-a.done
}

// lbService is a LoadBalancer Service of edgegate's class in appNS.
func lbService(name string, mods ...func(*v1.Service)) *v1.Service {
	class := pool.Class
	s := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeLoadBalancer, LoadBalancerClass: &class,
			Selector: map[string]string{"app": name},
			Ports:    []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func (e *env) create(t *testing.T, svc *v1.Service) {
	t.Helper()
	if _, err := e.admin.CoreV1().Services(svc.Namespace).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s: %v", svc.Name, err)
	}
}

func (e *env) delete(t *testing.T, name string) {
	t.Helper()
	if err := e.admin.CoreV1().Services(appNS).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete service %s: %v", name, err)
	}
}

func (e *env) service(t *testing.T, name string) *v1.Service {
	t.Helper()
	s, err := e.admin.CoreV1().Services(appNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service %s: %v", name, err)
	}
	return s
}

// ingress is the Service's status.loadBalancer.ingress as "ip/mode" words.
func ingress(s *v1.Service) string {
	var out []string
	for _, i := range s.Status.LoadBalancer.Ingress {
		mode := "-"
		if i.IPMode != nil {
			mode = string(*i.IPMode)
		}
		out = append(out, i.IP+"/"+mode)
	}
	return strings.Join(out, " ")
}

// waitIngress waits until the Service's status says want ("" for none).
func (e *env) waitIngress(t *testing.T, name, want string) {
	t.Helper()
	var got string
	deadline := time.Now().Add(30 * time.Second)
	for {
		if got = ingress(e.service(t, name)); got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("service %s: status.loadBalancer.ingress is %q, want %q", name, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// events lists the Service's Events with that reason.
func (e *env) events(t *testing.T, svc, reason string) []v1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.name": svc, "involvedObject.kind": "Service", "reason": reason}.AsSelector().String()
	l, err := e.admin.CoreV1().Events(appNS).List(t.Context(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// waitEvent waits for an Event of that reason on the Service whose message contains msg.
func (e *env) waitEvent(t *testing.T, svc, reason, msg string) v1.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var have []string
		for _, ev := range e.events(t, svc, reason) {
			if strings.Contains(ev.Message, msg) {
				return ev
			}
			have = append(have, ev.Message)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event on service %s saying %q; there are %q", reason, svc, msg, have)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
