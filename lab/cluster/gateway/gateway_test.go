package gateway

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/node"
	"github.com/edgegate/edgegate/daemon/source/cache"
	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/labtest"
)

const (
	b1 = "backend-1"
	b2 = "backend-2"
	b3 = "backend-3"
)

// toBeDeletedTaint is the cluster autoscaler's mark on a Node it is about to remove.
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// TestGatewayInCluster joins the edgegate binary to a real kube-apiserver with only
// deploy/rbac.yaml's permissions and follows what the cluster says with real traffic. One lab,
// one cluster and (until offline-first) one daemon serve every step: an apiserver start takes
// 10–30 s on these machines. Each step uses Services, addresses and Nodes of its own.
func TestGatewayInCluster(t *testing.T) {
	if *attach != "" {
		t.Fatal("TestGatewayInCluster restarts the apiserver and reads its audit log: it needs a cluster of its own, not -edgegate.attach")
	}
	e := newEnv(t)
	l := e.lab
	d := labtest.StartDaemon(t, l.Gateway, e.daemonArgs()...)

	t.Run("services-and-endpointslices", func(t *testing.T) { servicesFollow(t, e) })
	t.Run("slice-moves-between-services", func(t *testing.T) { sliceMoves(t, e) })
	t.Run("gateway-node-and-lease", func(t *testing.T) { gatewayNode(t, e) })
	t.Run("drain-on-autoscaler-taint", func(t *testing.T) { drain(t, e) })
	t.Run("pod-cidr-routes", func(t *testing.T) { podRoutes(t, e) })
	t.Run("apiserver-outage", func(t *testing.T) { outage(t, e) })
	t.Run("offline-first", func(t *testing.T) { offlineFirst(t, e, d) })
	t.Run("rbac-no-request-refused", func(t *testing.T) {
		// After the daemons stopped, so their last requests (the NotReady post) count too.
		e.audit.checkGatewayRequests(t, gatewayUser)
	})
}

// servicesFollow: a ClusterIP+NodePort Service with three EndpointSlices, changed and deleted
// through the API; TCP and UDP through the gateway follow.
func servicesFollow(t *testing.T, e *env) {
	l := e.lab
	e.createService(t, service("web", "10.96.10.10", 30080),
		slice("web-1", "web", 1), slice("web-2", "web", 2), slice("web-3", "web", 3))
	follows(t, l.Client, "web's ClusterIP reaches the three slices' backends", "10.96.10.10:80", "10.96.10.10:53", b1, b2, b3)
	follows(t, l.Client, "web's node ports reach the three slices' backends", "10.200.1.1:30080", "10.200.1.1:30081", b1, b2, b3)

	e.updateSlice(t, "web-3", func(s *discovery.EndpointSlice) { s.Endpoints = endpoints() })
	follows(t, l.Client, "backend-3 removed from web-3: the ClusterIP follows", "10.96.10.10:80", "10.96.10.10:53", b1, b2)
	follows(t, l.Client, "backend-3 removed from web-3: the node ports follow", "10.200.1.1:30080", "10.200.1.1:30081", b1, b2)

	e.updateService(t, "web", func(s *v1.Service) {
		s.Spec.Ports[0].Port = 81
		s.Spec.Ports[0].NodePort = 30082
	})
	follows(t, l.Client, "web's TCP port moved to 81", "10.96.10.10:81", "", b1, b2)
	follows(t, l.Client, "web's TCP node port moved to 30082", "10.200.1.1:30082", "", b1, b2)
	// Nothing listens on the gateway's old node port: the kernel resets the connection.
	outcome(t, l.Client, "10.200.1.1:30080", lab.Refused)
	unanswered(t, l.Client, "10.96.10.10:80")

	// A Service whose endpoints are all gone is rejected (kube-proxy's semantics) ...
	for _, s := range []string{"web-1", "web-2", "web-3"} {
		e.deleteSlice(t, s)
	}
	outcome(t, l.Client, "10.96.10.10:81", lab.Refused)
	outcome(t, l.Client, "10.200.1.1:30082", lab.Refused)
	// ... and once the Service itself is deleted, its node port is closed on the gateway and
	// its ClusterIP is nothing the gateway knows of.
	if err := e.admin.CoreV1().Services(testNamespace).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	unanswered(t, l.Client, "10.96.10.10:81")
	outcome(t, l.Client, "10.200.1.1:30082", lab.Refused)
}

