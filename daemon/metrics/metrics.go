// Package metrics holds the daemon's Prometheus metrics on a registry of its own. Names follow
// kube-proxy's where the meaning is the same, under the edgegate_ prefix, so dashboards and
// alerts written for kube-proxy carry over.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/edgegate/edgegate/daemon/plan"
)

const namespace = "edgegate"

// Traffic policies, as the no_local_endpoints_total "traffic_policy" label spells them.
const (
	TrafficPolicyInternal = "internal"
	TrafficPolicyExternal = "external"
)

// Metrics is the set of metrics the daemon reports. Its methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	syncDuration        prometheus.Histogram
	syncFullDuration    prometheus.Histogram
	syncPartialDuration prometheus.Histogram
	syncKernelDuration  prometheus.Histogram
	networkProgramming  prometheus.Histogram
	lastSynced          prometheus.Gauge
	lastQueued          prometheus.Gauge
	endpointChanges     prometheus.Counter
	endpointPending     prometheus.Gauge
	serviceChanges      prometheus.Counter
	servicePending      prometheus.Gauge
	syncFailures        *prometheus.CounterVec
	nftablesFailures    prometheus.Counter
	noLocalEndpoints    *prometheus.GaugeVec
	conntrackDeleted    prometheus.Counter
	manifestProblems    prometheus.Gauge
	objectsRejected     *prometheus.CounterVec
	listenerRefused     *prometheus.CounterVec
	listenerConns       *prometheus.GaugeVec
	heartbeatsRejected  *prometheus.CounterVec
	fastPathInterfaces  prometheus.Gauge
}

// syncBuckets are kube-proxy's sync latency buckets: 1ms doubling up to about 16s.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// networkProgrammingBuckets are kube-proxy's: fine below a minute, coarse up to five minutes,
// which is the range the network programming latency SLO talks about.
var networkProgrammingBuckets = concat(
	prometheus.LinearBuckets(0.25, 0.25, 2), // 0.25s, 0.5s
	prometheus.LinearBuckets(1, 1, 59),      // 1s .. 59s
	prometheus.LinearBuckets(60, 5, 12),     // 60s .. 115s
	prometheus.LinearBuckets(120, 30, 7),    // 2min .. 5min
)

func concat(parts ...[]float64) []float64 {
	var out []float64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// The constructors below fill in the namespace that every metric of the daemon shares.

func histogram(name string, buckets []float64, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets})
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help})
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

