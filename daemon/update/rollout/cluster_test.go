package rollout_test

// The cluster tier: three gateways' rollout controllers against the real kube-apiserver
// that lab/cluster builds, with deploy/'s CRD and RBAC and nothing more. Each gateway has an
// identity of its own (a bootstrap token in deploy/rbac.yaml's group) and a fake updater
// whose Activate reboots it: its controller stops, the machine comes up on the new slot
// (which commits) or, for a bad bundle, on the old one (rolled back), and a new controller
// starts.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/edgegate/edgegate/daemon/node"
	"github.com/edgegate/edgegate/daemon/update/rollout"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
)

const deployDir = "../../../deploy"

// gatewayGroup is the group deploy/rbac.yaml binds and deploy/bootstrap-token.yaml gives.
const gatewayGroup = "system:bootstrappers:edgegate"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// fleet is the cluster with deploy/'s manifests applied and three gateways' identities.
type fleet struct {
	t      *testing.T
	c      *cluster.Cluster
	admin  dynamic.Interface
	srv    *bundleServer
	drains *drainLog
	gws    map[string]*fleetGateway
	names  []string
}

// fleetGateway is one gateway: its clients (its own token), its updater and its runs.
type fleetGateway struct {
	name string
	kube kubernetes.Interface
	dyn  dynamic.Interface
	upd  *fakeUpdater
	run  *gateway

	mu        sync.Mutex
	forbidden []string
}

func newFleet(t *testing.T) *fleet {
	c := clustertest.Start(t, cluster.Options{})
	ctx := t.Context()
	admin, err := dynamic.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, c: c, admin: admin, srv: newBundleServer(t), drains: &drainLog{}, gws: map[string]*fleetGateway{}}
	if _, err := cluster.ApplyFile(ctx, c.Client, deployDir+"/rbac.yaml"); err != nil {
		t.Fatalf("apply deploy/rbac.yaml: %v", err)
	}
	f.applyCRD()
	for i := range 3 {
		name := fmt.Sprintf("gw%d", i+1)
		f.names = append(f.names, name)
		f.gws[name] = f.identity(name, fmt.Sprintf("gw%04d", i+1))
		n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{node.RoleLabel: "", "site": "lab"},
			Annotations: map[string]string{node.VersionAnnotation: v1_0}}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A worker Node with the same labels: no gateway, not counted.
	worker := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker1", Labels: map[string]string{"site": "lab"}}}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, worker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Tokens and bindings reach the authenticator's and authorizer's caches a moment later.
	for _, name := range f.names {
		g := f.gws[name]
		waitFor(t, name+"'s identity and rights in effect", 30*time.Second, func() bool {
			_, err := g.dyn.Resource(rollout.GVR).List(ctx, metav1.ListOptions{})
			return err == nil
		})
		g.mu.Lock()
		g.forbidden = nil
		g.mu.Unlock()
	}
	return f
}