// sliceMoves: an EndpointSlice's kubernetes.io/service-name label changes from one Service to
// another; both Services' traffic follows.
func sliceMoves(t *testing.T, e *env) {
	l := e.lab
	e.createService(t, service("left", "10.96.10.20", 0), slice("left-a", "left", 1, 2), slice("left-b", "left", 3))
	e.createService(t, service("right", "10.96.10.21", 0), slice("right-a", "right", 1))
	follows(t, l.Client, "left reaches its two slices' backends", "10.96.10.20:80", "10.96.10.20:53", b1, b2, b3)
	follows(t, l.Client, "right reaches its slice's backend", "10.96.10.21:80", "10.96.10.21:53", b1)

	e.updateSlice(t, "left-b", func(s *discovery.EndpointSlice) { s.Labels[discovery.LabelServiceName] = "right" })
	follows(t, l.Client, "left-b moved away: left follows", "10.96.10.20:80", "10.96.10.20:53", b1, b2)
	follows(t, l.Client, "left-b moved in: right follows", "10.96.10.21:80", "10.96.10.21:53", b1, b3)
}

// gatewayNode: the gateway's Node as it registers it, and its Lease renewed.
func gatewayNode(t *testing.T, e *env) {
	nodes := e.admin.CoreV1().Nodes()
	e.waitGatewayReady(t, 60*time.Second, "the gateway's Node Ready", v1.ConditionTrue, node.ReasonReady)
	n, err := nodes.Get(t.Context(), lab.GatewayNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		node.RoleLabel:         "",
		v1.LabelTopologyZone:   "lab-a",
		v1.LabelTopologyRegion: "lab",
		v1.LabelHostname:       lab.GatewayNodeName,
	} {
		if got, ok := n.Labels[k]; !ok || got != want {
			t.Errorf("node %s: label %s = %q (present %v), want %q", n.Name, k, got, ok, want)
		}
	}
	if !slices.ContainsFunc(n.Spec.Taints, func(tt v1.Taint) bool {
		return tt.Key == node.TaintKey && tt.Effect == v1.TaintEffectNoSchedule
	}) {
		t.Errorf("node %s: taints %v, want %s:NoSchedule", n.Name, n.Spec.Taints, node.TaintKey)
	}
	if got := n.Annotations[node.VersionAnnotation]; got != e.version {
		t.Errorf("node %s: annotation %s = %q, want %q (edgegate --version)", n.Name, node.VersionAnnotation, got, e.version)
	}
	// The dashboard's fingerprints, published for an operator to pin, are those of the
	// certificate the gateway generated in its state directory.
	b, err := os.ReadFile(filepath.Join(e.stateDir, dashboard.CertFileName))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s holds no PEM block", dashboard.CertFileName)
	}
	certSum, spki, err := dashboard.Fingerprints(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"edgegate.dev/dashboard-cert-sha256": certSum, "edgegate.dev/dashboard-spki-sha256": spki} {
		if got := n.Annotations[k]; got != want {
			t.Errorf("node %s: annotation %s = %q, want %q", n.Name, k, got, want)
		}
	}
	for _, ip := range []netip.Addr{lab.NodeIPv4, lab.NodeIPv6} {
		if !slices.Contains(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip.String()}) {
			t.Errorf("node %s: status.addresses %v lack InternalIP %s", n.Name, n.Status.Addresses, ip)
		}
	}

	leases := e.admin.CoordinationV1().Leases(v1.NamespaceNodeLease)
	lease, err := leases.Get(t.Context(), lab.GatewayNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the gateway's Lease: %v", err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != lab.GatewayNodeName {
		t.Errorf("lease %s: holderIdentity %v, want %s", lease.Name, h, lab.GatewayNodeName)
	}
	if len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].UID != n.UID {
		t.Errorf("lease %s: owners %v, want the Node %s (%s)", lease.Name, lease.OwnerReferences, n.Name, n.UID)
	}
	first := lease.Spec.RenewTime.Time
	// kubelet's cadence: renewed every 10 s.
	eventually(t, 60*time.Second, "the Lease renewed", func() (bool, string) {
		cur, err := leases.Get(t.Context(), lab.GatewayNodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return cur.Spec.RenewTime.After(first), fmt.Sprintf("renewTime %v, first seen %v", cur.Spec.RenewTime.Time, first)
	})
	if v, err := metric(e.lab, "edgegate_node_lease_renewed_timestamp_seconds"); err != nil || v < float64(first.Unix()) {
		t.Errorf("edgegate_node_lease_renewed_timestamp_seconds = %v (%v), want at least %d", v, err, first.Unix())
	}
}

