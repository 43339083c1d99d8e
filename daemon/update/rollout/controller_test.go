package rollout_test

// The controller against fake API clients (client-go's fake dynamic client and clientset),
// the fake updater and an httptest bundle server: one gateway's decisions, step by step.
// cluster_test.go runs three gateways against a real API server.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/daemon/update/rollout"
)

const (
	board = "qemu-x86_64"
	v1_0  = "v1.0.0"
	v1_1  = "v1.1.0"
	// within bounds every wait of these tests; they finish in well under a second each.
	within = 20 * time.Second
)

// A good update, across the reboot: slot, drain, download, install, switch; then the new
// firmware's controller holds the same slot through the trial, and once the updater
// committed reports Updated, undrains, gives the slot back and marks the rollout Complete.
func TestUpdateAcrossReboot(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	e.create("r", e.spec("/v1.1.bundle", v1_1), nil)
	upd := newFakeUpdater(board, v1_0)
	commit := make(chan struct{})
	g := e.start("gw1", upd, commit)

	got := e.waitPhase("r", "gw1", rollout.NodeRebooting)
	waitFor(t, "the trial boot", within, func() bool { return g.bootCount() == 2 && strings.HasPrefix(e.entry("r", "gw1").Message, "trial boot") })
	// The new firmware still holds the slot the old one took: no new transition.
	l := e.lease("edgegate-rollout-r-0")
	if l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != "gw1" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 0 {
		t.Fatalf("slot during the trial: %+v", l)
	}
	// ... and renews it.
	waitFor(t, "the slot renewed during the trial", within, func() bool {
		l := e.lease("edgegate-rollout-r-0")
		return l.Spec.RenewTime.After(l.Spec.AcquireTime.Time)
	})
	if e.entry("r", "gw1").Attempt != got.Attempt || got.Attempt == "" {
		t.Errorf("attempt %q before the reboot, %q after", got.Attempt, e.entry("r", "gw1").Attempt)
	}
	close(commit)

	done := e.waitPhase("r", "gw1", rollout.NodeUpdated)
	if done.From != v1_0 || done.To != v1_1 || done.Attempt != got.Attempt || !strings.Contains(done.Message, "committed") {
		t.Errorf("entry %+v", done)
	}
	waitFor(t, "the slot given back", within, func() bool {
		l := e.lease("edgegate-rollout-r-0")
		return l != nil && l.Spec.HolderIdentity == nil
	})
	waitFor(t, "rollout Complete", within, func() bool { return e.get("r").Status.Phase == rollout.PhaseComplete })
	r := e.get("r")
	if r.Status.SelectedNodes != 1 || r.Status.UpdatedNodes != 1 || r.Status.Message != "all 1 selected gateways run "+v1_1 {
		t.Errorf("status %+v", r.Status)
	}
	installs, activations, cancels := upd.counts()
	want := []update.Request{{Source: "rollout r", Force: false, Activate: false}}
	if !slices.Equal(installs, want) || activations != 1 || len(cancels) != 0 {
		t.Errorf("installs %+v activations %d cancels %v", installs, activations, cancels)
	}
	if d := e.drains.get(); !slices.Equal(d, []string{"gw1 on", "gw1 off"}) {
		t.Errorf("drains %v", d)
	}
	n := e.node("gw1")
	if n.Annotations[rollout.VersionAnnotation] != v1_1 || n.Annotations[rollout.UpdateAnnotation] != "r: Updated" || n.Labels[rollout.BoardLabel] != board {
		t.Errorf("node annotations %v labels %v", n.Annotations, n.Labels)
	}
	if c := e.srv.count("/v1.1.bundle"); c != 1 {
		t.Errorf("%d downloads", c)
	}
}