// New creates the metrics and registers them, with the Go runtime and process collectors, on a
// fresh registry.
func New() *Metrics {
	m := &Metrics{
		reg:                 prometheus.NewRegistry(),
		syncDuration:        histogram("sync_proxy_rules_duration_seconds", syncBuckets, "SyncProxyRules latency in seconds, full and partial syncs alike"),
		syncFullDuration:    histogram("sync_full_proxy_rules_duration_seconds", syncBuckets, "SyncProxyRules latency in seconds for full resyncs"),
		syncPartialDuration: histogram("sync_partial_proxy_rules_duration_seconds", syncBuckets, "SyncProxyRules latency in seconds for partial resyncs"),
		syncKernelDuration:  histogram("sync_proxy_rules_kernel_duration_seconds", syncBuckets, "The kernel's part of each sync in seconds: the transaction's commit (nftables, iptables), the IPVS calls (ipvs)"),
		networkProgramming:  histogram("network_programming_duration_seconds", networkProgrammingBuckets, "Time from a Service or endpoint change to the rules that reflect it, in seconds"),
		lastSynced:          gauge("sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were successfully synced"),
		lastQueued:          gauge("sync_proxy_rules_last_queued_timestamp_seconds", "The last time a sync of proxy rules was queued"),
		endpointChanges:     counter("sync_proxy_rules_endpoint_changes_total", "Cumulative proxy rules Endpoint changes"),
		endpointPending:     gauge("sync_proxy_rules_endpoint_changes_pending", "Pending proxy rules Endpoint changes"),
		serviceChanges:      counter("sync_proxy_rules_service_changes_total", "Cumulative proxy rules Service changes"),
		servicePending:      gauge("sync_proxy_rules_service_changes_pending", "Pending proxy rules Service changes"),
		syncFailures:        counterVec("sync_proxy_rules_failures_total", "Cumulative failed syncs of proxy rules, by proxy mode", "mode"),
		nftablesFailures:    counter("sync_proxy_rules_nftables_sync_failures_total", "Cumulative failed nftables syncs (kube-proxy's name for the nftables mode's failures)"),
		noLocalEndpoints:    gaugeVec("sync_proxy_rules_no_local_endpoints_total", "Number of services with a Local traffic policy and no endpoints on this node", "traffic_policy"),
		conntrackDeleted:    counter("conntrack_cleanup_entries_deleted_total", "Cumulative conntrack entries deleted because their endpoint or service went away"),
		manifestProblems:    gauge("manifests_problems", "Number of manifest files or objects that could not be used in the last load"),
		objectsRejected: counterVec("objects_rejected_total", "Cluster objects that failed validation, each version counted once, by kind and by what became of them "+
			"(kept-last-good, refused, source-ranges-closed, skipped)", "kind", "reason"),
		listenerRefused:    counterVec("listener_connections_refused_total", "Connections an HTTP listener closed at once because a cap was reached, by listener and cap (per_source, total)", "listener", "reason"),
		listenerConns:      gaugeVec("listener_connections", "Connections an HTTP listener holds open, by listener (websockets included)", "listener"),
		heartbeatsRejected: counterVec("lb_heartbeats_rejected_total", "LoadBalancer heartbeats refused, by reason: unsigned, bad-mac, malformed, replayed, stale", "reason"),
		fastPathInterfaces: gauge("fast_path_interfaces", "Interfaces the fast path's flowtable covers (0: off, or the kernel has no flowtables)"),
	}
	// Every known label value starts at zero so a scrape shows the series before the first event.
	for _, mode := range plan.Modes {
		m.syncFailures.WithLabelValues(string(mode))
	}
	for _, policy := range []string{TrafficPolicyInternal, TrafficPolicyExternal} {
		m.noLocalEndpoints.WithLabelValues(policy)
	}
	for _, reason := range []string{"kept-last-good", "refused", "source-ranges-closed"} {
		m.objectsRejected.WithLabelValues("Service", reason)
	}
	for _, reason := range []string{"kept-last-good", "skipped"} {
		m.objectsRejected.WithLabelValues("EndpointSlice", reason)
	}
	m.reg.MustRegister(
		m.syncDuration, m.syncFullDuration, m.syncPartialDuration, m.syncKernelDuration, m.networkProgramming,
		m.lastSynced, m.lastQueued,
		m.endpointChanges, m.endpointPending, m.serviceChanges, m.servicePending,
		m.syncFailures, m.nftablesFailures, m.noLocalEndpoints,
		m.conntrackDeleted, m.manifestProblems, m.objectsRejected, m.listenerRefused, m.listenerConns,
		m.heartbeatsRejected, m.fastPathInterfaces,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveSync records how long one sync of the proxy rules took, and the kernel's part of it.
func (m *Metrics) ObserveSync(full bool, d, kernel time.Duration) {
	m.syncDuration.Observe(d.Seconds())
	m.syncKernelDuration.Observe(kernel.Seconds())
	if full {
		m.syncFullDuration.Observe(d.Seconds())
	} else {
		m.syncPartialDuration.Observe(d.Seconds())
	}
}

// ObserveNetworkProgramming records the time from a change to the rules reflecting it.
func (m *Metrics) ObserveNetworkProgramming(d time.Duration) {
	m.networkProgramming.Observe(d.Seconds())
}

// SyncFailed counts a failed sync in the given proxy mode.
func (m *Metrics) SyncFailed(mode plan.Mode) {
	m.syncFailures.WithLabelValues(string(mode)).Inc()
	if mode == plan.ModeNFTables {
		m.nftablesFailures.Inc()
	}
}

// Queued records when a sync was last asked for.
func (m *Metrics) Queued(t time.Time) { m.lastQueued.Set(unixSeconds(t)) }

// Synced records when the rules were last synced successfully.
func (m *Metrics) Synced(t time.Time) { m.lastSynced.Set(unixSeconds(t)) }

// ServiceChanges counts Service changes seen; n <= 0 is ignored because counters only grow.
func (m *Metrics) ServiceChanges(n int) { addCount(m.serviceChanges, n) }

// EndpointChanges counts endpoint changes seen; n <= 0 is ignored because counters only grow.
func (m *Metrics) EndpointChanges(n int) { addCount(m.endpointChanges, n) }

// SetPending sets the Service and endpoint changes not yet synced.
func (m *Metrics) SetPending(services, endpoints int) {
	m.servicePending.Set(float64(services))
	m.endpointPending.Set(float64(endpoints))
}

// SetFastPathInterfaces sets how many interfaces the fast path covers.
func (m *Metrics) SetFastPathInterfaces(n int) { m.fastPathInterfaces.Set(float64(n)) }

// ConntrackDeleted counts conntrack entries deleted; n <= 0 is ignored.
func (m *Metrics) ConntrackDeleted(n int) { addCount(m.conntrackDeleted, n) }

// SetNoLocalEndpoints sets how many services with the given Local traffic policy
// (TrafficPolicyInternal or TrafficPolicyExternal) have no endpoint on this node.
func (m *Metrics) SetNoLocalEndpoints(policy string, n int) {
	m.noLocalEndpoints.WithLabelValues(policy).Set(float64(n))
}

// ObjectRejected counts one rejected version of a cluster object (see model.Admission).
func (m *Metrics) ObjectRejected(kind, reason string) {
	m.objectsRejected.WithLabelValues(kind, reason).Inc()
}

// SetManifestProblems sets the number of bad manifest files or objects in the last load.
func (m *Metrics) SetManifestProblems(n int) { m.manifestProblems.Set(float64(n)) }

// ListenerRefused counts a connection the listener refused for reason (listener.RefusedPerSource
// or listener.RefusedTotal).
func (m *Metrics) ListenerRefused(listener, reason string) {
	m.listenerRefused.WithLabelValues(listener, reason).Inc()
}

// ListenerConnections sets the connections the listener holds open.
func (m *Metrics) ListenerConnections(listener string, open int) {
	m.listenerConns.WithLabelValues(listener).Set(float64(open))
}

// HeartbeatsRejected counts n LoadBalancer heartbeats refused for reason (n = 0 makes the
// series appear at zero).
func (m *Metrics) HeartbeatsRejected(reason string, n int) {
	m.heartbeatsRejected.WithLabelValues(reason).Add(float64(max(n, 0)))
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// addCount adds n to c, skipping n <= 0 since a negative Add panics and a daemon running as
// PID 1 must not die over a miscount.
func addCount(c prometheus.Counter, n int) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// ClusterState is the state of the link to the API server and of the gateway's Node, read
// when the metrics are scraped.
type ClusterState struct {
	// Reachable: the API server answered the last request; Synced: every informer has listed.
	Reachable, Synced bool
	// FromCache: the programmed state came from the state directory, not the API server.
	FromCache bool
	// LastContact is the last answer from the API server, CacheSaved the last write of the
	// state directory, LeaseRenewed the last renewal of the Node's Lease; zero when never.
	LastContact, CacheSaved, LeaseRenewed time.Time
}

// ObserveCluster registers the cluster metrics, read from state at every scrape. Call it once,
// in cluster mode only: a standalone gateway has no such series.
func (m *Metrics) ObserveCluster(state func() ClusterState) {
	gaugeFunc := func(name, help string, value func(ClusterState) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help},
			func() float64 { return value(state()) })
	}
	m.reg.MustRegister(
		gaugeFunc("cluster_api_reachable", "1 when the API server answered the last request",
			func(s ClusterState) float64 { return boolValue(s.Reachable) }),
		gaugeFunc("cluster_synced", "1 when every informer has listed from the API server",
			func(s ClusterState) float64 { return boolValue(s.Synced) }),
		gaugeFunc("cluster_serving_from_cache", "1 while the programmed state is the cached one because the API server did not answer at start",
			func(s ClusterState) float64 { return boolValue(s.FromCache) }),
		gaugeFunc("cluster_last_contact_timestamp_seconds", "The last time the API server answered",
			func(s ClusterState) float64 { return timestamp(s.LastContact) }),
		gaugeFunc("cluster_cache_saved_timestamp_seconds", "The last time the synced cluster state was written to the state directory",
			func(s ClusterState) float64 { return timestamp(s.CacheSaved) }),
		gaugeFunc("node_lease_renewed_timestamp_seconds", "The last time the gateway's Node Lease was renewed",
			func(s ClusterState) float64 { return timestamp(s.LeaseRenewed) }),
	)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// timestamp is t in Unix seconds, 0 for the zero time (never).
func timestamp(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return unixSeconds(t)
}

// DaemonRuns is what PID 1 says of the daemon's runs in this boot, read when the metrics
// are scraped.
type DaemonRuns struct {
	// Run is this process's run, from 1; 0 before PID 1 has answered.
	Run int
	// Restarts counts the runs that ended early, by reason.
	Restarts map[string]int
}

// ObserveDaemonRuns registers the firmware's daemon metrics, read from runs at every scrape:
// the run number and the restarts by reason, each reason of reasons shown even at zero, all
// from one reading; none before PID 1 first answered (Run 0). Call it once, on the
// firmware only.
func (m *Metrics) ObserveDaemonRuns(reasons []string, runs func() DaemonRuns) {
	m.reg.MustRegister(&runsCollector{reasons: reasons, runs: runs,
		run: prometheus.NewDesc(namespace+"_daemon_run",
			"This daemon process's run in this boot, from 1: PID 1 started it again after each early end", nil, nil),
		restarts: prometheus.NewDesc(namespace+"_daemon_restarts_total",
			"Runs of the daemon that ended early in this boot (PID 1 restarted it), by reason: panic, oom, hang or exit",
			[]string{"reason"}, nil)})
}

// runsCollector turns PID 1's view of the daemon's runs into a gauge and a counter per
// reason, from one reading so that a scrape never pairs a run with older counts.
type runsCollector struct {
	reasons       []string
	runs          func() DaemonRuns
	run, restarts *prometheus.Desc
}

func (c *runsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.run
	ch <- c.restarts
}

func (c *runsCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.runs()
	if r.Run == 0 {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.run, prometheus.GaugeValue, float64(r.Run))
	for _, reason := range c.reasons {
		ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(r.Restarts[reason]), reason)
	}
}
