package rollout_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/edgegate/edgegate/daemon/node"
	"github.com/edgegate/edgegate/daemon/update/rollout"
)

// fakeEnv is one or more gateways' API: client-go's fake dynamic client (the rollouts)
// and fake clientset (Nodes, Leases), a bundle server and the drains.
type fakeEnv struct {
	t      *testing.T
	dyn    *dynamicfake.FakeDynamicClient
	kube   *kubefake.Clientset
	srv    *bundleServer
	drains *drainLog
	rv     atomic.Int64 // the rollouts' resourceVersions, above 1 (their creation's)
}

// gatewayNode is a gateway's Node as daemon/node registers it.
func gatewayNode(name string, lbls map[string]string) *v1.Node {
	l := map[string]string{node.RoleLabel: ""}
	for k, v := range lbls {
		l[k] = v
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{node.VersionAnnotation: v1_0}}}
}

func newFakeEnv(t *testing.T, nodes ...*v1.Node) *fakeEnv {
	objs := make([]runtime.Object, len(nodes))
	for i, n := range nodes {
		objs[i] = n
	}
	e := &fakeEnv{
		t:      t,
		dyn:    dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{rollout.GVR: "FirmwareRolloutList"}),
		kube:   kubefake.NewClientset(objs...),
		srv:    newBundleServer(t),
		drains: &drainLog{},
	}
	e.dyn.PrependReactor("patch", rollout.Resource, e.patchWithPrecondition)
	return e
}

// patchWithPrecondition gives the fake what the API server does and the controller relies
// on: a patch naming a resourceVersion other than the object's is a conflict, and every
// write gives the object a new resourceVersion (the fake tracker keeps none in it).
func (e *fakeEnv) patchWithPrecondition(a k8stesting.Action) (bool, runtime.Object, error) {
	pa := a.(k8stesting.PatchActionImpl)
	cur, err := e.dyn.Tracker().Get(rollout.GVR, "", pa.Name)
	if err != nil {
		return true, nil, err
	}
	var patch map[string]any
	if err := json.Unmarshal(pa.Patch, &patch); err != nil {
		return true, nil, err
	}
	have := cur.(*unstructured.Unstructured).GetResourceVersion()
	if want, ok, _ := unstructured.NestedString(patch, "metadata", "resourceVersion"); ok && want != have {
		return true, nil, apierrors.NewConflict(rollout.GVR.GroupResource(), pa.Name, fmt.Errorf("resourceVersion %s, the object's is %s", want, have))
	}
	e.rv.Add(1)
	if err := unstructured.SetNestedField(patch, strconv.FormatInt(e.rv.Load()+1, 10), "metadata", "resourceVersion"); err != nil {
		return true, nil, err
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return true, nil, err
	}
	next := k8stesting.NewRootPatchSubresourceAction(pa.Resource, pa.Name, pa.PatchType, b, pa.Subresource)
	return k8stesting.ObjectReaction(e.dyn.Tracker())(next)
}

func (e *fakeEnv) controller(name string, upd *fakeUpdater) *rollout.Controller {
	return &rollout.Controller{
		NodeName: name, Client: e.kube, Dynamic: e.dyn, Updater: upd, Drain: e.drains.record(name),
		Settle: 10 * time.Millisecond, Poll: 20 * time.Millisecond,
		LeaseDuration: time.Minute, RenewInterval: 50 * time.Millisecond,
		Log: testLogger(e.t).With("gateway", name),
	}
}

// start runs one gateway whose new firmware commits once commit is closed (nil: at once).
func (e *fakeEnv) start(name string, upd *fakeUpdater, commit chan struct{}) *gateway {
	return newGateway(e.t, name, upd, commit, func() *rollout.Controller { return e.controller(name, upd) })
}

// create writes a rollout object as the API server would store it; fields are set
// without the CRD's schema, so that malformed rollouts can be written too.
func (e *fakeEnv) create(name string, spec map[string]any, status map[string]any) {
	e.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rollout.Group + "/" + rollout.Version, "kind": rollout.Kind,
		"metadata": map[string]any{"name": name, "uid": "uid-" + name, "generation": int64(1), "resourceVersion": "1"},
		"spec":     spec,
	}}
	if status != nil {
		u.Object["status"] = status
	}
	if _, err := e.dyn.Resource(rollout.GVR).Create(e.t.Context(), u, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// spec is a valid spec for the bundle at path, which the server serves.
func (e *fakeEnv) spec(path, version string) map[string]any {
	url, sum := e.srv.add(path, fakeBundle(board, version))
	return map[string]any{"version": version, "bundleURL": url, "sha256": sum}
}

func (e *fakeEnv) get(name string) *rollout.FirmwareRollout {
	e.t.Helper()
	return getRollout(e.t, e.dyn, name)
}

// getRollout reads the FirmwareRollout name through c.
func getRollout(t *testing.T, c dynamic.Interface, name string) *rollout.FirmwareRollout {
	t.Helper()
	u, err := c.Resource(rollout.GVR).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := rollout.Decode(u)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (e *fakeEnv) entry(name, gw string) rollout.NodeStatus {
	return e.get(name).Status.Nodes[gw]
}

func (e *fakeEnv) waitPhase(name, gw string, phase rollout.NodePhase) rollout.NodeStatus {
	e.t.Helper()
	waitFor(e.t, "gateway "+gw+" "+string(phase)+" in rollout "+name, within, func() bool { return e.entry(name, gw).Phase == phase })
	return e.entry(name, gw)
}

func (e *fakeEnv) lease(name string) *coordinationv1.Lease {
	e.t.Helper()
	l, err := e.kube.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(e.t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *fakeEnv) node(name string) *v1.Node {
	e.t.Helper()
	n, err := e.kube.CoreV1().Nodes().Get(e.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}