// The new firmware does not prove healthy: the old one comes back, reports Failed with
// the updater's reason, halts the rollout naming itself, undrains and gives the slot back.
func TestRolledBackHalts(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	e.create("r", e.spec("/v1.1.bundle", v1_1), nil)
	upd := newFakeUpdater(board, v1_0)
	upd.healthy = func(string) bool { return false }
	e.start("gw1", upd, nil)

	got := e.waitPhase("r", "gw1", rollout.NodeFailed)
	if !strings.Contains(got.Message, "rolled-back") || !strings.Contains(got.Message, "did not prove healthy") || got.Attempt == "" {
		t.Errorf("entry %+v", got)
	}
	waitFor(t, "rollout Halted, and counted", within, func() bool {
		s := e.get("r").Status
		return s.Phase == rollout.PhaseHalted && s.FailedNodes == 1
	})
	r := e.get("r")
	if !strings.Contains(r.Status.Message, "gateway gw1 failed") || r.Status.UpdatingNodes != 0 {
		t.Errorf("status %+v", r.Status)
	}
	waitFor(t, "the slot given back", within, func() bool {
		l := e.lease("edgegate-rollout-r-0")
		return l != nil && l.Spec.HolderIdentity == nil
	})
	if d := e.drains.get(); !slices.Equal(d, []string{"gw1 on", "gw1 off"}) {
		t.Errorf("drains %v", d)
	}
	if n := e.node("gw1"); n.Annotations[rollout.VersionAnnotation] != v1_0 || n.Annotations[rollout.UpdateAnnotation] != "r: Failed" {
		t.Errorf("node annotations %v", n.Annotations)
	}
}

// A bundle whose file does not have spec.sha256 is staged by the updater (its signature is
// fine) and then cancelled: Failed, halted, no switch.
func TestDigestMismatch(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	spec := e.spec("/v1.1.bundle", v1_1)
	spec["sha256"] = strings.Repeat("ab", 32)
	e.create("r", spec, nil)
	upd := newFakeUpdater(board, v1_0)
	e.start("gw1", upd, nil)

	got := e.waitPhase("r", "gw1", rollout.NodeFailed)
	if !strings.Contains(got.Message, "FirmwareRollout r: spec.sha256") || !strings.Contains(got.Message, digest(fakeBundle(board, v1_1))) {
		t.Errorf("entry %+v", got)
	}
	waitFor(t, "rollout Halted", within, func() bool { return e.get("r").Status.Phase == rollout.PhaseHalted })
	installs, activations, cancels := upd.counts()
	if len(installs) != 1 || activations != 0 || len(cancels) != 1 || !strings.HasPrefix(cancels[0], "rollout r") {
		t.Errorf("installs %d activations %d cancels %v", len(installs), activations, cancels)
	}
	if st := upd.Status(); st.Pending != nil || st.History[0].Phase != update.PhaseCancelled {
		t.Errorf("updater pending %+v history %+v", st.Pending, st.History)
	}
}

// The bundle's version is not spec.version: cancelled, Failed, no switch.
func TestBundleVersionMismatch(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	url, sum := e.srv.add("/v1.2.bundle", fakeBundle(board, "v1.2.0"))
	e.create("r", map[string]any{"version": v1_1, "bundleURL": url, "sha256": sum}, nil)
	upd := newFakeUpdater(board, v1_0)
	e.start("gw1", upd, nil)
	got := e.waitPhase("r", "gw1", rollout.NodeFailed)
	if !strings.Contains(got.Message, "spec.version: v1.1.0, but the bundle") {
		t.Errorf("entry %+v", got)
	}
	if _, activations, cancels := upd.counts(); activations != 0 || len(cancels) != 1 {
		t.Errorf("activations %d cancels %v", activations, cancels)
	}
}

