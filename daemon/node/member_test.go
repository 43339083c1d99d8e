package node

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
)

// running is a Member under test with a fake API server.
type running struct {
	m          *Member
	client     *fake.Clientset
	programmed atomic.Bool
	stop       context.CancelFunc
	done       chan struct{}
}

// newClient returns a fake clientset that, like the API server, gives created Nodes a UID.
func newClient(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*v1.Node).UID = "uid-gw1"
		return false, nil, nil
	})
	return c
}

func runMember(t *testing.T, client *fake.Clientset) *running {
	t.Helper()
	r := &running{client: client, done: make(chan struct{})}
	cfg := testConfig()
	cfg.RenewInterval = 50 * time.Millisecond
	r.m = NewMember(client, cfg, r.programmed.Load, slog.New(slog.NewTextHandler(t.Output(), nil)))
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { defer close(r.done); r.m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, 10*time.Second, 10*time.Millisecond, cond)
}

// readyMember runs a Member whose rules are programmed, once its Node is Ready.
func readyMember(t *testing.T, client *fake.Clientset) *running {
	t.Helper()
	r := runMember(t, client)
	r.programmed.Store(true)
	r.waitReady(t, v1.ConditionTrue, ReasonReady)
	return r
}

func (r *running) node(t *testing.T) *v1.Node {
	t.Helper()
	n, err := r.client.CoreV1().Nodes().Get(context.Background(), "gw1", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return n
}

func (r *running) ready(t *testing.T) (v1.ConditionStatus, string) {
	n := r.node(t)
	if n == nil {
		return "", ""
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status, c.Reason
		}
	}
	return "", ""
}

func (r *running) waitReady(t *testing.T, status v1.ConditionStatus, reason string) {
	t.Helper()
	waitFor(t, "Ready "+string(status)+" "+reason, func() bool {
		s, rs := r.ready(t)
		return s == status && rs == reason
	})
}

func (r *running) lease(t *testing.T) *coordinationv1.Lease {
	l, err := r.client.CoordinationV1().Leases("kube-node-lease").Get(context.Background(), "gw1", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

func (r *running) eventReasons() []string {
	evs, _ := r.client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason)
	}
	slices.Sort(out)
	return out
}

func TestMemberRegistersAndRenews(t *testing.T) {
	r := runMember(t, newClient())
	r.waitReady(t, v1.ConditionFalse, ReasonNotProgrammed)
	n := r.node(t)
	if _, ok := n.Labels[RoleLabel]; !ok || len(n.Spec.Taints) != 1 || n.Annotations[VersionAnnotation] != "v1.2.3" {
		t.Errorf("registered node: labels %v taints %v annotations %v", n.Labels, n.Spec.Taints, n.Annotations)
	}

	waitFor(t, "lease", func() bool { return r.lease(t) != nil })
	l := r.lease(t)
	if *l.Spec.HolderIdentity != "gw1" || *l.Spec.LeaseDurationSeconds != 40 {
		t.Errorf("lease spec %+v", l.Spec)
	}
	if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "uid-gw1" || l.OwnerReferences[0].Kind != "Node" {
		t.Errorf("lease owner %v, want the Node", l.OwnerReferences)
	}
	first := l.Spec.RenewTime.Time
	waitFor(t, "a renewal", func() bool { return r.lease(t).Spec.RenewTime.Time.After(first) })

	r.programmed.Store(true)
	r.m.Trigger()
	r.waitReady(t, v1.ConditionTrue, ReasonReady)
	// The Member records a post after the API server has it.
	waitFor(t, "the post recorded", func() bool { return r.m.Status().Ready })
	st := r.m.Status()
	if !st.Registered || !st.Ready || st.LastLeaseRenew.IsZero() || st.LastStatusPost.IsZero() {
		t.Errorf("status %+v", st)
	}
	// Registered not ready, then ready: one transition.
	waitFor(t, "events", func() bool { return len(r.eventReasons()) == 2 })
	if got := r.eventReasons(); !slices.Equal(got, []string{"NodeReady", "RegisteredNode"}) {
		t.Errorf("events %v", got)
	}
}

