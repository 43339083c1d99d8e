package node

import (
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testConfig() Config {
	c := Config{
		Name: "gw1", Zone: "zone-a", Region: "eu-1", Version: "v1.2.3", KernelVersion: "6.1.0-30-cloud-amd64",
		InternalIPs: []netip.Addr{netip.MustParseAddr("192.168.1.2"), netip.MustParseAddr("fd00:1::2")},
	}
	c.defaults()
	return c
}

func TestNewNode(t *testing.T) {
	n := newNode(testConfig())
	wantLabels := map[string]string{
		"node-role.kubernetes.io/ingress": "",
		"kubernetes.io/hostname":          "gw1",
		"kubernetes.io/os":                "linux",
		"kubernetes.io/arch":              runtime.GOARCH,
		"topology.kubernetes.io/zone":     "zone-a",
		"topology.kubernetes.io/region":   "eu-1",
	}
	if diff := cmp.Diff(wantLabels, n.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"edgegate.dev/version": "v1.2.3"}, n.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]v1.Taint{{Key: "node-role.kubernetes.io/ingress", Effect: v1.TaintEffectNoSchedule}}, n.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	c := testConfig()
	c.Zone, c.Region = "", ""
	if n := newNode(c); n.Labels["topology.kubernetes.io/zone"] != "" || len(n.Labels) != 4 {
		t.Errorf("without zone and region: labels %v", n.Labels)
	}
}

func TestReconcileNodeKeepsOthers(t *testing.T) {
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gw1",
			Labels:      map[string]string{"rack": "r7", "topology.kubernetes.io/zone": "old"},
			Annotations: map[string]string{"edgegate.dev/version": "v1.0.0", "note": "x"}},
		Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoExecute}}},
	}
	if !reconcileNode(n, testConfig()) {
		t.Fatal("reconcileNode reports no change on a Node lacking the gateway's labels")
	}
	if n.Labels["rack"] != "r7" || n.Labels["topology.kubernetes.io/zone"] != "zone-a" || n.Annotations["note"] != "x" ||
		n.Annotations["edgegate.dev/version"] != "v1.2.3" {
		t.Errorf("labels %v annotations %v", n.Labels, n.Annotations)
	}
	if len(n.Spec.Taints) != 2 || n.Spec.Taints[0].Key != "node.kubernetes.io/unreachable" {
		t.Errorf("taints %v: the controller's taint must stay and ours be added", n.Spec.Taints)
	}
	if reconcileNode(n, testConfig()) {
		t.Error("a second reconcile reports a change")
	}
}

// TestFingerprintAnnotations: the dashboard's fingerprints are published, replaced when
// they change, and removed when the dashboard has none (an empty value).
func TestFingerprintAnnotations(t *testing.T) {
	c := testConfig()
	c.Annotations = map[string]string{DashboardCertAnnotation: "AB:CD", DashboardSPKIAnnotation: "q83v"}
	n := newNode(c)
	if n.Annotations["edgegate.dev/dashboard-cert-sha256"] != "AB:CD" || n.Annotations["edgegate.dev/dashboard-spki-sha256"] != "q83v" {
		t.Errorf("annotations %v, want the fingerprints", n.Annotations)
	}
	if reconcileNode(n, c) {
		t.Error("a second reconcile reports a change")
	}
	c.Annotations = map[string]string{DashboardCertAnnotation: "", DashboardSPKIAnnotation: ""}
	if !reconcileNode(n, c) || len(n.Annotations) != 1 {
		t.Errorf("without a certificate: annotations %v, want the version only", n.Annotations)
	}
	if reconcileNode(n, c) {
		t.Error("removing absent annotations reports a change")
	}
}

func TestSetStatus(t *testing.T) {
	c := testConfig()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var st v1.NodeStatus
	setStatus(&st, c, false, ReasonNotProgrammed, "starting", t0)
	wantAddrs := []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: "192.168.1.2"},
		{Type: v1.NodeInternalIP, Address: "fd00:1::2"},
		{Type: v1.NodeHostName, Address: "gw1"},
	}
	if diff := cmp.Diff(wantAddrs, st.Addresses); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	if q := st.Allocatable[v1.ResourcePods]; q.Cmp(resource.MustParse("0")) != 0 {
		t.Errorf("allocatable pods %v, want 0", q.String())
	}
	if st.NodeInfo.OSImage != "edgegate v1.2.3" || st.NodeInfo.KernelVersion != c.KernelVersion {
		t.Errorf("node info %+v", st.NodeInfo)
	}
	// Other conditions stay; the transition time moves only with the status.
	st.Conditions = append(st.Conditions, v1.NodeCondition{Type: "NetworkUnavailable", Status: v1.ConditionFalse})
	setStatus(&st, c, false, ReasonNotProgrammed, "starting", t0.Add(10*time.Second))
	setStatus(&st, c, true, ReasonReady, "forwarding", t0.Add(20*time.Second))
	setStatus(&st, c, true, ReasonReady, "forwarding", t0.Add(30*time.Second))
	if len(st.Conditions) != 2 {
		t.Fatalf("conditions %v", st.Conditions)
	}
	r := st.Conditions[0]
	if r.Status != v1.ConditionTrue || r.Reason != ReasonReady || !r.LastTransitionTime.Time.Equal(t0.Add(20*time.Second)) ||
		!r.LastHeartbeatTime.Time.Equal(t0.Add(30*time.Second)) {
		t.Errorf("ready condition %+v", r)
	}
}

func TestStatusDue(t *testing.T) {
	c := testConfig()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var st v1.NodeStatus
	if !statusDue(st, c, true, ReasonReady, "ok", t0) {
		t.Error("a status without a Ready condition is not due")
	}
	setStatus(&st, c, true, ReasonReady, "ok", t0)
	cases := []struct {
		name   string
		mod    func(*v1.NodeStatus)
		ready  bool
		reason string
		at     time.Duration
		want   bool
	}{
		{"unchanged", nil, true, ReasonReady, 10 * time.Second, false},
		{"interval passed", nil, true, ReasonReady, c.StatusInterval, true},
		{"readiness changed", nil, false, ReasonDraining, 10 * time.Second, true},
		{"marked unknown by the node controller", func(s *v1.NodeStatus) { s.Conditions[0].Status = v1.ConditionUnknown },
			true, ReasonReady, 10 * time.Second, true},
		{"address lost", func(s *v1.NodeStatus) { s.Addresses = s.Addresses[1:] }, true, ReasonReady, 10 * time.Second, true},
	}
	for _, tc := range cases {
		cur := *st.DeepCopy()
		if tc.mod != nil {
			tc.mod(&cur)
		}
		if got := statusDue(cur, c, tc.ready, tc.reason, "ok", t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s: due %v, want %v", tc.name, got, tc.want)
		}
	}
}