// A bundle URL that answers 404 fails at once (every gateway would get the same), and a
// bundle the updater refuses (another board) fails with the updater's reason.
func TestDownloadAndRefusal(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", map[string]string{"site": "a"}), gatewayNode("gw2", map[string]string{"site": "b"}))
	spec := e.spec("/v1.1.bundle", v1_1)
	spec["bundleURL"] = e.srv.URL + "/missing.bundle"
	spec["nodeSelector"] = map[string]any{"site": "a"}
	e.create("missing", spec, nil)
	url, sum := e.srv.add("/arm.bundle", fakeBundle("qemu-arm64", v1_1))
	e.create("arm", map[string]any{"version": v1_1, "bundleURL": url, "sha256": sum, "nodeSelector": map[string]any{"site": "b"}}, nil)
	e.start("gw1", newFakeUpdater(board, v1_0), nil)
	gw2 := newFakeUpdater(board, v1_0)
	e.start("gw2", gw2, nil)

	got := e.waitPhase("missing", "gw1", rollout.NodeFailed)
	if !strings.Contains(got.Message, "spec.bundleURL: GET "+e.srv.URL+"/missing.bundle: 404") {
		t.Errorf("entry %+v", got)
	}
	if c := e.srv.count("/missing.bundle"); c != 1 {
		t.Errorf("a 404 was fetched %d times", c)
	}
	got = e.waitPhase("arm", "gw2", rollout.NodeFailed)
	if !strings.Contains(got.Message, "did not install") || !strings.Contains(got.Message, "board qemu-arm64") {
		t.Errorf("entry %+v", got)
	}
	if st := gw2.Status(); st.History[0].Phase != update.PhaseRefused {
		t.Errorf("history %+v", st.History)
	}
}

// A rollout the gateway runs already (or is behind of) reports Updated without a slot, a
// drain or a download; a second rollout of the same version is a no-op too.
func TestAlreadyThere(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	e.create("same", e.spec("/v1.0.bundle", v1_0), nil)
	e.create("older", e.spec("/v0.9.bundle", "v0.9.0"), nil)
	upd := newFakeUpdater(board, v1_0)
	e.start("gw1", upd, nil)
	if got := e.waitPhase("same", "gw1", rollout.NodeUpdated); got.Message != "runs "+v1_0 || got.Attempt != "" {
		t.Errorf("entry %+v", got)
	}
	if got := e.waitPhase("older", "gw1", rollout.NodeUpdated); got.Message != "runs v1.0.0, newer than v0.9.0" {
		t.Errorf("entry %+v", got)
	}
	waitFor(t, "both Complete", within, func() bool {
		return e.get("same").Status.Phase == rollout.PhaseComplete && e.get("older").Status.Phase == rollout.PhaseComplete
	})
	if installs, _, _ := upd.counts(); len(installs) != 0 {
		t.Errorf("installs %+v", installs)
	}
	if e.lease("edgegate-rollout-same-0") != nil || e.srv.count("/v1.0.bundle") != 0 {
		t.Error("a slot or a download for a no-op")
	}
	for _, d := range e.drains.get() {
		if strings.HasSuffix(d, " on") {
			t.Errorf("drained: %v", e.drains.get())
		}
	}
}

// Rollouts that do not select the gateway, or are halted, or whose slot another gateway
// holds, start nothing; once the slot is free the gateway goes ahead.
func TestDoesNotStart(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", map[string]string{"site": "a"}), gatewayNode("gw2", map[string]string{"site": "a"}))
	other := e.spec("/v1.1.bundle", v1_1)
	other["nodeSelector"] = map[string]any{"site": "b"}
	e.create("elsewhere", other, nil)
	e.create("halted", e.spec("/v1.1.bundle", v1_1), map[string]any{"phase": "Halted", "message": "halted: gateway gw9 failed: x"})
	e.create("busy", e.spec("/v1.1.bundle", v1_1), nil)
	e.holdSlot("busy", "uid-busy", "gw2", time.Now())
	upd := newFakeUpdater(board, v1_0)
	e.start("gw1", upd, nil)

	if got := e.waitPhase("halted", "gw1", rollout.NodeWaiting); got.Message != "not started: the rollout is halted" {
		t.Errorf("halted: entry %+v", got)
	}
	if got := e.waitPhase("busy", "gw1", rollout.NodeWaiting); got.Message != "waiting for one of 1 rollout slots (held by [gw2])" {
		t.Errorf("busy: entry %+v", got)
	}
	waitFor(t, "a summary of the rollout that selects nothing here", within, func() bool {
		return e.get("elsewhere").Status.Message == "0 of 0 selected gateways updated"
	})
	if _, ok := e.get("elsewhere").Status.Nodes["gw1"]; ok {
		t.Error("an entry in a rollout that does not select the gateway")
	}
	if installs, _, _ := upd.counts(); len(installs) != 0 || slices.Contains(e.drains.get(), "gw1 on") {
		t.Errorf("installs %+v drains %v", installs, e.drains.get())
	}
	if e.get("halted").Status.Phase != rollout.PhaseHalted {
		t.Error("a gateway lifted a halt")
	}
	// gw2 gives the slot back: gw1 takes it and updates.
	l := e.lease("edgegate-rollout-busy-0")
	l.Spec.HolderIdentity = nil
	if _, err := e.kube.CoordinationV1().Leases(v1.NamespaceNodeLease).Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPhase("busy", "gw1", rollout.NodeUpdated)
}

