package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
	"github.com/edgegate/edgegate/daemon/kernel/route"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/node"
	"github.com/edgegate/edgegate/daemon/source/cache"
	source "github.com/edgegate/edgegate/daemon/source/cluster"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
)

// gatewayGroup is the group deploy/bootstrap-token.yaml gives the gateway's token and
// deploy/rbac.yaml binds.
const gatewayGroup = "system:bootstrappers:edgegate"

// requestLog records every request the gateway's client makes, as RBAC sees it.
type requestLog struct {
	mu       sync.Mutex
	requests map[authzv1.ResourceAttributes]bool
}

type recorder struct {
	rt  http.RoundTripper
	log *requestLog
}

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if a, ok := clustertest.Attributes(req); ok {
		a.Name = "" // deploy/'s roles grant by resource: check that the gateway may do a on any name
		r.log.mu.Lock()
		r.log.requests[a] = true
		r.log.mu.Unlock()
	}
	return r.rt.RoundTrip(req)
}

// checkRBAC asks the API server whether deploy/'s roles allow every kind of request the
// gateway made. A 403 seen by the gateway proves less: right after an apiserver restart its
// RBAC cache may still be filling.
func (l *requestLog) checkRBAC(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.requests) < 8 {
		t.Errorf("only %d kinds of requests recorded: %v", len(l.requests), l.requests)
	}
	for a := range l.requests {
		if ok, why := clustertest.GatewayAllowed(t, admin, gatewayGroup, a); !ok {
			t.Errorf("the gateway made a request deploy/rbac.yaml does not allow: %+v (%s)", a, why)
		}
	}
}

func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, within, 50*time.Millisecond, cond)
}

func clusterNode(name, ip, podCIDR string) *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}},
	}
}

