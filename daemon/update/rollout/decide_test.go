package rollout

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgegate/edgegate/daemon/node"
	"github.com/edgegate/edgegate/daemon/update"
)

const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func testRollout(mods ...func(*FirmwareRollout)) *FirmwareRollout {
	r := &FirmwareRollout{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "u1", Generation: 1},
		Spec: Spec{Version: "v1.1.0", BundleURL: "http://b.example/x.bundle", SHA256: sum}}
	for _, m := range mods {
		m(r)
	}
	return r
}

func withEntry(node string, e NodeStatus) func(*FirmwareRollout) {
	return func(r *FirmwareRollout) {
		if r.Status.Nodes == nil {
			r.Status.Nodes = map[string]NodeStatus{}
		}
		if e.To == "" {
			e.To = r.Spec.Version
		}
		r.Status.Nodes[node] = e
	}
}

func halted(r *FirmwareRollout) { r.Status.Phase = PhaseHalted }

func running(version string, mods ...func(*update.Status)) update.Status {
	st := update.Status{Available: true, Board: "b", Version: version}
	for _, m := range mods {
		m(&st)
	}
	return st
}

func withHistory(a ...update.Attempt) func(*update.Status) {
	return func(st *update.Status) { st.History = a }
}

func withPending(a update.Attempt) func(*update.Status) {
	return func(st *update.Status) { st.Pending = &a }
}

func onTrial(st *update.Status) { st.Trial = &update.Trial{Boot: 1, Tries: 2} }

func attempt(id string, phase update.Phase) update.Attempt {
	return update.Attempt{ID: id, Source: "rollout r", Phase: phase, From: update.Firmware{Version: "v1.0.0"},
		To: update.Firmware{Version: "v1.1.0"}, Reason: "why"}
}