// A slot whose holder's Lease expired is free, but while that gateway's entry still says
// it updates (a slow reboot), maxUnavailable is spent: the slot goes back, nothing starts.
func TestExpiredSlot(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil), gatewayNode("gw2", nil))
	e.holdSlot("slow", "uid-slow", "gw2", time.Now().Add(-time.Hour))
	e.create("slow", e.spec("/v1.1.bundle", v1_1), map[string]any{"nodes": map[string]any{
		"gw2": map[string]any{"phase": "Rebooting", "from": v1_0, "to": v1_1, "message": "", "attempt": "x", "updated": "2026-01-01T00:00:00Z"}}})
	upd := newFakeUpdater(board, v1_0)
	e.start("gw1", upd, nil)

	got := e.waitPhase("slow", "gw1", rollout.NodeWaiting)
	if got.Message != "waiting for one of 1 rollout slots (held by [gw2 (expired; its entry says Rebooting)])" {
		t.Errorf("entry %+v", got)
	}
	if l := e.lease("edgegate-rollout-slow-0"); ptr.Deref(l.Spec.HolderIdentity, "") != "gw2" || l.Spec.LeaseTransitions != nil {
		t.Errorf("the slot was taken: %+v", l.Spec)
	}
	if installs, _, _ := upd.counts(); len(installs) != 0 || len(e.drains.get()) != 0 {
		t.Errorf("installs %+v drains %v", installs, e.drains.get())
	}
}

// The informer's copy may be older than the API server's: the gateway checks the rollout
// again once it holds the slot, and gives the slot back when another gateway is updating
// beyond maxUnavailable (here: its entry, which only the API server has yet).
func TestFreshCheckAfterSlot(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil), gatewayNode("gw2", nil))
	e.holdSlot("slow", "uid-slow", "gw2", time.Now().Add(-time.Hour))
	e.create("slow", e.spec("/v1.1.bundle", v1_1), nil)
	e.dyn.PrependReactor("get", rollout.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		u, err := e.dyn.Tracker().Get(rollout.GVR, "", a.(k8stesting.GetAction).GetName())
		if err != nil {
			return true, nil, err
		}
		u = u.DeepCopyObject()
		gw2 := map[string]any{"phase": "Rebooting", "from": v1_0, "to": v1_1, "message": "", "attempt": "x", "updated": "2026-01-01T00:00:00Z"}
		if err := unstructured.SetNestedField(u.(*unstructured.Unstructured).Object, gw2, "status", "nodes", "gw2"); err != nil {
			return true, nil, err
		}
		return true, u, nil
	})
	upd := newFakeUpdater(board, v1_0)
	e.start("gw1", upd, nil)
	got := e.waitPhase("slow", "gw1", rollout.NodeWaiting)
	if got.Message != "gateways [gw2] are still updating though their slots expired" {
		t.Errorf("entry %+v", got)
	}
	if installs, _, _ := upd.counts(); len(installs) != 0 || len(e.drains.get()) != 0 {
		t.Errorf("installs %+v drains %v", installs, e.drains.get())
	}
	// gw2 is dead and its Node removed: its part of maxUnavailable is free.
	if err := e.kube.CoreV1().Nodes().Delete(t.Context(), "gw2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPhase("slow", "gw1", rollout.NodeUpdated)
}