// createNode creates n with its status (addresses), which a create ignores.
func createNode(t *testing.T, admin kubernetes.Interface, n *v1.Node) {
	t.Helper()
	created, err := admin.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = n.Status
	if _, err := admin.CoreV1().Nodes().UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// gateway is the daemon's cluster side as the lead wires it: source, membership, routes.
type gateway struct {
	src     *source.Source
	tracker *model.Tracker
	member  *node.Member
	routes  *node.Routes
	table   *route.Fake
	stop    context.CancelFunc
	done    sync.WaitGroup
}

func startGateway(t *testing.T, client kubernetes.Interface, stateDir string, table *route.Fake, syncTimeout time.Duration) *gateway {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	g := &gateway{tracker: model.NewTracker(), table: table}
	var programmed atomic.Bool
	var err error
	g.src, err = source.New(client, g.tracker, source.Options{
		NodeName: "gw1", Cache: cache.NewFile(stateDir), SyncTimeout: syncTimeout, Log: log.With("component", "cluster"),
		Changed:      func() { programmed.Store(true); g.member.Trigger() },
		NodesChanged: func() { g.routes.Trigger() },
	})
	if err != nil {
		t.Fatal(err)
	}
	g.member = node.NewMember(client, node.Config{
		Name: "gw1", Zone: "zone-a", InternalIPs: []netip.Addr{netip.MustParseAddr("192.168.1.2")}, Version: "v0.0.0-test",
		RenewInterval: time.Second,
	}, programmed.Load, log.With("component", "node"))
	g.routes = node.NewRoutes(table, "gw1", g.src.Nodes, log.With("component", "routes"))
	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	g.done.Go(func() { g.src.Run(ctx) })
	g.done.Go(func() {
		select {
		case <-g.src.Ready():
		case <-ctx.Done():
			return
		}
		g.done.Go(func() { g.member.Run(ctx) })
		g.routes.Run(ctx)
	})
	t.Cleanup(g.shutdown)
	return g
}

func (g *gateway) shutdown() {
	g.stop()
	g.done.Wait()
}

// endpoints returns "service:port -> addresses" for every ServicePort the tracker holds but
// the API server's own (default/kubernetes, which has no endpoints in this cluster).
func (g *gateway) endpoints() []string {
	snap, _ := g.tracker.Snapshot()
	var out []string
	for _, sp := range snap.Sorted() {
		if sp.Name.Namespace == "default" && sp.Name.Name == "kubernetes" {
			continue
		}
		var addrs []string
		for _, e := range sp.Endpoints {
			addrs = append(addrs, e.Addr.String())
		}
		out = append(out, sp.Name.String()+" -> "+strings.Join(addrs, ","))
	}
	return out
}

// TestJoinCluster runs the gateway's cluster side against a real kube-apiserver with only
// deploy/'s RBAC: it syncs Services and EndpointSlices, registers its Node, renews its
// Lease, follows Nodes with routes, rides out an apiserver outage, and starts from its cache
// while the apiserver is down.
func TestJoinCluster(t *testing.T) {
	c := clustertest.Start(t, cluster.Options{GatewayGroups: []string{gatewayGroup}})
	ctx := t.Context()
	admin := c.Client

	// The gateway's client exactly as the daemon builds it: API server URL, token file, CA.
	rc := gatewayConfig(t, c, c.GatewayToken)
	requests := requestLog{requests: map[authzv1.ResourceAttributes]bool{}}
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return recorder{rt, &requests} }
	gw, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.CoreV1().Services("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("before deploy/rbac.yaml the gateway may list Services (err %v): the test would prove nothing", err)
	}
	clear(requests.requests)
	create(t, admin, manifests(t, "rbac.yaml"))

	// A Service with three EndpointSlices, and two Nodes with pod CIDRs.
	svc := mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0))
	if _, err := admin.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		s := mt.Slice("default", fmt.Sprintf("web-%d", i), "web", "http", v1.ProtocolTCP, 8080, mt.EP(fmt.Sprintf("10.244.%d.5", i)))
		if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createNode(t, admin, clusterNode("n1", "192.168.1.11", "10.244.1.0/24"))
	createNode(t, admin, clusterNode("n2", "192.168.1.12", "10.244.2.0/24"))

	stateDir := filepath.Join(t.TempDir(), "state")
	table := route.NewFake()
	g := startGateway(t, gw, stateDir, table, 10*time.Second)
	waitUntil(t, "the web service with 3 slices", 30*time.Second, func() bool {
		return slices.Equal(g.endpoints(), []string{"default/web:http -> 10.244.1.5,10.244.2.5,10.244.3.5"})
	})
	waitUntil(t, "routes to n1 and n2", 30*time.Second, func() bool {
		return table.Dump() == "10.244.1.0/24 via 192.168.1.11 proto edgegate\n10.244.2.0/24 via 192.168.1.12 proto edgegate\n"
	})

	// The gateway's Node: role label, taint, Ready once the proxy has its state.
	var gwNode *v1.Node
	waitUntil(t, "gw1 Ready", 30*time.Second, func() bool {
		gwNode, err = admin.CoreV1().Nodes().Get(ctx, "gw1", metav1.GetOptions{})
		return err == nil && readyOf(gwNode) == v1.ConditionTrue
	})
	if _, ok := gwNode.Labels[node.RoleLabel]; !ok || gwNode.Labels[v1.LabelTopologyZone] != "zone-a" ||
		!slices.ContainsFunc(gwNode.Spec.Taints, func(t v1.Taint) bool { return t.Key == node.TaintKey && t.Effect == v1.TaintEffectNoSchedule }) {
		t.Errorf("gw1: labels %v taints %v", gwNode.Labels, gwNode.Spec.Taints)
	}
	lease, err := admin.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, "gw1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := lease.Spec.RenewTime.Time
	waitUntil(t, "a lease renewal", 10*time.Second, func() bool {
		l, err := admin.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, "gw1", metav1.GetOptions{})
		return err == nil && l.Spec.RenewTime.Time.After(renewed)
	})
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != gwNode.UID {
		t.Errorf("lease owner %v, want Node gw1 (%s)", lease.OwnerReferences, gwNode.UID)
	}

	// A slice moves to another service; a node goes, another comes.
	moved, err := admin.DiscoveryV1().EndpointSlices("default").Get(ctx, "web-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	moved.Labels[discovery.LabelServiceName] = "api"
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Update(ctx, moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := admin.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	createNode(t, admin, clusterNode("n3", "192.168.1.13", "10.244.3.0/24"))
	waitUntil(t, "web-3 gone from web", 30*time.Second, func() bool {
		return slices.Equal(g.endpoints(), []string{"default/web:http -> 10.244.1.5,10.244.2.5"})
	})
	waitUntil(t, "routes follow the nodes", 30*time.Second, func() bool {
		return table.Dump() == "10.244.2.0/24 via 192.168.1.12 proto edgegate\n10.244.3.0/24 via 192.168.1.13 proto edgegate\n"
	})

	// An outage: the link goes, the state stays; after it, changes arrive again.
	c.Stop()
	waitUntil(t, "the lost link reported", 60*time.Second, func() bool { return !g.src.Link().Reachable })
	if got := g.endpoints(); !slices.Equal(got, []string{"default/web:http -> 10.244.1.5,10.244.2.5"}) {
		t.Errorf("during the outage the tracker holds %v", got)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := admin.DiscoveryV1().EndpointSlices("default").Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the change after the outage", 90*time.Second, func() bool {
		return slices.Equal(g.endpoints(), []string{"default/web:http -> 10.244.1.5"})
	})
	waitUntil(t, "the link healthy again", 60*time.Second, func() bool {
		lk := g.src.Link()
		return lk.Reachable && lk.WatchesHealthy
	})

	// Draining marks the Node not ready.
	g.member.SetDraining(true)
	waitUntil(t, "gw1 NotReady while draining", 10*time.Second, func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, "gw1", metav1.GetOptions{})
		return err == nil && readyOf(n) == v1.ConditionFalse
	})

	// The gateway restarts while the apiserver is down: it serves from its cache, then
	// follows the apiserver again, including what changed while it was away.
	waitUntil(t, "the cache saved", 60*time.Second, func() bool {
		st, err := cache.NewFile(stateDir).Load()
		return err == nil && len(st.EndpointSlices) == 2 && len(st.Nodes) == 3
	})
	g.shutdown()
	c.Stop()
	g2 := startGateway(t, gw, stateDir, route.NewFake(), 2*time.Second)
	select {
	case <-g2.src.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the restarted gateway never became ready")
	}
	if lk := g2.src.Link(); !lk.FromCache {
		t.Errorf("restarted without the apiserver, link %+v, want FromCache", lk)
	}
	if got := g2.endpoints(); !slices.Equal(got, []string{"default/web:http -> 10.244.1.5"}) {
		t.Errorf("from the cache the tracker holds %v", got)
	}
	waitUntil(t, "routes from the cached nodes", 10*time.Second, func() bool {
		return g2.table.Dump() == "10.244.2.0/24 via 192.168.1.12 proto edgegate\n10.244.3.0/24 via 192.168.1.13 proto edgegate\n"
	})
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	extra := mt.Slice("default", "web-4", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.244.4.5"))
	if _, err := admin.DiscoveryV1().EndpointSlices("default").Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the apiserver's state after the cache", 90*time.Second, func() bool {
		return slices.Equal(g2.endpoints(), []string{"default/web:http -> 10.244.1.5,10.244.4.5"}) && !g2.src.Link().FromCache
	})

	g2.shutdown()
	requests.checkRBAC(t, admin)
}

func readyOf(n *v1.Node) v1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return ""
}
