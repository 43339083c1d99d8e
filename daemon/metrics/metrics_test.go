package metrics

import (
	"bufio"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/plan"
)

// scrape fetches m's handler through HTTP and returns each sample's value by its series text,
// e.g. `edgegate_sync_proxy_rules_failures_total{mode="ipvs"}`.
func scrape(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d", resp.StatusCode)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: bad sample %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return samples
}

func expect(t *testing.T, samples map[string]float64, want map[string]float64) {
	t.Helper()
	for series, w := range want {
		got, ok := samples[series]
		if !ok {
			t.Errorf("%s missing from scrape", series)
			continue
		}
		if math.Abs(got-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s = %v, want %v", series, got, w)
		}
	}
}

func TestFreshScrapeHasEverySeriesAtZero(t *testing.T) {
	samples := scrape(t, New())
	want := map[string]float64{}
	for _, h := range []string{
		"sync_proxy_rules_duration_seconds", "sync_full_proxy_rules_duration_seconds",
		"sync_partial_proxy_rules_duration_seconds", "sync_proxy_rules_kernel_duration_seconds",
		"network_programming_duration_seconds",
	} {
		want["edgegate_"+h+"_count"] = 0
		want["edgegate_"+h+"_sum"] = 0
	}
	for _, s := range []string{
		"sync_proxy_rules_last_timestamp_seconds", "sync_proxy_rules_last_queued_timestamp_seconds",
		"sync_proxy_rules_endpoint_changes_total", "sync_proxy_rules_endpoint_changes_pending",
		"sync_proxy_rules_service_changes_total", "sync_proxy_rules_service_changes_pending",
		`sync_proxy_rules_failures_total{mode="nftables"}`, `sync_proxy_rules_failures_total{mode="iptables"}`,
		`sync_proxy_rules_failures_total{mode="ipvs"}`, "sync_proxy_rules_nftables_sync_failures_total",
		`sync_proxy_rules_no_local_endpoints_total{traffic_policy="internal"}`,
		`sync_proxy_rules_no_local_endpoints_total{traffic_policy="external"}`,
		"conntrack_cleanup_entries_deleted_total", "manifests_problems",
	} {
		want["edgegate_"+s] = 0
	}
	expect(t, samples, want)
	for _, s := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := samples[s]; !ok {
			t.Errorf("%s missing: Go and process collectors not registered", s)
		}
	}
	// kube-proxy's network programming buckets reach five minutes.
	if _, ok := samples[`edgegate_network_programming_duration_seconds_bucket{le="300"}`]; !ok {
		t.Error("network programming histogram has no 300s bucket")
	}
}

func TestRecordedValuesAreScraped(t *testing.T) {
	m := New()
	m.ObserveSync(true, 20*time.Millisecond, 15*time.Millisecond)
	m.ObserveSync(false, 3*time.Millisecond, 2*time.Millisecond)
	m.ObserveSync(false, 5*time.Millisecond, 4*time.Millisecond)
	m.ObserveNetworkProgramming(90 * time.Second)
	m.SyncFailed(plan.ModeNFTables)
	m.SyncFailed(plan.ModeNFTables)
	m.SyncFailed(plan.ModeIPVS)
	m.Queued(time.Unix(1714564800, 500_000_000))
	m.Synced(time.Unix(1714564801, 0))
	m.ServiceChanges(3)
	m.ServiceChanges(-1)
	m.EndpointChanges(2)
	m.EndpointChanges(4)
	m.SetPending(1, 2)
	m.ConntrackDeleted(7)
	m.ConntrackDeleted(0)
	m.SetNoLocalEndpoints(TrafficPolicyExternal, 4)
	m.SetManifestProblems(2)

	expect(t, scrape(t, m), map[string]float64{
		"edgegate_sync_proxy_rules_duration_seconds_count":                              3,
		"edgegate_sync_proxy_rules_duration_seconds_sum":                                0.028,
		"edgegate_sync_full_proxy_rules_duration_seconds_count":                         1,
		"edgegate_sync_partial_proxy_rules_duration_seconds_count":                      2,
		`edgegate_sync_partial_proxy_rules_duration_seconds_bucket{le="0.004"}`:         1,
		`edgegate_sync_partial_proxy_rules_duration_seconds_bucket{le="0.008"}`:         2,
		"edgegate_sync_proxy_rules_kernel_duration_seconds_count":                       3,
		"edgegate_sync_proxy_rules_kernel_duration_seconds_sum":                         0.021,
		`edgegate_sync_proxy_rules_kernel_duration_seconds_bucket{le="0.002"}`:          1,
		`edgegate_network_programming_duration_seconds_bucket{le="85"}`:                 0,
		`edgegate_network_programming_duration_seconds_bucket{le="90"}`:                 1,
		"edgegate_network_programming_duration_seconds_count":                           1,
		`edgegate_sync_proxy_rules_failures_total{mode="nftables"}`:                     2,
		`edgegate_sync_proxy_rules_failures_total{mode="iptables"}`:                     0,
		`edgegate_sync_proxy_rules_failures_total{mode="ipvs"}`:                         1,
		"edgegate_sync_proxy_rules_nftables_sync_failures_total":                        2,
		"edgegate_sync_proxy_rules_last_queued_timestamp_seconds":                       1714564800.5,
		"edgegate_sync_proxy_rules_last_timestamp_seconds":                              1714564801,
		"edgegate_sync_proxy_rules_service_changes_total":                               3,
		"edgegate_sync_proxy_rules_endpoint_changes_total":                              6,
		"edgegate_sync_proxy_rules_service_changes_pending":                             1,
		"edgegate_sync_proxy_rules_endpoint_changes_pending":                            2,
		"edgegate_conntrack_cleanup_entries_deleted_total":                              7,
		`edgegate_sync_proxy_rules_no_local_endpoints_total{traffic_policy="external"}`: 4,
		`edgegate_sync_proxy_rules_no_local_endpoints_total{traffic_policy="internal"}`: 0,
		"edgegate_manifests_problems":                                                   2,
	})
}