// drain: the cluster autoscaler's taint on the gateway's Node fails /healthz and marks the Node
// not ready (KEP-3836); its removal restores both.
func drain(t *testing.T, e *env) {
	l := e.lab
	// A step that failed half-way must not leave the gateway draining for the next steps.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nodes := e.admin.CoreV1().Nodes()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := nodes.Get(ctx, lab.GatewayNodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			kept := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(tt v1.Taint) bool { return tt.Key == toBeDeletedTaint })
			if len(kept) == len(n.Spec.Taints) {
				return nil
			}
			n.Spec.Taints = kept
			_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Errorf("remove the %s taint: %v", toBeDeletedTaint, err)
		}
	})
	e.updateNode(t, lab.GatewayNodeName, false, func(n *v1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{
			Key: toBeDeletedTaint, Value: strconv.FormatInt(time.Now().Unix(), 10), Effect: v1.TaintEffectNoSchedule,
		})
	})
	eventually(t, 60*time.Second, "draining: /healthz 503, not eligible", func() (bool, string) {
		hz := getHealthz(l, "/healthz")
		return hz.code == 503 && strings.Contains(hz.body, `"nodeEligible":false`), hz.String()
	})
	e.waitGatewayReady(t, 60*time.Second, "draining: the Node not ready, reason Draining", v1.ConditionFalse, node.ReasonDraining)
	// Draining steers load balancers away; it does not stop forwarding.
	follows(t, l.Client, "a draining gateway still forwards", "10.96.10.21:80", "", b1, b3)
	if hz := getHealthz(l, "/livez"); hz.code != 200 {
		t.Errorf("/livez while draining: %v, want 200 (nothing must restart a draining gateway)", hz)
	}

	e.updateNode(t, lab.GatewayNodeName, false, func(n *v1.Node) {
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tt v1.Taint) bool { return tt.Key == toBeDeletedTaint })
	})
	waitHealthz(t, l, 60*time.Second, "taint removed: /healthz 200", "/healthz", 200)
	e.waitGatewayReady(t, 60*time.Second, "taint removed: the Node Ready", v1.ConditionTrue, "")
}

// podRoutes: other Nodes' pod CIDRs are routed via their InternalIPs (proto 69) as Nodes come,
// change and go, traffic to a pod address follows, and routes that are not edgegate's, even
// one at a Node's pod CIDR, are left alone.
func podRoutes(t *testing.T, e *env) {
	l := e.lab
	// A route of someone else's at the pod CIDR worker-3 will claim.
	labtest.Exec(t, l.Gateway, "ip", "route", "add", "10.244.3.0/24", "via", "10.200.2.13", "proto", "static")
	t.Cleanup(func() { labtest.Exec(t, l.Gateway, "ip", "route", "del", "10.244.3.0/24", "proto", "static") })
	before, others := routes(t, l)
	if len(before) != 0 {
		t.Fatalf("edgegate routes before any Node has a pod CIDR: %q", before)
	}
	// One pod address held by backend-1 and backend-2 alike, so where it is answered shows
	// which Node's InternalIP the gateway routes it through.
	pod4, pod6 := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:244:1::5")
	for _, b := range l.Backends[:2] {
		addPodAddr(t, l, b, pod4)
		addPodAddr(t, l, b, pod6)
	}
	pod4Addr, pod6Addr := netip.AddrPortFrom(pod4, lab.BackendTCPPort).String(), netip.AddrPortFrom(pod6, lab.BackendTCPPort).String()
	if r := l.Client.Probe(pod4Addr); r.Outcome == lab.Answered {
		t.Fatalf("pod %s answered before any route to it: %v", pod4, r)
	}

	e.createNode(t, "worker-1", []string{"10.244.1.0/24", "fd00:244:1::/64"}, "10.200.2.11", "fd00:200:2::11")
	routesAre(t, l, "worker-1's pod CIDRs routed via its InternalIPs", others,
		"10.244.1.0/24 via 10.200.2.11 dev br0 proto 69", "fd00:244:1::/64 via fd00:200:2::11 dev br0 proto 69")
	follows(t, l.Client, "pod "+pod4.String()+" reached via worker-1", pod4Addr, "", b1)
	follows(t, l.Client, "pod "+pod6.String()+" reached via worker-1", pod6Addr, "", b1)

	e.updateNode(t, "worker-1", true, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: "10.200.2.12"}, {Type: v1.NodeInternalIP, Address: "fd00:200:2::12"},
		}
	})
	routesAre(t, l, "worker-1's new InternalIPs", others,
		"10.244.1.0/24 via 10.200.2.12 dev br0 proto 69", "fd00:244:1::/64 via fd00:200:2::12 dev br0 proto 69")
	follows(t, l.Client, "pod "+pod4.String()+" reached via worker-1's new address", pod4Addr, "", b2)
	follows(t, l.Client, "pod "+pod6.String()+" reached via worker-1's new address", pod6Addr, "", b2)

	e.createNode(t, "worker-3", []string{"10.244.3.0/24"}, "10.200.2.12")
	eventually(t, 60*time.Second, "the routes check reports worker-3's pod CIDR taken", func() (bool, string) {
		hz := getHealthz(l, "/healthz")
		ok, detail, found := hz.check("routes")
		return found && !ok && strings.Contains(fmt.Sprint(detail["lastError"]), "10.244.3.0/24"), hz.String()
	})
	routesAre(t, l, "a route of someone else's is not replaced", others,
		"10.244.1.0/24 via 10.200.2.12 dev br0 proto 69", "fd00:244:1::/64 via fd00:200:2::12 dev br0 proto 69")

	e.deleteNode(t, "worker-1")
	e.deleteNode(t, "worker-3")
	routesAre(t, l, "the Nodes deleted: their routes gone", others)
	unanswered(t, l.Client, pod4Addr)
	eventually(t, 60*time.Second, "the routes check ok again", func() (bool, string) {
		hz := getHealthz(l, "/healthz")
		ok, _, found := hz.check("routes")
		return found && ok, hz.String()
	})
}

