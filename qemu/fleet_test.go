package qemu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/daemon/update/rollout"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
)

// The addresses the gateways reach the host's services at: QEMU's user-mode network
// forwards exactly these (guestfwd), through a relay, to the host's loopback.
const (
	fleetAPIAddr    = "10.0.2.100"
	fleetBundleAddr = "10.0.2.101"
)

// TestFleetRollout is the fleet rollout end to end: a real kube-apiserver with deploy/'s
// CRD and RBAC, three qemu-x86_64 gateways booted from their disk images through OVMF and
// joined to it, bundles served over HTTP. A good FirmwareRollout with maxUnavailable 1
// updates the three one at a time (never two between Draining and Updated) and ends
// Complete, though gw1's daemon panics in its slot Lease's renewer on the way (a fault
// armed on its data partition; the good rollout's releases carry the fault hook); a
// rollout of a release that panics at every boot stops after the first
// gateway, which rolls back by itself and reports Failed, and the other two never start.
func TestFleetRollout(t *testing.T) {
	b, err := board.Load("qemu-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	RequireUEFI(t, b)
	RequireTools(t, image.Tools...)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	start := time.Now()
	c := clustertest.Start(t, cluster.Options{GatewayGroups: []string{"system:bootstrappers:edgegate"},
		SANs: []netip.Addr{netip.MustParseAddr(fleetAPIAddr)}})
	if _, err := cluster.ApplyFile(ctx, c.Client, "../deploy/rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	admin, err := dynamic.NewForConfig(c.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	applyRolloutCRD(ctx, t, admin)

	// The good rollout's two releases carry the fault hook, so that the rollout-lease
	// fault armed on gw1's data partition fires in whichever of its runs renews its slot
	// first.
	faultTags := []string{"egfault"}
	r := newReleases(ctx, t, b, []releaseSpec{
		{"v1.0.0", daemonPkg, "fleet", faultTags}, {"v1.1.0", daemonPkg, "fleet", faultTags}, {"v1.2.0-panics", panicInit, "", nil},
	}, map[string]string{"fleet": fleetImageConfig})
	bundles := serveBundles(t, r)
	relay := buildRelay(ctx, t)
	apiPort := c.Server[strings.LastIndex(c.Server, ":")+1:]
	netdev := fmt.Sprintf(",guestfwd=tcp:%s:6443-cmd:%s 127.0.0.1:%s,guestfwd=tcp:%s:80-cmd:%s 127.0.0.1:%d",
		fleetAPIAddr, relay, apiPort, fleetBundleAddr, relay, bundles.port)
	var gws []*updateTest
	for i := range 3 {
		name := fmt.Sprintf("gw%d", i+1)
		data := map[string]string{
			"config.yaml": fmt.Sprintf(fleetDataConfig, fleetAPIAddr, name),
			"token":       c.GatewayToken + "\n",
			"ca.crt":      string(c.CAPEM),
		}
		if i == 0 {
			data["faults/"+rolloutLeasePoint] = "panic\n" // on the data partition: fault.DataDir
		}
		gws = append(gws, r.gateway(t, name, data, netdev))
	}
	for _, g := range gws {
		g.boot(t)
	}
	for _, g := range gws {
		g.waitReady(t)
		g.waitCommittedIdle(t)
	}
	t.Logf("cluster, releases, 3 disk images and 3 gateways up in %v", time.Since(start).Round(time.Millisecond))
	defer func() {
		for _, g := range gws {
			g.vm.Kill()
			_, _ = g.vm.Wait()
		}
	}()

	t.Run("good", func(t *testing.T) {
		start := time.Now()
		w := watchRollout(ctx, t, admin, "edge-v1-1")
		createRollout(ctx, t, admin, "edge-v1-1", "v1.1.0", bundles.url("v1.1.0"), bundles.digest["v1.1.0"])
		st := w.until(t, 15*time.Minute, func(s rollout.Status) bool { return s.Phase != rollout.PhaseProgressing && s.Phase != "" })
		if st.Phase != rollout.PhaseComplete || st.UpdatedNodes != 3 || st.FailedNodes != 0 {
			t.Fatalf("rollout ended %s: %+v", st.Phase, st)
		}
		for _, g := range gws {
			s := g.status(t)
			if s.Version != "v1.1.0" || s.History[0].Phase != update.PhaseCommitted || s.History[0].Source != "rollout edge-v1-1" {
				t.Errorf("%s: runs %s, last attempt %+v", g.name, s.Version, s.History[0])
			}
		}
		order, overlaps := w.serial()
		if len(overlaps) > 0 {
			t.Errorf("more than maxUnavailable=1 gateway updating at once: %v", overlaps)
		}
		t.Logf("good rollout: all 3 gateways updated one at a time (%s) in %v", strings.Join(order, ", "), time.Since(start).Round(time.Millisecond))
		checkRolloutLeaseFault(t, gws[0])
	})

	t.Run("bad", func(t *testing.T) {
		start := time.Now()
		before := map[string]int{}
		for _, g := range gws {
			before[g.name] = len(g.status(t).History)
		}
		w := watchRollout(ctx, t, admin, "edge-v1-2")
		createRollout(ctx, t, admin, "edge-v1-2", "v1.2.0-panics", bundles.url("v1.2.0-panics"), bundles.digest["v1.2.0-panics"])
		st := w.until(t, 15*time.Minute, func(s rollout.Status) bool { return s.Phase == rollout.PhaseHalted })
		var failed []string
		for name, n := range st.Nodes {
			if n.Phase == rollout.NodeFailed {
				failed = append(failed, name)
			}
		}
		if len(failed) != 1 {
			t.Fatalf("halted with failed gateways %v, want exactly one: %+v", failed, st)
		}
		for _, g := range gws {
			s := g.status(t)
			if s.Version != "v1.1.0" {
				t.Errorf("%s runs %s after the halted rollout", g.name, s.Version)
			}
			if g.name == failed[0] {
				if h := s.History[0]; h.Phase != update.PhaseRolledBack || h.To.Version != "v1.2.0-panics" {
					t.Errorf("%s (failed): last attempt %+v, want rolled back", g.name, h)
				}
				continue
			}
			if len(s.History) != before[g.name] || s.Pending != nil {
				t.Errorf("%s was touched by the halted rollout: %d attempts (had %d), pending %v", g.name, len(s.History), before[g.name], s.Pending)
			}
			if n, ok := st.Nodes[g.name]; ok && n.Phase != rollout.NodeWaiting {
				t.Errorf("%s's status entry: %+v", g.name, n)
			}
		}
		t.Logf("bad rollout: %s rolled back and the rollout halted in %v; message: %s", failed[0], time.Since(start).Round(time.Millisecond), st.Message)
	})
}

// rolloutLeasePoint is daemon/internal/fault.RolloutLease.
const rolloutLeasePoint = "rollout-lease"

// checkRolloutLeaseFault: the fault armed on g's data partition panicked the rollout slot
// Lease's renewer while g held its slot, PID 1 counted the run's end as a panic and started
// the daemon again, and the rollout went on (the caller checked it completed).
func checkRolloutLeaseFault(t *testing.T, g *updateTest) {
	t.Helper()
	injected := false
	for _, l := range g.vm.Lines() {
		injected = injected || strings.Contains(l.Text, "egfault: injecting panic at "+rolloutLeasePoint)
	}
	panics := 0
	for _, end := range strings.Fields(runEnds(g.vm)) {
		if end == "panic" {
			panics++
		}
	}
	if !injected || panics != 1 {
		t.Errorf("%s: the armed %s fault: injected %v, daemon runs ended by a panic %d, want true and 1", g.name, rolloutLeasePoint, injected, panics)
		return
	}
	t.Logf("%s: the slot Lease's renewer panicked; PID 1 restarted the daemon and the rollout went on", g.name)
}

// The gateways' configuration: the image's (dashboard token, a trial long enough to join
// the cluster under TCG) and the data partition's (the cluster, the gateway's name).
const (
	fleetImageConfig = `dashboardTokenFile: /var/lib/edgegate/dashboard-token
dashboardBindAddress: 0.0.0.0:443
update:
  trialTimeout: 3m
`
	fleetDataConfig = `apiServer: https://%s:6443
tokenFile: /var/lib/edgegate/token
caFile: /var/lib/edgegate/ca.crt
hostnameOverride: %s
dashboardTokenFile: /var/lib/edgegate/dashboard-token
dashboardBindAddress: 0.0.0.0:443
update:
  trialTimeout: 3m
  drainSettle: 2s
  rolloutLease: 30s
`
)

// waitCommittedIdle waits until the gateway has nothing pending: a fresh image's first
// boot has no update to settle, so this is at once.
func (u *updateTest) waitCommittedIdle(t *testing.T) {
	t.Helper()
	if st := u.status(t); st.Pending != nil || st.Trial != nil || st.Version != "v1.0.0" {
		t.Fatalf("%s: a fresh gateway with an update state: %+v", u.name, st)
	}
}

// bundleServer serves the releases' bundles on the host's loopback.
type bundleServer struct {
	port   int
	digest map[string]string
}

func (b *bundleServer) url(version string) string {
	return fmt.Sprintf("http://%s/%s.bundle", fleetBundleAddr, version)
}

func serveBundles(t *testing.T, r *releases) *bundleServer {
	t.Helper()
	b := &bundleServer{digest: map[string]string{}}
	mux := http.NewServeMux()
	for version, file := range r.bundles {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		b.digest[version] = hex.EncodeToString(sum[:])
		mux.HandleFunc("GET /"+version+".bundle", func(w http.ResponseWriter, req *http.Request) {
			http.ServeFile(w, req, file)
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	b.port = ln.Addr().(*net.TCPAddr).Port
	return b
}

// buildRelay builds qemu/testdata/relay for the host.
func buildRelay(ctx context.Context, t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "relay")
	if err := goBuild(ctx, runtime.GOARCH, "build", "github.com/edgegate/edgegate/qemu/testdata/relay", out); err != nil {
		t.Fatal(err)
	}
	return out
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// applyRolloutCRD creates deploy/'s FirmwareRollout CRD and waits until it is served.
func applyRolloutCRD(ctx context.Context, t *testing.T, admin dynamic.Interface) {
	t.Helper()
	raw, err := os.ReadFile("../deploy/firmwarerollout-crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Resource(crdGVR).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := admin.Resource(rollout.GVR).List(ctx, metav1.ListOptions{}); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("the FirmwareRollout CRD is not served: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func createRollout(ctx context.Context, t *testing.T, admin dynamic.Interface, name, version, url, digest string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rollout.GVR.Group + "/" + rollout.GVR.Version, "kind": "FirmwareRollout",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"version": version, "bundleURL": url, "sha256": digest, "maxUnavailable": int64(1)},
	}}
	if _, err := admin.Resource(rollout.GVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rolloutWatch polls a rollout's status and records every gateway's phase changes.
type rolloutWatch struct {
	ctx   context.Context
	admin dynamic.Interface
	name  string

	mu      sync.Mutex
	last    map[string]rollout.NodePhase
	changes []phaseChange
}

type phaseChange struct {
	node  string
	phase rollout.NodePhase
}

func watchRollout(ctx context.Context, t *testing.T, admin dynamic.Interface, name string) *rolloutWatch {
	return &rolloutWatch{ctx: ctx, admin: admin, name: name, last: map[string]rollout.NodePhase{}}
}

// until polls the status until done says so, recording the transitions it sees.
func (w *rolloutWatch) until(t *testing.T, within time.Duration, done func(rollout.Status) bool) rollout.Status {
	t.Helper()
	deadline := time.Now().Add(within)
	var last rollout.Status
	for {
		u, err := w.admin.Resource(rollout.GVR).Get(w.ctx, w.name, metav1.GetOptions{})
		if err == nil {
			r, err := rollout.Decode(u)
			if err != nil {
				t.Fatal(err)
			}
			last = r.Status
			w.record(r.Status)
			if done(r.Status) {
				return r.Status
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout %s: not done within %v; last status %+v", w.name, within, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (w *rolloutWatch) record(st rollout.Status) {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := make([]string, 0, len(st.Nodes))
	for n := range st.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if p := st.Nodes[n].Phase; w.last[n] != p {
			w.last[n] = p
			w.changes = append(w.changes, phaseChange{n, p})
		}
	}
}

// serial replays the recorded transitions: the order in which gateways were updated, and
// the moments two were out of service at once.
func (w *rolloutWatch) serial() (order, overlaps []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	busy := map[string]bool{}
	for _, c := range w.changes {
		switch c.phase {
		case rollout.NodeDraining, rollout.NodeDownloading, rollout.NodeInstalling, rollout.NodeRebooting:
			if !busy[c.node] {
				busy[c.node] = true
				order = append(order, c.node)
			}
		default:
			delete(busy, c.node)
		}
		if len(busy) > 1 {
			overlaps = append(overlaps, fmt.Sprintf("%s %s with %d updating", c.node, c.phase, len(busy)))
		}
	}
	return order, overlaps
}