// TestRegistriesAreIndependent would panic on duplicate registration if the metrics lived on
// the global registry.
func TestRegistriesAreIndependent(t *testing.T) {
	a, b := New(), New()
	a.SetManifestProblems(5)
	expect(t, scrape(t, b), map[string]float64{"edgegate_manifests_problems": 0})
	expect(t, scrape(t, a), map[string]float64{"edgegate_manifests_problems": 5})
}

func TestClusterSeriesFollowTheState(t *testing.T) {
	m := New()
	if _, ok := scrape(t, m)["edgegate_cluster_api_reachable"]; ok {
		t.Fatal("cluster series exist before ObserveCluster: a standalone gateway must not report them")
	}
	contact := time.Unix(1700000000, 500_000_000)
	st := ClusterState{Reachable: true, Synced: true, LastContact: contact}
	m.ObserveCluster(func() ClusterState { return st })
	got := scrape(t, m)
	want := map[string]float64{
		"edgegate_cluster_api_reachable": 1, "edgegate_cluster_synced": 1, "edgegate_cluster_serving_from_cache": 0,
		"edgegate_cluster_last_contact_timestamp_seconds": 1700000000.5,
		"edgegate_cluster_cache_saved_timestamp_seconds":  0, "edgegate_node_lease_renewed_timestamp_seconds": 0,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	st = ClusterState{FromCache: true, LastContact: contact}
	got = scrape(t, m)
	if got["edgegate_cluster_api_reachable"] != 0 || got["edgegate_cluster_serving_from_cache"] != 1 {
		t.Errorf("after losing the API server: reachable=%v fromCache=%v, want 0 and 1",
			got["edgegate_cluster_api_reachable"], got["edgegate_cluster_serving_from_cache"])
	}
}

func TestListenerConnections(t *testing.T) {
	m := New()
	m.ListenerConnections("healthz", 3)
	m.ListenerRefused("healthz", "per_source")
	m.ListenerRefused("healthz", "per_source")
	m.ListenerRefused("dashboard", "total")
	expect(t, scrape(t, m), map[string]float64{
		`edgegate_listener_connections{listener="healthz"}`:                                   3,
		`edgegate_listener_connections_refused_total{listener="healthz",reason="per_source"}`: 2,
		`edgegate_listener_connections_refused_total{listener="dashboard",reason="total"}`:    1,
	})
}

// TestDaemonRuns: PID 1's counts show as counters per reason, zeros included, and only on
// the firmware.
func TestDaemonRuns(t *testing.T) {
	m := New()
	if _, ok := scrape(t, m)["edgegate_daemon_run"]; ok {
		t.Fatal("daemon run series exist before ObserveDaemonRuns")
	}
	var runs DaemonRuns
	m.ObserveDaemonRuns([]string{"panic", "oom", "hang", "exit"}, func() DaemonRuns { return runs })
	for k := range scrape(t, m) {
		if strings.HasPrefix(k, "edgegate_daemon_") {
			t.Errorf("%s before PID 1 answered", k)
		}
	}
	runs = DaemonRuns{Run: 3, Restarts: map[string]int{"panic": 1, "hang": 1}}
	expect(t, scrape(t, m), map[string]float64{
		"edgegate_daemon_run":                            3,
		`edgegate_daemon_restarts_total{reason="panic"}`: 1,
		`edgegate_daemon_restarts_total{reason="oom"}`:   0,
		`edgegate_daemon_restarts_total{reason="hang"}`:  1,
		`edgegate_daemon_restarts_total{reason="exit"}`:  0,
	})
}