func TestMemberDrainsAndShutsDown(t *testing.T) {
	r := readyMember(t, newClient())
	r.m.SetDraining(true)
	r.waitReady(t, v1.ConditionFalse, ReasonDraining)
	r.m.SetDraining(false)
	r.waitReady(t, v1.ConditionTrue, ReasonReady)
	r.stop()
	<-r.done
	if s, reason := r.ready(t); s != v1.ConditionFalse || reason != ReasonShutdown {
		t.Errorf("after shutdown Ready is %s/%s, want False/%s", s, reason, ReasonShutdown)
	}
}

func TestMemberAdoptsExistingNode(t *testing.T) {
	existing := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gw1", UID: "uid-old", Labels: map[string]string{"rack": "r7"}},
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: "maintenance", Effect: v1.TaintEffectNoSchedule}}},
	}
	r := readyMember(t, newClient(existing))
	n := r.node(t)
	if n.Labels["rack"] != "r7" || n.Labels[RoleLabel] != "" || len(n.Spec.Taints) != 2 {
		t.Errorf("adopted node: labels %v taints %v", n.Labels, n.Spec.Taints)
	}
	waitFor(t, "lease", func() bool { return r.lease(t) != nil })
	if l := r.lease(t); len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != "uid-old" {
		t.Errorf("lease owner %v, want the existing Node's UID", l.OwnerReferences)
	}
}

func TestMemberRegistersDeletedNodeAgain(t *testing.T) {
	r := readyMember(t, newClient())
	if err := r.client.CoreV1().Nodes().Delete(context.Background(), "gw1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node registered again", func() bool { return r.node(t) != nil })
	r.waitReady(t, v1.ConditionTrue, ReasonReady)
}

// After an outage the node lifecycle controller has marked the Node Unknown; the next
// heartbeat must put it right, not wait for the status interval.
func TestMemberRepairsUnknownReady(t *testing.T) {
	r := readyMember(t, newClient())
	n := r.node(t)
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			n.Status.Conditions[i].Status, n.Status.Conditions[i].Reason = v1.ConditionUnknown, "NodeStatusUnknown"
		}
	}
	if _, err := r.client.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitReady(t, v1.ConditionTrue, ReasonReady)
}

func TestMemberRetriesLeaseFailures(t *testing.T) {
	client := newClient()
	var failing atomic.Bool
	failing.Store(true)
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	r := runMember(t, client)
	waitFor(t, "the failure reported", func() bool { return r.m.Status().LastError != "" })
	if r.m.Status().LastLeaseRenew != (time.Time{}) {
		t.Error("a lease renewal is reported though every lease request failed")
	}
	failing.Store(false)
	waitFor(t, "a renewal", func() bool { st := r.m.Status(); return !st.LastLeaseRenew.IsZero() && st.LastError == "" })
}

// The gateway's requests stay inside deploy/'s ClusterRole and Role.
func TestMemberRequestsStayInRBAC(t *testing.T) {
	r := readyMember(t, newClient())
	r.m.SetDraining(true)
	r.waitReady(t, v1.ConditionFalse, ReasonDraining)
	if err := r.client.CoreV1().Nodes().Delete(context.Background(), "gw1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node registered again", func() bool { return r.node(t) != nil })
	r.stop()
	<-r.done
	allowed := map[string]bool{
		"get nodes": true, "create nodes": true, "update nodes": true, "patch nodes": true,
		"update nodes/status": true, "patch nodes/status": true,
		"get kube-node-lease/leases": true, "create kube-node-lease/leases": true, "update kube-node-lease/leases": true,
		"create default/events": true,
		// The test's own requests.
		"delete nodes": true, "list default/events": true,
	}
	for _, a := range r.client.Actions() {
		what := a.GetVerb() + " "
		if ns := a.GetNamespace(); ns != "" {
			what += ns + "/"
		}
		what += a.GetResource().Resource
		if sub := a.GetSubresource(); sub != "" {
			what += "/" + sub
		}
		if !allowed[what] {
			t.Errorf("request outside the gateway's RBAC: %s", what)
		}
	}
}