// A slot Lease left held by an earlier rollout of the same name (another UID) is free.
func TestEarlierRolloutsSlot(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	e.holdSlot("again", "uid-of-an-earlier-again", "gw2", time.Now())
	e.create("again", e.spec("/v1.1.bundle", v1_1), nil)
	e.start("gw1", newFakeUpdater(board, v1_0), nil)
	e.waitPhase("again", "gw1", rollout.NodeUpdated)
}

// holdSlot writes a rollout's slot Lease 0 as held by holder, last renewed at renewed.
func (e *fakeEnv) holdSlot(rolloutName, uid, holder string, renewed time.Time) {
	e.t.Helper()
	t := metav1.NewMicroTime(renewed)
	if _, err := e.kube.CoordinationV1().Leases(v1.NamespaceNodeLease).Create(e.t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "edgegate-rollout-" + rolloutName + "-0", Namespace: v1.NamespaceNodeLease,
			Annotations: map[string]string{"edgegate.dev/rollout-uid": uid}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To[int32](60), RenewTime: &t},
	}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// A gateway that cannot update itself reports Failed without halting: it touched nothing.
// An update staged by an operator is neither touched nor cancelled: the gateway waits.
func TestUnavailableAndBusy(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil), gatewayNode("gw2", nil))
	e.create("r", e.spec("/v1.1.bundle", v1_1), nil)
	gw1 := newFakeUpdater(board, v1_0)
	gw1.problem = "the firmware did not boot from an A/B disk image"
	e.start("gw1", gw1, nil)
	gw2 := newFakeUpdater(board, v1_0)
	if _, err := gw2.Install(t.Context(), strings.NewReader(string(fakeBundle(board, "v1.0.1"))), update.Request{Source: "upload from 10.0.0.7:5000"}); err != nil {
		t.Fatal(err)
	}
	e.start("gw2", gw2, nil)

	got := e.waitPhase("r", "gw1", rollout.NodeFailed)
	if !strings.Contains(got.Message, "unavailable on this gateway: the firmware did not boot") {
		t.Errorf("entry %+v", got)
	}
	got = e.waitPhase("r", "gw2", rollout.NodeWaiting)
	if !strings.Contains(got.Message, "from upload from 10.0.0.7:5000 is staged") {
		t.Errorf("entry %+v", got)
	}
	waitFor(t, "the summary", within, func() bool { return e.get("r").Status.FailedNodes == 1 })
	if p := e.get("r").Status.Phase; p != rollout.PhaseProgressing {
		t.Errorf("phase %s", p)
	}
	if installs, _, cancels := gw2.counts(); len(installs) != 1 || len(cancels) != 0 {
		t.Errorf("gw2 installs %+v cancels %v", installs, cancels)
	}
	if e.lease("edgegate-rollout-r-0") != nil {
		t.Error("a slot taken")
	}
}

// Malformed rollouts (as an older CRD without the schema would let through) are reported
// on their status and ignored; the controller goes on with the others.
func TestMalformed(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	good := e.spec("/v1.0.bundle", v1_0)
	badSum := e.spec("/v1.1.bundle", v1_1)
	badSum["sha256"] = "ABC"
	noURL := e.spec("/v1.1.bundle", v1_1)
	delete(noURL, "bundleURL")
	ftp := e.spec("/v1.1.bundle", v1_1)
	ftp["bundleURL"] = "ftp://example.net/b"
	wrongType := e.spec("/v1.1.bundle", v1_1)
	wrongType["maxUnavailable"] = "two"
	for name, spec := range map[string]map[string]any{"bad-sum": badSum, "no-url": noURL, "ftp": ftp, "wrong-type": wrongType, "good": good} {
		e.create(name, spec, nil)
	}
	upd := newFakeUpdater(board, v1_0)
	e.start("gw1", upd, nil)
	for name, want := range map[string]string{
		"bad-sum":    `invalid: FirmwareRollout bad-sum: spec.sha256: "ABC" is not 64 lowercase hex digits`,
		"no-url":     "invalid: FirmwareRollout no-url: spec.bundleURL: missing",
		"ftp":        `invalid: FirmwareRollout ftp: spec.bundleURL: "ftp://example.net/b" is not an http or https URL`,
		"wrong-type": "invalid: FirmwareRollout wrong-type: json: cannot unmarshal string into Go struct field Spec.spec.maxUnavailable of type int",
	} {
		waitFor(t, "the problem of "+name+" on its status", within, func() bool {
			u, err := e.dyn.Resource(rollout.GVR).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			msg, _, _ := unstructured.NestedString(u.Object, "status", "message")
			return strings.HasPrefix(msg, want)
		})
	}
	e.waitPhase("good", "gw1", rollout.NodeUpdated)
	if installs, _, _ := upd.counts(); len(installs) != 0 {
		t.Errorf("installs %+v", installs)
	}
}