// Every decision from the state alone: what the API server says and what the updater
// says, before and after a reboot.
func TestDecide(t *testing.T) {
	sel := func(r *FirmwareRollout) { r.Spec.NodeSelector = map[string]string{"site": "a"} }
	for _, tc := range []struct {
		name   string
		r      *FirmwareRollout
		labels map[string]string
		noNode bool
		st     update.Status
		want   action
		reason string // a part of it
	}{
		{name: "malformed", r: testRollout(func(r *FirmwareRollout) { r.Spec.SHA256 = "x" }), st: running("v1.0.0"), want: actInvalid, reason: "spec.sha256"},
		{name: "own Node unknown", r: testRollout(), noNode: true, st: running("v1.0.0"), want: actNoNode},
		{name: "not selected", r: testRollout(sel), labels: map[string]string{"site": "b"}, st: running("v1.0.0"), want: actNone},
		{name: "selected", r: testRollout(sel), labels: map[string]string{"site": "a"}, st: running("v1.0.0"), want: actUpdate},
		{name: "at the version", r: testRollout(), st: running("v1.1.0"), want: actUpdated, reason: "runs v1.1.0"},
		{name: "newer", r: testRollout(), st: running("v1.2.0"), want: actUpdated, reason: "newer than v1.1.0"},
		{name: "newer, forced", r: testRollout(func(r *FirmwareRollout) { r.Spec.Force = true }), st: running("v1.2.0"), want: actUpdate},
		{name: "halted", r: testRollout(halted), st: running("v1.0.0"), want: actHalted},
		{name: "halted, at the version", r: testRollout(halted), st: running("v1.1.0"), want: actUpdated},
		{name: "unavailable", r: testRollout(), st: update.Status{Version: "v1.0.0", Problem: "no A/B disk"}, want: actUnavailable, reason: "no A/B disk"},
		{name: "an upload staged", r: testRollout(), st: running("v1.0.0", withPending(update.Attempt{ID: "up", Source: "upload", Phase: update.PhaseStaged, To: update.Firmware{Version: "v1.0.5"}})),
			want: actBusy, reason: "update up from upload is staged"},
		{name: "rebooting for another update", r: testRollout(), st: running("v1.0.0", func(st *update.Status) { st.Rebooting = true }), want: actBusy},
		{name: "resume a staged attempt", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeInstalling, Attempt: "a1"})),
			st: running("v1.0.0", withPending(attempt("a1", update.PhaseStaged))), want: actUpdate},
		{name: "a staged attempt of this rollout the entry lost", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeDownloading})),
			st: running("v1.0.0", withPending(attempt("a1", update.PhaseStaged))), want: actUpdate},
		{name: "staged, then halted", r: testRollout(halted, withEntry("gw1", NodeStatus{Phase: NodeInstalling, Attempt: "a1"})),
			st: running("v1.0.0", withPending(attempt("a1", update.PhaseStaged))), want: actHalted},
		{name: "switched, rebooting", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeRebooting, Attempt: "a1"})),
			st: running("v1.0.0", withPending(attempt("a1", update.PhaseTrial)), func(st *update.Status) { st.Rebooting = true }), want: actRebooting},
		{name: "trial boot", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeRebooting, Attempt: "a1"})),
			st: running("v1.1.0", withPending(attempt("a1", update.PhaseTrial)), onTrial), want: actTrial},
		{name: "committed", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeRebooting, Attempt: "a1"})),
			st: running("v1.1.0", withHistory(attempt("a1", update.PhaseCommitted))), want: actUpdated, reason: "update a1 committed"},
		{name: "rolled back", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeRebooting, Attempt: "a1"})),
			st: running("v1.0.0", withHistory(attempt("a1", update.PhaseRolledBack))), want: actFail, reason: "update a1 to v1.1.0 rolled-back: why"},
		{name: "interrupted", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeRebooting, Attempt: "a1"})),
			st: running("v1.0.0", withHistory(attempt("a1", update.PhaseInterrupted))), want: actFail, reason: "interrupted"},
		{name: "cancelled by an operator", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeInstalling, Attempt: "a1"})),
			st: running("v1.0.0", withHistory(attempt("a1", update.PhaseCancelled))), want: actFail, reason: "cancelled"},
		{name: "committed, but the old slot runs", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeRebooting, Attempt: "a1"})),
			st: running("v1.0.0", withHistory(attempt("a1", update.PhaseCommitted))), want: actFail, reason: "other slot was booted"},
		{name: "the history lost the attempt", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeRebooting, Attempt: "a1"})),
			st: running("v1.0.0"), want: actFail, reason: "has no update a1"},
		{name: "failed stays failed", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeFailed})), st: running("v1.0.0"), want: actNone},
		{name: "updated once, moved on since", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeUpdated})), st: running("v1.0.0"), want: actNone},
		{name: "an entry for an earlier spec.version", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeFailed, To: "v1.0.5", Attempt: "a0"})),
			st: running("v1.0.0", withHistory(attempt("a0", update.PhaseRolledBack))), want: actUpdate},
		{name: "mid-download when the daemon restarted", r: testRollout(withEntry("gw1", NodeStatus{Phase: NodeDownloading})), st: running("v1.0.0"), want: actUpdate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.r, "gw1", tc.labels, !tc.noNode, tc.st)
			if d.act != tc.want || !strings.Contains(d.reason, tc.reason) {
				t.Errorf("decide = %v %q, want %v with %q", d.act, d.reason, tc.want, tc.reason)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*FirmwareRollout)
		want string
	}{
		{"valid", func(*FirmwareRollout) {}, ""},
		{"https", func(r *FirmwareRollout) { r.Spec.BundleURL = "https://b.example:8443/x?sig=1" }, ""},
		{"no version", func(r *FirmwareRollout) { r.Spec.Version = "" }, "FirmwareRollout r: spec.version: missing"},
		{"bad version", func(r *FirmwareRollout) { r.Spec.Version = "1.1" }, "FirmwareRollout r: spec.version: version \"1.1\""},
		{"no URL", func(r *FirmwareRollout) { r.Spec.BundleURL = "" }, "spec.bundleURL: missing"},
		{"ftp", func(r *FirmwareRollout) { r.Spec.BundleURL = "ftp://b/x" }, "spec.bundleURL: \"ftp://b/x\" is not an http or https URL"},
		{"no host", func(r *FirmwareRollout) { r.Spec.BundleURL = "http:///x" }, "is not an http or https URL"},
		{"no sha256", func(r *FirmwareRollout) { r.Spec.SHA256 = "" }, "spec.sha256: missing"},
		{"upper-case sha256", func(r *FirmwareRollout) { r.Spec.SHA256 = strings.ToUpper(sum) }, "spec.sha256: "},
		{"short sha256", func(r *FirmwareRollout) { r.Spec.SHA256 = sum[:63] }, "spec.sha256: "},
		{"maxUnavailable", func(r *FirmwareRollout) { r.Spec.MaxUnavailable = -1 }, "spec.maxUnavailable: -1 is less than 1"},
		{"selector", func(r *FirmwareRollout) { r.Spec.NodeSelector = map[string]string{"a b": "c"} }, "spec.nodeSelector: "},
		{"long name", func(r *FirmwareRollout) { r.Name = strings.Repeat("n", 240) }, "metadata.name: too long for its Lease names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := testRollout(tc.mod).Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
	if n := testRollout().maxUnavailable(); n != 1 {
		t.Errorf("maxUnavailable defaults to %d", n)
	}
}

func TestSummary(t *testing.T) {
	gw := func(name string, lbls map[string]string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
	}
	gws := []*v1.Node{gw("gw1", map[string]string{"site": "a"}), gw("gw2", map[string]string{"site": "a"}), gw("gw3", map[string]string{"site": "b"})}
	sel := func(r *FirmwareRollout) { r.Spec.NodeSelector = map[string]string{"site": "a"} }
	for _, tc := range []struct {
		name string
		r    *FirmwareRollout
		want Status
	}{
		{"nothing yet", testRollout(sel), Status{Phase: PhaseProgressing, Message: "0 of 2 selected gateways updated", SelectedNodes: 2}},
		{"one updating", testRollout(sel, withEntry("gw1", NodeStatus{Phase: NodeUpdated}), withEntry("gw2", NodeStatus{Phase: NodeRebooting})),
			Status{Phase: PhaseProgressing, Message: "1 of 2 selected gateways updated, 1 updating", SelectedNodes: 2, UpdatedNodes: 1, UpdatingNodes: 1}},
		{"complete; an unselected gateway's entry does not count", testRollout(sel, withEntry("gw1", NodeStatus{Phase: NodeUpdated}),
			withEntry("gw2", NodeStatus{Phase: NodeUpdated}), withEntry("gw3", NodeStatus{Phase: NodeFailed})),
			Status{Phase: PhaseComplete, Message: "all 2 selected gateways run v1.1.0", SelectedNodes: 2, UpdatedNodes: 2}},
		{"an entry of an earlier version does not count", testRollout(sel, withEntry("gw1", NodeStatus{Phase: NodeUpdated, To: "v1.0.0"})),
			Status{Phase: PhaseProgressing, Message: "0 of 2 selected gateways updated", SelectedNodes: 2}},
		{"halted stays", testRollout(sel, withEntry("gw1", NodeStatus{Phase: NodeFailed}), func(r *FirmwareRollout) {
			r.Status.Phase, r.Status.Message = PhaseHalted, "halted: gateway gw1 failed: x"
		}), Status{Phase: PhaseHalted, Message: "halted: gateway gw1 failed: x", SelectedNodes: 2, FailedNodes: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.ObservedGeneration = 1
			got := summary(tc.r, gws)
			got.Nodes = nil
			if got.Phase != tc.want.Phase || got.Message != tc.want.Message || got.SelectedNodes != tc.want.SelectedNodes ||
				got.UpdatedNodes != tc.want.UpdatedNodes || got.UpdatingNodes != tc.want.UpdatingNodes || got.FailedNodes != tc.want.FailedNodes ||
				got.ObservedGeneration != tc.want.ObservedGeneration {
				t.Errorf("summary = %+v\nwant      %+v", got, tc.want)
			}
		})
	}
}

// The Node annotation that marks a gateway is daemon/node's.
func TestGatewayAnnotation(t *testing.T) {
	if gatewayAnnotation != node.VersionAnnotation {
		t.Errorf("gatewayAnnotation %q, daemon/node registers %q", gatewayAnnotation, node.VersionAnnotation)
	}
}