// deployObject reads the one object of deploy/'s YAML file name.
func deployObject(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(deployDir + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatalf("deploy/%s: %v", name, err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// applyCRD creates deploy/firmwarerollout-crd.yaml and waits until it is served.
func (f *fleet) applyCRD() {
	t := f.t
	crd := deployObject(t, "firmwarerollout-crd.yaml")
	if _, err := f.admin.Resource(crdGVR).Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the CRD: %v", err)
	}
	waitFor(t, "the CRD established", 30*time.Second, func() bool {
		u, err := f.admin.Resource(crdGVR).Get(t.Context(), crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				_, err := f.admin.Resource(rollout.GVR).List(t.Context(), metav1.ListOptions{})
				return err == nil
			}
		}
		return false
	})
}

// identity makes a bootstrap token for one gateway, as deploy/bootstrap-token.yaml does,
// and the gateway's clients with it; they record what the API server refused.
func (f *fleet) identity(name, id string) *fleetGateway {
	t := f.t
	secret := strings.Repeat(id[2:], 4)
	s := &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
			"auth-extra-groups": gatewayGroup, "description": "edgegate gateway " + name},
	}
	if _, err := f.c.Client.CoreV1().Secrets("kube-system").Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	g := &fleetGateway{name: name}
	cfg := f.c.GatewayConfig()
	cfg.BearerToken = id + "." + secret
	cfg.UserAgent = "edgegate-rollout-test/" + name
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusForbidden {
				g.mu.Lock()
				g.forbidden = append(g.forbidden, req.Method+" "+req.URL.Path)
				g.mu.Unlock()
			}
			return resp, err
		})
	}
	var err error
	if g.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if g.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	return g
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// start runs every gateway's controller.
func (f *fleet) start() {
	for _, name := range f.names {
		g := f.gws[name]
		g.upd = newFakeUpdater(board, v1_0)
		log := testLogger(f.t).With("gateway", name)
		g.run = newGateway(f.t, name, g.upd, nil, func() *rollout.Controller {
			return &rollout.Controller{
				NodeName: name, Client: g.kube, Dynamic: g.dyn, Updater: g.upd, Drain: f.drains.record(name),
				Settle: 300 * time.Millisecond, Poll: 200 * time.Millisecond, RenewInterval: time.Second, Log: log,
			}
		})
	}
}

// create applies a rollout of version for the lab's gateways, maxUnavailable 1.
func (f *fleet) create(name, version string) {
	f.t.Helper()
	url, sum := f.srv.add("/"+version+".bundle", fakeBundle(board, version))
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rollout.Group + "/" + rollout.Version, "kind": rollout.Kind,
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"version": version, "bundleURL": url, "sha256": sum,
			"nodeSelector": map[string]any{"site": "lab"}, "maxUnavailable": int64(1)},
	}}
	if _, err := f.admin.Resource(rollout.GVR).Create(f.t.Context(), u, metav1.CreateOptions{}); err != nil {
		f.t.Fatalf("create FirmwareRollout %s: %v", name, err)
	}
}

func (f *fleet) get(name string) *rollout.FirmwareRollout {
	f.t.Helper()
	return getRollout(f.t, f.admin, name)
}

// history records, from the API server's watch, every state of each rollout's entries
// and each slot Lease's holders, in the order the API server wrote them.
type history struct {
	mu sync.Mutex
	// phases: rollout -> gateway -> its phases in order (repeats dropped).
	phases map[string]map[string][]rollout.NodePhase
	// concurrent: rollout -> the writes after which more than one gateway was updating.
	concurrent map[string][]string
	// holders: Lease -> its holders in order ("" when free; repeats dropped).
	holders  map[string][]string
	problems []string
}

func (f *fleet) watch() *history {
	h := &history{phases: map[string]map[string][]rollout.NodePhase{}, concurrent: map[string][]string{}, holders: map[string][]string{}}
	ctx, stop := context.WithCancel(context.Background())
	f.t.Cleanup(stop)
	rw, err := f.admin.Resource(rollout.GVR).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	lw, err := f.c.Client.CoordinationV1().Leases(v1.NamespaceNodeLease).Watch(ctx, metav1.ListOptions{LabelSelector: rollout.LeaseRolloutLabel})
	if err != nil {
		f.t.Fatal(err)
	}
	go func() {
		for ev := range rw.ResultChan() {
			h.rolloutEvent(ev)
		}
		if ctx.Err() == nil {
			h.problem("the rollout watch ended early")
		}
	}()
	go func() {
		for ev := range lw.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok && ev.Type != watch.Deleted {
				h.mu.Lock()
				seq := h.holders[l.Name]
				if holder := ptr.Deref(l.Spec.HolderIdentity, ""); len(seq) == 0 || seq[len(seq)-1] != holder {
					h.holders[l.Name] = append(seq, holder)
				}
				h.mu.Unlock()
			}
		}
		if ctx.Err() == nil {
			h.problem("the Lease watch ended early")
		}
	}()
	return h
}