// The last gateway to report Updated marks the rollout Complete; Nodes that are no
// gateways (no edgegate annotation) are not counted.
func TestComplete(t *testing.T) {
	worker := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker1"}}
	e := newFakeEnv(t, gatewayNode("gw1", nil), gatewayNode("gw2", nil), worker)
	e.create("r", e.spec("/v1.0.bundle", v1_0), map[string]any{"phase": "Progressing", "nodes": map[string]any{
		"gw2": map[string]any{"phase": "Updated", "from": "v0.9.0", "to": v1_0, "message": "", "attempt": "a", "updated": "2026-01-01T00:00:00Z"}}})
	e.start("gw1", newFakeUpdater(board, v1_0), nil)
	waitFor(t, "Complete", within, func() bool { return e.get("r").Status.Phase == rollout.PhaseComplete })
	if s := e.get("r").Status; s.SelectedNodes != 2 || s.UpdatedNodes != 2 || s.ObservedGeneration != 1 {
		t.Errorf("status %+v", s)
	}
}

// The status written is what the CRD's schema describes: every field of an entry.
func TestEntryShape(t *testing.T) {
	e := newFakeEnv(t, gatewayNode("gw1", nil))
	e.create("r", e.spec("/v1.0.bundle", v1_0), nil)
	e.start("gw1", newFakeUpdater(board, v1_0), nil)
	e.waitPhase("r", "gw1", rollout.NodeUpdated)
	u, err := e.dyn.Resource(rollout.GVR).Get(t.Context(), "r", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry, _, _ := unstructured.NestedMap(u.Object, "status", "nodes", "gw1")
	b, _ := json.Marshal(entry)
	for _, k := range []string{`"phase":"Updated"`, `"from":"v1.0.0"`, `"to":"v1.0.0"`, `"message":"runs v1.0.0"`, `"attempt":""`, `"updated":"`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("entry %s lacks %s", b, k)
		}
	}
}

// A step that fails is tried again, the gateway drained meanwhile; a rollout deleted (or
// no longer selecting the gateway) before the retry undrains it.
func TestGivenUpWhileDrained(t *testing.T) {
	for _, how := range []string{"deleted", "unselected"} {
		t.Run(how, func(t *testing.T) {
			e := newFakeEnv(t, gatewayNode("gw1", map[string]string{"site": "a"}))
			spec := e.spec("/v1.1.bundle", v1_1)
			spec["nodeSelector"] = map[string]any{"site": "a"}
			e.create("r", spec, nil)
			// The API server refuses the Downloading report: the update stops drained.
			e.dyn.PrependReactor("patch", rollout.Resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
				if strings.Contains(string(a.(k8stesting.PatchActionImpl).Patch), `"phase":"Downloading"`) {
					return true, nil, apierrors.NewInternalError(fmt.Errorf("test: refused"))
				}
				return false, nil, nil
			})
			upd := newFakeUpdater(board, v1_0)
			e.start("gw1", upd, nil)
			waitFor(t, "gw1 drained", within, func() bool { return slices.Contains(e.drains.get(), "gw1 on") })
			switch how {
			case "deleted":
				if err := e.dyn.Resource(rollout.GVR).Delete(t.Context(), "r", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			case "unselected":
				n := e.node("gw1")
				n.Labels["site"] = "b"
				if _, err := e.kube.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "gw1 undrained", within, func() bool { return slices.Contains(e.drains.get(), "gw1 off") })
			if installs, _, _ := upd.counts(); len(installs) != 0 {
				t.Errorf("installs %+v", installs)
			}
		})
	}
}