// outage: the apiserver stops; the gateway keeps forwarding, stays healthy and reports the
// lost link. Changes made while it cannot see the apiserver are applied once it can.
func outage(t *testing.T, e *env) {
	l := e.lab
	e.createService(t, service("steady", "10.96.10.30", 30090), slice("steady-1", "steady", 1, 2, 3))
	follows(t, l.Client, "steady reaches its backends", "10.96.10.30:80", "10.96.10.30:53", b1, b2, b3)
	held, err := l.Client.OpenHTTP("10.96.10.30:80")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	first, err := held.Ask()
	if err != nil {
		t.Fatal(err)
	}

	e.c.Stop()
	waitHealthz(t, l, 60*time.Second, "the lost link on /healthz/cluster", "/healthz/cluster", 503)
	metricIs(t, l, "edgegate_cluster_api_reachable", 0)
	if hz := getHealthz(l, "/healthz"); hz.code != 200 {
		t.Errorf("/healthz during the outage: %v; want 200 (the gateway still forwards)", hz)
	}
	follows(t, l.Client, "steady still reaches its backends during the outage", "10.96.10.30:80", "10.96.10.30:53", b1, b2, b3)
	follows(t, l.Client, "steady's node port too", "10.200.1.1:30090", "10.200.1.1:30091", b1, b2, b3)
	if r, err := held.Ask(); err != nil || r.Backend != first.Backend {
		t.Errorf("held connection during the outage: %v %v; want answered by %s", r, err, first.Backend)
	}

	heal := e.restartBehindPartition(t)
	e.updateSlice(t, "steady-1", func(s *discovery.EndpointSlice) { s.Endpoints = endpoints(3) })
	e.createService(t, service("arrived", "10.96.10.31", 0), slice("arrived-1", "arrived", 1))
	// Still cut off: the gateway cannot have seen these changes.
	if ok, state := spread(l.Client, "10.96.10.30:80", b1, b2, b3); !ok {
		t.Fatalf("the gateway changed while cut off from the apiserver: %s", state)
	}
	if r := l.Client.Probe("10.96.10.31:80"); r.Outcome == lab.Answered {
		t.Fatalf("arrived answers while the gateway is cut off from the apiserver: %v", r)
	}
	if hz := getHealthz(l, "/healthz/cluster"); hz.code != 503 {
		t.Fatalf("/healthz/cluster while cut off: %v", hz)
	}

	heal()
	follows(t, l.Client, "after the outage: steady follows what changed meanwhile", "10.96.10.30:80", "10.96.10.30:53", b3)
	follows(t, l.Client, "after the outage: arrived, created meanwhile, answers", "10.96.10.31:80", "10.96.10.31:53", b1)
	waitHealthz(t, l, 90*time.Second, "/healthz/cluster 200 again", "/healthz/cluster", 200)
	metricIs(t, l, "edgegate_cluster_api_reachable", 1)
	metricIs(t, l, "edgegate_cluster_synced", 1)
	if hz := getHealthz(l, "/healthz"); hz.code != 200 {
		t.Errorf("/healthz after the outage: %v", hz)
	}
}