func (h *history) problem(p string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.problems = append(h.problems, p)
}

func (h *history) rolloutEvent(ev watch.Event) {
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok || ev.Type == watch.Deleted {
		if ev.Type == watch.Error {
			h.problem(fmt.Sprintf("watch error: %v", ev.Object))
		}
		return
	}
	r, err := rollout.Decode(u)
	if err != nil {
		h.problem(err.Error())
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phases[r.Name] == nil {
		h.phases[r.Name] = map[string][]rollout.NodePhase{}
	}
	var updating []string
	for gw, e := range r.Status.Nodes {
		if e.To != r.Spec.Version {
			continue
		}
		seq := h.phases[r.Name][gw]
		if len(seq) == 0 || seq[len(seq)-1] != e.Phase {
			h.phases[r.Name][gw] = append(seq, e.Phase)
		}
		switch e.Phase {
		case rollout.NodeDraining, rollout.NodeDownloading, rollout.NodeInstalling, rollout.NodeRebooting:
			updating = append(updating, gw+" "+string(e.Phase))
		}
	}
	if len(updating) > 1 {
		slices.Sort(updating)
		h.concurrent[r.Name] = append(h.concurrent[r.Name], fmt.Sprintf("resourceVersion %s: %v", r.ResourceVersion, updating))
	}
}

func (h *history) of(name string) (map[string][]rollout.NodePhase, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	phases := map[string][]rollout.NodePhase{}
	for gw, seq := range h.phases[name] {
		phases[gw] = slices.Clone(seq)
	}
	return phases, slices.Clone(h.concurrent[name])
}

// waitLast waits until the watch has seen gateway's entry in rollout reach phase: the
// watch may lag behind a read.
func (h *history) waitLast(t *testing.T, rolloutName, gateway string, phase rollout.NodePhase) {
	t.Helper()
	waitFor(t, "the watch to see "+gateway+" "+string(phase)+" in "+rolloutName, time.Minute, func() bool {
		seq, _ := h.of(rolloutName)
		s := seq[gateway]
		return len(s) > 0 && s[len(s)-1] == phase
	})
}

func (h *history) holdersOf(lease string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.holders[lease])
}

// checkRBAC fails for every request of a gateway the API server refused.
func (f *fleet) checkRBAC() {
	for _, name := range f.names {
		g := f.gws[name]
		g.mu.Lock()
		for _, r := range g.forbidden {
			f.t.Errorf("gateway %s: the API server refused %s", name, r)
		}
		g.mu.Unlock()
	}
}

