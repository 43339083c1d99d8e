package app

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/lb/alloc"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/proxy"
)

// fakeDataplane programs nothing and counts its calls; err fails its Program.
type fakeDataplane struct {
	err   error
	calls int
}

var _ proxy.Dataplane = (*fakeDataplane)(nil)

func (d *fakeDataplane) Mode() plan.Mode { return plan.ModeNFTables }
func (d *fakeDataplane) Program(_ *model.Snapshot, full bool) (proxy.Result, error) {
	d.calls++
	return proxy.Result{Full: full}, d.err
}
func (d *fakeDataplane) Cleanup() error { return nil }

// testSyncLoop is the sync loop over a fake dataplane, with conntrack left alone.
func testSyncLoop(t *testing.T, dp proxy.Dataplane) *syncLoop {
	t.Helper()
	tracker := model.NewTracker()
	px := &proxyPart{tracker: tracker, proxier: &proxy.Proxier{
		Tracker: tracker, Dataplane: dp, Metrics: metrics.New(), Health: healthz.New(time.Minute, time.Now),
		Log: discard(), Families: families, FullSyncPeriod: time.Hour, Now: time.Now,
	}}
	sl := newSyncLoop(defaults(), px, discard())
	sl.afterFirst = func() {}
	return sl
}

func names(us []Unit) string {
	var out []string
	for _, u := range us {
		p := "end-run"
		if u.Policy == Restart {
			p = "restart"
		}
		out = append(out, u.Name+"/"+p)
	}
	return strings.Join(out, " ")
}

// TestSyncLoopTellsWhoFollows: a successful sync tells the cluster's Node, then PID 1; it
// counts as programmed only once the source has loaded; the first one tunes conntrack; a
// failed one tells nobody and keeps the previous state.
func TestSyncLoopTellsWhoFollows(t *testing.T) {
	dp := &fakeDataplane{}
	sl := testSyncLoop(t, dp)
	tuned := 0
	sl.afterFirst = func() { tuned++ }
	var heard []string
	sl.clusterSynced = func() { heard = append(heard, "node") }
	sl.ready = func() { heard = append(heard, "pid1 programmed="+strconv.FormatBool(sl.programmed.Load())) }

	sl.sync(discard())
	sl.sourceLoaded.Store(true)
	sl.sync(discard())
	dp.err = errors.New("netlink: operation not permitted")
	sl.proxier.FullSyncPeriod = 0 // nothing changed: only a full sync reaches the dataplane
	sl.sync(discard())

	want := []string{"node", "pid1 programmed=false", "node", "pid1 programmed=true"}
	if !slices.Equal(heard, want) {
		t.Errorf("heard %q, want %q", heard, want)
	}
	if dp.calls != 2 {
		t.Errorf("the dataplane was asked %d times, want 2 (the first sync, the failing full one)", dp.calls)
	}
	if tuned != 1 {
		t.Errorf("conntrack tuned %d times, want once", tuned)
	}
}

// TestDaemonCheck: the trial boot's health check of a standalone daemon asks for the
// source's first state and a sync that programmed it.
func TestDaemonCheck(t *testing.T) {
	sl := testSyncLoop(t, &fakeDataplane{})
	check := daemonCheck(sl, nil)
	if err := check(); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("before the source loaded: %v", err)
	}
	sl.sourceLoaded.Store(true)
	if err := check(); err == nil || !strings.Contains(err.Error(), "not programmed") {
		t.Errorf("before a sync: %v", err)
	}
	sl.sync(discard())
	if err := check(); err != nil {
		t.Errorf("loaded and programmed: %v", err)
	}
}

// TestSourceUnits: standalone, the embedded demo is loaded at start and only the sync
// loop runs; with --manifests the directory's follower runs beside it and the source
// counts as loaded only once it has read the directory. Both end the run when they fail.
func TestSourceUnits(t *testing.T) {
	cfg := defaults()
	sl := testSyncLoop(t, &fakeDataplane{})
	if got := names(sourceUnits(cfg, "test", "gw-1", sl, nil, metrics.New(), discard())); got != "sync/end-run" {
		t.Errorf("embedded demo: units %q", got)
	}
	if snap, _ := sl.tracker.Snapshot(); !sl.sourceLoaded.Load() || len(snap.Sorted()) == 0 {
		t.Errorf("embedded demo: loaded %v, %d service ports", sl.sourceLoaded.Load(), len(snap.Sorted()))
	}

	cfg.Manifests = t.TempDir()
	sl = testSyncLoop(t, &fakeDataplane{})
	if got := names(sourceUnits(cfg, "test", "gw-1", sl, nil, metrics.New(), discard())); got != "manifests/end-run sync/end-run" {
		t.Errorf("--manifests: units %q", got)
	}
	if sl.sourceLoaded.Load() {
		t.Error("--manifests: loaded before the directory was read")
	}
}

// TestListenerUnits: /healthz and /metrics restart alone; an empty address turns one off.
func TestListenerUnits(t *testing.T) {
	cfg, m := defaults(), metrics.New()
	health := healthz.New(time.Minute, time.Now)
	if got := names(listenerUnits(cfg, health, m, gates(cfg, m, discard()), discard())); got != "healthz/restart metrics/restart" {
		t.Errorf("defaults: units %q", got)
	}
	cfg.HealthzBindAddress, cfg.MetricsBindAddress = "", ""
	if got := listenerUnits(cfg, health, m, gates(cfg, m, discard()), discard()); len(got) != 0 {
		t.Errorf("both off: units %q", names(got))
	}
}

// TestManagement: the dashboard's units follow the configuration: none when it is off;
// on loopback no certificate; with the cluster's pools, its addresses follow them in a unit
// that restarts alone, beside the LoadBalancer's, which end the run.
func TestManagement(t *testing.T) {
	cfg := defaults()
	cfg.StateDir = t.TempDir()
	cfg.DashboardBindAddress = ""
	m := metrics.New()
	mg, _ := newManagement(cfg, "test", "gw-1", gates(cfg, m, discard()), discard())
	if mg.dash != nil || len(mg.units(cfg, nil, nil, discard())) != 0 {
		t.Errorf("dashboard off: %+v", mg)
	}

	// node-ip without node IPs is loopback: no certificate, yet the addresses follow the
	// cluster's pools.
	cfg.DashboardBindAddress = "node-ip:8443"
	cfg.APIServer, cfg.LoadBalancer.Announce = "https://192.0.2.1:6443", true
	mg, _ = newManagement(cfg, "test", "gw-1", gates(cfg, m, discard()), discard())
	if mg.dash == nil || mg.cert != nil {
		t.Fatalf("dashboard on loopback: dashboard %v, certificate %v", mg.dash != nil, mg.cert)
	}
	if got := []string{mg.plane.Binds[0].Addr}; !slices.Equal(got, []string{"127.0.0.1:8443"}) {
		t.Errorf("binds %q", got)
	}
	lbs := &loadBalancer{watcher: alloc.NewWatcher(fake.NewClientset(), alloc.WatcherOptions{})}
	if got := names(mg.units(cfg, lbs, nil, discard())); got != "dashboard/end-run lb-pools/end-run dashboard-addresses/restart" {
		t.Errorf("units %q", got)
	}
}

// TestLoadBalancerOff: without announcing or allocating there is no LoadBalancer part,
// and closing it is safe.
func TestLoadBalancerOff(t *testing.T) {
	lbs, err := newLoadBalancer(defaults(), "gw-1", metrics.New(), discard())
	if lbs != nil || err != nil {
		t.Fatalf("got %v, %v; want none", lbs, err)
	}
	lbs.close()
}