// offlineFirst: SIGTERM marks the Node not ready; a gateway started while the apiserver is down
// programs from its state directory's cache; when the apiserver answers, its state wins.
func offlineFirst(t *testing.T, e *env, d *labtest.Daemon) {
	l := e.lab
	e.createNode(t, "worker-9", []string{"10.244.9.0/24"}, "10.200.2.13")
	nineRoute := "10.244.9.0/24 via 10.200.2.13 dev br0 proto 69"
	_, others := routes(t, l)
	routesAre(t, l, "worker-9's pod CIDR routed", others, nineRoute)

	d.Stop(t)
	e.waitGatewayReady(t, 30*time.Second, "SIGTERM: the Node not ready, reason Shutdown", v1.ConditionFalse, node.ReasonShutdown)
	// A clean stop writes the newest state, even within the cache's 30 s write spacing.
	st, err := cache.NewFile(e.stateDir).Load()
	if err != nil {
		t.Fatalf("the cache after a clean stop: %v", err)
	}
	if got := cachedEndpoints(st, "steady"); !slices.Equal(got, []string{"10.200.2.13"}) {
		t.Errorf("the cache holds steady's endpoints %v, want [10.200.2.13]", got)
	}

	e.c.Stop()
	// Without rules and without edgegate's routes, only a gateway that programs from its
	// cache forwards again.
	out := labtest.Exec(t, l.Gateway, e.bin, "--cleanup")
	t.Logf("edgegate --cleanup: %s", strings.TrimSpace(out))
	labtest.Exec(t, l.Gateway, "ip", "route", "del", "10.244.9.0/24", "proto", "69")
	unanswered(t, l.Client, "10.96.10.30:80")

	d2 := labtest.StartDaemon(t, l.Gateway, e.daemonArgs()...)
	eventually(t, 60*time.Second, "the log says the gateway serves from its cache", func() (bool, string) {
		line, ok := d2.LogLine("serving from the cluster state cache")
		return ok, line
	})
	metricIs(t, l, "edgegate_cluster_serving_from_cache", 1)
	follows(t, l.Client, "from the cache: steady reaches backend-3", "10.96.10.30:80", "10.96.10.30:53", b3)
	follows(t, l.Client, "from the cache: arrived reaches backend-1", "10.96.10.31:80", "", b1)
	routesAre(t, l, "from the cache: worker-9's route back", others, nineRoute)
	if hz := getHealthz(l, "/healthz/cluster"); hz.code != 503 || !strings.Contains(hz.body, `"fromCache":true`) {
		t.Errorf("/healthz/cluster serving from the cache: %v; want 503 with fromCache", hz)
	}
	if hz := getHealthz(l, "/healthz"); hz.code != 200 {
		t.Errorf("/healthz serving from the cache: %v; want 200", hz)
	}

	heal := e.restartBehindPartition(t)
	e.updateSlice(t, "steady-1", func(s *discovery.EndpointSlice) { s.Endpoints = endpoints(1, 2) })
	e.deleteNode(t, "worker-9")
	if v, err := metric(l, "edgegate_cluster_serving_from_cache"); err != nil || v != 1 {
		t.Fatalf("edgegate_cluster_serving_from_cache while cut off = %v (%v), want 1", v, err)
	}
	heal()
	metricIs(t, l, "edgegate_cluster_serving_from_cache", 0)
	follows(t, l.Client, "the API wins: steady follows the change made after the cache", "10.96.10.30:80", "10.96.10.30:53", b1, b2)
	routesAre(t, l, "the API wins: worker-9, deleted meanwhile, no longer routed", others)
	eventually(t, 60*time.Second, "the log says the API's state replaced the cache", func() (bool, string) {
		line, ok := d2.LogLine("synced with the API server", "replacedCache=true")
		return ok, line
	})
	waitHealthz(t, l, 60*time.Second, "/healthz/cluster 200 again", "/healthz/cluster", 200)
	e.waitGatewayReady(t, 60*time.Second, "the Node Ready again", v1.ConditionTrue, "")
	d2.Stop(t)
}

// cachedEndpoints returns the endpoint addresses the cache holds for a Service of the test.
func cachedEndpoints(st cache.State, service string) []string {
	var out []string
	for _, s := range st.EndpointSlices {
		if s.Namespace == testNamespace && s.Labels[discovery.LabelServiceName] == service {
			for _, ep := range s.Endpoints {
				out = append(out, ep.Addresses...)
			}
		}
	}
	slices.Sort(out)
	return out
}