// TestFleetRollout: a good rollout updates the three gateways one at a time and ends
// Complete; the same version again is a no-op; a bad rollout stops after the first
// gateway, which comes back on its old firmware, and the other two never start.
func TestFleetRollout(t *testing.T) {
	f := newFleet(t)
	ctx := t.Context()
	f.schemaChecks()
	h := f.watch()
	f.start()

	// The good rollout.
	good := "fleet-" + v1_1
	f.create(good, v1_1)
	waitFor(t, good+" Complete", 2*time.Minute, func() bool { return f.get(good).Status.Phase == rollout.PhaseComplete })
	r := f.get(good)
	if s := r.Status; s.SelectedNodes != 3 || s.UpdatedNodes != 3 || s.UpdatingNodes != 0 || s.FailedNodes != 0 || s.Message != "all 3 selected gateways run v1.1.0" {
		t.Errorf("%s status %+v", good, s)
	}
	for _, name := range f.names {
		h.waitLast(t, good, name, rollout.NodeUpdated)
	}
	phases, concurrent := h.of(good)
	if len(concurrent) > 0 {
		t.Errorf("%s: more than maxUnavailable gateways updating at once: %v", good, concurrent)
	}
	wantSeq := []rollout.NodePhase{rollout.NodeDraining, rollout.NodeDownloading, rollout.NodeInstalling, rollout.NodeRebooting, rollout.NodeUpdated}
	for _, name := range f.names {
		seq := phases[name]
		started := slices.Index(seq, rollout.NodeDraining)
		if started < 0 || !slices.Equal(seq[started:], wantSeq) || slices.ContainsFunc(seq[:started], func(p rollout.NodePhase) bool { return p != rollout.NodeWaiting }) {
			t.Errorf("%s: %s went through %v", good, name, seq)
		}
		g := f.gws[name]
		installs, activations, _ := g.upd.counts()
		if len(installs) != 1 || installs[0].Source != "rollout "+good || installs[0].Activate || activations != 1 || g.run.bootCount() != 2 {
			t.Errorf("%s: %s installs %+v activations %d boots %d", good, name, installs, activations, g.run.bootCount())
		}
		if v := g.upd.Status().Version; v != v1_1 {
			t.Errorf("%s runs %s", name, v)
		}
		e := r.Status.Nodes[name]
		if e.From != v1_0 || e.To != v1_1 || e.Attempt == "" || !strings.Contains(e.Message, "committed") {
			t.Errorf("%s: %s entry %+v", good, name, e)
		}
		// The gateway annotates its Node after its entry; another may have written
		// Complete in between.
		waitFor(t, "Node "+name+"'s annotations", time.Minute, func() bool {
			n, err := f.c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return n.Annotations[rollout.VersionAnnotation] == v1_1 && n.Annotations[rollout.UpdateAnnotation] == good+": Updated" && n.Labels[rollout.BoardLabel] == board
		})
	}
	// One slot, taken by each gateway in turn and given back each time. The last gateway
	// gives it back and undrains after it reported Updated, so possibly after Complete.
	waitFor(t, "the last gateway done", time.Minute, func() bool {
		holders := h.holdersOf("edgegate-rollout-" + good + "-0")
		d := f.drains.get()
		return len(holders) > 0 && holders[len(holders)-1] == "" && len(d) > 0 && strings.HasSuffix(d[len(d)-1], " off")
	})
	holders := h.holdersOf("edgegate-rollout-" + good + "-0")
	var took []string
	for _, hd := range holders {
		if hd != "" {
			took = append(took, hd)
		}
	}
	if slices.Sort(took); !slices.Equal(took, f.names) || holders[len(holders)-1] != "" {
		t.Errorf("%s: slot holders %v", good, holders)
	}
	if o := f.drains.overlaps(); len(o) > 0 {
		t.Errorf("two gateways drained at once: %v", o)
	}
	t.Logf("%s: slot holders %v; drains %v", good, holders, f.drains.get())

	f.checkPrinterColumns(good)

	// The same version again: every gateway reports Updated and does nothing.
	again := good + "-again"
	f.create(again, v1_1)
	waitFor(t, again+" Complete", time.Minute, func() bool { return f.get(again).Status.Phase == rollout.PhaseComplete })
	drainsBefore := len(f.drains.get())
	for _, name := range f.names {
		if installs, _, _ := f.gws[name].upd.counts(); len(installs) != 1 {
			t.Errorf("%s: %s installed again: %+v", again, name, installs)
		}
		if e := f.get(again).Status.Nodes[name]; e.Phase != rollout.NodeUpdated || e.Message != "runs "+v1_1 {
			t.Errorf("%s: %s entry %+v", again, name, e)
		}
	}
	if _, err := f.c.Client.CoordinationV1().Leases(v1.NamespaceNodeLease).Get(ctx, "edgegate-rollout-"+again+"-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s: a slot Lease for a no-op (err %v)", again, err)
	}

	// The bad rollout: v1.2.0 never proves healthy.
	bad := "fleet-v1.2.0"
	for _, name := range f.names {
		f.gws[name].upd.mu.Lock()
		f.gws[name].upd.healthy = func(v string) bool { return v != "v1.2.0" }
		f.gws[name].upd.mu.Unlock()
	}
	f.create(bad, "v1.2.0")
	waitFor(t, bad+" Halted", 2*time.Minute, func() bool { return f.get(bad).Status.Phase == rollout.PhaseHalted })
	var failed string
	for _, name := range f.names {
		if f.get(bad).Status.Nodes[name].Phase == rollout.NodeFailed {
			failed = name
		}
	}
	if failed == "" {
		t.Fatalf("%s halted with no gateway Failed: %+v", bad, f.get(bad).Status)
	}
	// The two others see the halt and say so; only then is "never started" a fact.
	for _, name := range f.names {
		if name == failed {
			continue
		}
		waitFor(t, name+" stopped by the halt", time.Minute, func() bool {
			e := f.get(bad).Status.Nodes[name]
			return e.Phase == rollout.NodeWaiting && e.Message == "not started: the rollout is halted"
		})
	}
	waitFor(t, bad+" counted", time.Minute, func() bool { return f.get(bad).Status.FailedNodes == 1 })
	r = f.get(bad)
	if e := r.Status.Nodes[failed]; !strings.Contains(e.Message, "rolled-back") || !strings.Contains(e.Message, "did not prove healthy") {
		t.Errorf("%s: %s entry %+v", bad, failed, e)
	}
	if s := r.Status; !strings.HasPrefix(s.Message, "halted: gateway "+failed+" failed: ") || s.FailedNodes != 1 || s.UpdatedNodes != 0 || s.SelectedNodes != 3 {
		t.Errorf("%s status %+v", bad, s)
	}
	h.waitLast(t, bad, failed, rollout.NodeFailed)
	phases, concurrent = h.of(bad)
	if len(concurrent) > 0 {
		t.Errorf("%s: more than one gateway updating at once: %v", bad, concurrent)
	}
	for _, name := range f.names {
		g := f.gws[name]
		installs, activations, _ := g.upd.counts()
		switch {
		case name == failed:
			if len(installs) != 2 || activations != 2 || g.upd.Status().Version != v1_1 || g.run.bootCount() != 3 {
				t.Errorf("%s: %s installs %+v activations %d version %s boots %d", bad, name, installs, activations, g.upd.Status().Version, g.run.bootCount())
			}
			if seq := phases[name]; seq[len(seq)-1] != rollout.NodeFailed || !slices.Contains(seq, rollout.NodeRebooting) {
				t.Errorf("%s: %s went through %v", bad, name, seq)
			}
		default:
			if len(installs) != 1 || g.upd.Status().Version != v1_1 {
				t.Errorf("%s: %s was touched: installs %+v version %s", bad, name, installs, g.upd.Status().Version)
			}
			for _, p := range phases[name] {
				if p != rollout.NodeWaiting {
					t.Errorf("%s: %s went through %v", bad, name, phases[name])
					break
				}
			}
		}
	}
	for _, d := range f.drains.get()[drainsBefore:] {
		if gw, state, _ := strings.Cut(d, " "); gw != failed && state == "on" {
			t.Errorf("%s: %s drained", bad, gw)
		}
	}
	// The failed gateway gives the slot back after the halt.
	waitFor(t, bad+"'s slot given back", time.Minute, func() bool {
		holders := h.holdersOf("edgegate-rollout-" + bad + "-0")
		return len(holders) > 0 && holders[len(holders)-1] == ""
	})
	if holders := h.holdersOf("edgegate-rollout-" + bad + "-0"); !slices.Equal(holders, []string{failed, ""}) {
		t.Errorf("%s: slot holders %v", bad, holders)
	}
	t.Logf("%s: %s failed (%s); drains %v", bad, failed, r.Status.Nodes[failed].Message, f.drains.get()[drainsBefore:])

	if probs := h.problems; len(probs) > 0 {
		t.Errorf("watch: %v", probs)
	}
	f.checkRBAC()
	// What a gateway may not do: change a rollout's spec.
	g := f.gws[f.names[0]]
	if _, err := g.dyn.Resource(rollout.GVR).Patch(ctx, bad, types.MergePatchType, []byte(`{"spec":{"force":true}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a gateway patched a rollout's spec (err %v)", err)
	}
}

// schemaChecks: the API server applies the CRD's schema: a malformed spec is refused with
// the field named, and maxUnavailable defaults to 1.
func (f *fleet) schemaChecks() {
	t := f.t
	url, sum := f.srv.add("/schema.bundle", fakeBundle(board, v1_1))
	for _, tc := range []struct {
		name  string
		spec  map[string]any
		field string
	}{
		{"bad-sum", map[string]any{"version": v1_1, "bundleURL": url, "sha256": "ABC"}, "spec.sha256"},
		{"no-url", map[string]any{"version": v1_1, "sha256": sum}, "spec.bundleURL"},
		{"ftp", map[string]any{"version": v1_1, "bundleURL": "ftp://example.net/b", "sha256": sum}, "spec.bundleURL"},
		{"bad-version", map[string]any{"version": "1.1", "bundleURL": url, "sha256": sum}, "spec.version"},
		{"zero", map[string]any{"version": v1_1, "bundleURL": url, "sha256": sum, "maxUnavailable": int64(0)}, "spec.maxUnavailable"},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": rollout.Group + "/" + rollout.Version, "kind": rollout.Kind,
			"metadata": map[string]any{"name": tc.name}, "spec": tc.spec}}
		_, err := f.admin.Resource(rollout.GVR).Create(t.Context(), u, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("create %s: %v, want invalid %s", tc.name, err, tc.field)
		}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rollout.Group + "/" + rollout.Version, "kind": rollout.Kind,
		"metadata": map[string]any{"name": "defaults"}, "spec": map[string]any{"version": v1_1, "bundleURL": url, "sha256": sum,
			"nodeSelector": map[string]any{"site": "nowhere"}}}}
	got, err := f.admin.Resource(rollout.GVR).Create(t.Context(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, _, _ := unstructured.NestedInt64(got.Object, "spec", "maxUnavailable"); n != 1 {
		t.Errorf("maxUnavailable defaulted to %d", n)
	}
	if force, ok, _ := unstructured.NestedBool(got.Object, "spec", "force"); !ok || force {
		t.Errorf("force defaulted to %v (set %v)", force, ok)
	}
	if err := f.admin.Resource(rollout.GVR).Delete(t.Context(), "defaults", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// deploy/'s example is valid, for the API server and for the gateway.
	example := deployObject(t, "firmwarerollout-example.yaml")
	created, err := f.admin.Resource(rollout.GVR).Create(t.Context(), example, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create deploy/firmwarerollout-example.yaml: %v", err)
	}
	r, err := rollout.Decode(created)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Errorf("deploy/firmwarerollout-example.yaml: %v", err)
	}
	if err := f.admin.Resource(rollout.GVR).Delete(t.Context(), r.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkPrinterColumns reads the rollouts as kubectl get does (a Table) and checks the
// CRD's columns on a complete rollout.
func (f *fleet) checkPrinterColumns(name string) {
	t := f.t
	raw, err := f.c.Client.Discovery().RESTClient().Get().AbsPath("/apis", rollout.Group, rollout.Version, rollout.Resource, name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if want := []string{"Name", "Version", "Phase", "Selected", "Updated", "Updating", "Failed", "Max-Unavailable", "Message", "Age"}; !slices.Equal(cols, want) {
		t.Errorf("columns %v, want %v", cols, want)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("table rows %+v", table.Rows)
	}
	got := fmt.Sprint(table.Rows[0].Cells[:9])
	if want := fmt.Sprintf("[%s %s Complete 3 3 0 0 1 all 3 selected gateways run %s]", name, v1_1, v1_1); got != want {
		t.Errorf("kubectl get fwr %s: %s, want %s", name, got, want)
	}
}
