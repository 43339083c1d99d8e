package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

const (
	metricsBy    = 60 * time.Second       // the program's own sync record after the probe saw it
	metricsEvery = 50 * time.Millisecond  // polling its /metrics meanwhile
	settle       = 5 * time.Second        // from the full sync to the steady RSS
	stopGrace    = 10 * time.Second       // SIGTERM to SIGKILL
	sampleChecks = 8                      // endpoints checked besides the service count
	clockTick    = 10 * time.Millisecond  // USER_HZ is 100 on every Linux this runs on
	firstBucket  = 250 * time.Millisecond // network_programming_duration_seconds' smallest bucket
)

// run is one program in one mode at one size.
type run struct {
	Prog     program
	Mode     string
	Binary   string
	Env      runEnv
	NS       *proxyNS
	Log      string
	Want     int           // service ports the full sync must dispatch
	Limit    time.Duration // the full sync's time limit
	Services int           // the size: Services × Endpoints in the bench namespace
	Endpoint int
	Changes  []change      // the incremental phase's; none skips it
	IncrFor  time.Duration // the incremental phase's length
	Client   kubernetes.Interface
}

// result is what one run measured.
type result struct {
	Programmed   time.Duration // start to every service port dispatched (kernel probe)
	MetricSynced time.Duration // start to its sync_proxy_rules_last_timestamp_seconds
	SyncSeconds  float64       // sync_proxy_rules_duration_seconds sum over count, by then
	SyncCount    float64       // how many syncs that covers
	CPU          time.Duration // utime+stime+cutime+cstime from start to its first sync done
	SteadyRSS    int64         // VmRSS in KiB, settle after the full sync
	PeakRSS      int64         // VmHWM in KiB at the end of the run
	Dispatched   int           // service ports the probe counted
	Tables       int           // nftables tables holding them (edgegate splits a large dispatch)
	// Kernel is the kernel's part of the syncs by then, mean: edgegate's
	// sync_proxy_rules_kernel_duration_seconds (kube-proxy has no such metric: nil).
	Kernel *float64
	// Unfinished: the kernel did not dispatch every service port within the limit; only
	// Programmed (the limit), Dispatched, CPU and the RSS by then are set.
	Unfinished bool
	Incr       *incrResult // nil when skipped
}

// do starts the program, measures its full sync, lets it settle, runs the incremental phase,
// and stops it by its PID. The changes it made are restored by the caller.
func (r *run) do(ctx context.Context) (res result, made []change, err error) {
	logf, err := os.Create(r.Log)
	if err != nil {
		return res, nil, err
	}
	defer logf.Close()
	argv := append([]string{r.Binary}, r.Prog.argv(r.Mode, r.Env)...)
	fmt.Fprintf(logf, "--- in %s: %s\n", r.NS.Name, strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A harness that dies takes its proxies with it; a group of its own lets stop end the
	// children it leaves behind (kube-proxy's nft or iptables-restore).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}

	layout := r.Prog.Layout(r.Mode)
	pr, err := newProbe(r.NS.Name, layout)
	if err != nil {
		return res, nil, err
	}
	defer pr.close()
	w, err := newWaiter(pr)
	if err != nil {
		return res, nil, err
	}

	start := time.Now()
	// Forked from a thread inside the namespace: the PID is the program's own.
	if err := r.NS.Host.Start(cmd); err != nil {
		return res, nil, err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer stop(cmd, exited)
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-exited:
		}
		close(stopped)
	}()
	died := func(what string) error {
		<-exited
		return fmt.Errorf("%s exited %s: %v\n%s", r.Prog.Name, what, waitErr, tail(r.Log, 30))
	}
	pid := cmd.Process.Pid

	// Full sync: every service port dispatched, and a sample of endpoints in their service's
	// dispatch (both programs commit a sync in one transaction, but the sample keeps the
	// probe honest should one not).
	samples := sampleRefs(r.Services, r.Endpoint, sampleChecks)
	n := 0
	seen, err := w.wait(start.Add(r.Limit), stopped, func() (bool, error) {
		var err error
		if n, err = pr.services(); err != nil || n < r.Want {
			return false, err
		}
		for _, ref := range samples {
			if ok, err := pr.endpoint(ref); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	})
	switch {
	case errors.Is(err, errStopped) && ctx.Err() != nil:
		return res, nil, ctx.Err()
	case errors.Is(err, errStopped):
		return res, nil, died(fmt.Sprintf("before programming %d service ports (the kernel had %d)", r.Want, n))
	case errors.Is(err, errTimeout):
		// A measurement too: it did not finish in time. What it used by then is reported.
		res.Unfinished, res.Programmed, res.Dispatched = true, r.Limit, n
		res.CPU, _ = cpuTime(pid)
		res.PeakRSS, res.SteadyRSS, _ = rss(pid)
		return res, nil, nil
	case err != nil:
		return res, nil, err
	}
	res.Programmed = seen.Sub(start)
	res.Dispatched = n
	if ts, err := pr.tables(); err == nil {
		res.Tables = len(ts)
	}

	// Its own word: the kernel may hold the rules before the program has finished its sync
	// (it commits, then reads the kernel's replies, reaps its children, records the time), so
	// wait for its record of a sync that ended after it started.
	var m metrics
	for end := time.Now().Add(metricsBy); ; {
		m, err = r.scrape(ctx)
		if err != nil {
			return res, nil, fmt.Errorf("%s metrics: %w", r.Prog.Name, err)
		}
		// kube-proxy sets the timestamp before it observes the sync's duration (a deferred
		// call): wait for both.
		last := m.get(r.Prog.MetricsNS + "sync_proxy_rules_last_timestamp_seconds")
		if last >= float64(start.UnixNano())/1e9 && m.get(r.Prog.MetricsNS+"sync_proxy_rules_duration_seconds_count") > 0 {
			res.MetricSynced = time.Duration((last - float64(start.UnixNano())/1e9) * 1e9)
			break
		}
		if time.Now().After(end) {
			return res, nil, fmt.Errorf("%s metrics: no %ssync_proxy_rules_last_timestamp_seconds after its start %v after the kernel had the rules",
				r.Prog.Name, r.Prog.MetricsNS, metricsBy)
		}
		select {
		case <-stopped:
			return res, nil, died("before recording its first sync")
		case <-time.After(metricsEvery):
		}
	}
	res.CPU, _ = cpuTime(pid)
	res.SyncCount, res.SyncSeconds, _ = m.since(r.Prog.MetricsNS+"sync_proxy_rules_duration_seconds", nil)
	res.Kernel = m.kernelMean(r.Prog.MetricsNS, nil)

	select {
	case <-time.After(settle):
	case <-stopped:
		if ctx.Err() != nil {
			return res, nil, ctx.Err()
		}
		return res, nil, died("while settling")
	}
	if _, res.SteadyRSS, err = rss(pid); err != nil {
		return res, nil, fmt.Errorf("%s: %w", r.Prog.Name, err)
	}

	if len(r.Changes) > 0 {
		before, err := r.scrape(ctx)
		if err != nil {
			return res, nil, fmt.Errorf("%s metrics: %w", r.Prog.Name, err)
		}
		cpu0, _ := cpuTime(pid)
		ph, err := incremental(ctx, r.Client, pr, stopped, r.Changes, r.Endpoint, r.IncrFor)
		made := ph.made
		if err != nil {
			if ctx.Err() == nil && isClosed(exited) {
				err = died("during the incremental phase")
			}
			return res, made, fmt.Errorf("%s incremental: %w", r.Prog.Name, err)
		}
		// The last change's sync may still be recording its latency.
		time.Sleep(100 * time.Millisecond)
		after, err := r.scrape(ctx)
		if err != nil {
			return res, made, fmt.Errorf("%s metrics: %w", r.Prog.Name, err)
		}
		cpu1, _ := cpuTime(pid)
		h := after.histogram(r.Prog.MetricsNS + "network_programming_duration_seconds").minus(
			before.histogram(r.Prog.MetricsNS + "network_programming_duration_seconds"))
		res.Incr = &incrResult{
			Changes: len(made), Latencies: ph.latencies, Timeouts: ph.timeouts, Writes: ph.writes,
			MetricCount: h.count(), MetricP50: h.quantile(0.5), MetricP99: h.quantile(0.99),
			Kernel: after.kernelMean(r.Prog.MetricsNS, before),
			CPU:    cpu1 - cpu0,
		}
		res.Incr.Syncs, res.Incr.SyncSeconds, _ = after.since(r.Prog.MetricsNS+"sync_proxy_rules_duration_seconds", before)
		r.Changes = made
	}
	if res.PeakRSS, _, err = rss(pid); err != nil {
		return res, r.Changes, fmt.Errorf("%s: %w", r.Prog.Name, err)
	}
	t0 := time.Now()
	stop(cmd, exited)
	progress("%s %s: stopped in %v", r.Prog.Name, r.Mode, time.Since(t0).Round(time.Millisecond))
	return res, r.Changes, nil
}

// sampleRefs are n endpoints spread over the services: each one's last.
func sampleRefs(services, endpoints, n int) []endpointRef {
	var out []endpointRef
	for k := range min(n, services) {
		i := (services - 1) * k / max(1, n-1)
		out = append(out, endpointRef{
			Namespace: benchNamespace, Service: serviceName(i), Port: portName,
			Addr: mustAddr(endpointIP(i*endpoints + endpoints - 1)), TargetPort: targetPort,
		})
	}
	return out
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the program's PID, then SIGKILL after stopGrace, then SIGKILL to
// what is left of its process group (whose ID is its PID): a child still writing rules would
// keep the namespace, and a core, busy for minutes.
func stop(cmd *exec.Cmd, exited <-chan struct{}) {
	if !isClosed(exited) {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopGrace):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// scrape reads the program's /metrics, in its namespace.
func (r *run) scrape(ctx context.Context) (metrics, error) {
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: r.NS.Host.DialContext, DisableKeepAlives: true},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddress+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// metrics are the samples of one scrape by name, labels dropped except a histogram
// bucket's le: kube-proxy labels some metrics by IP family, edgegate does not. Samples of one
// key are added, except timestamps, of which the latest counts.
type metrics map[string]float64

func (m metrics) get(name string) float64 { return m[name] }

// since is what the histogram name observed after the scrape before (nil: from the start):
// how many observations, their mean (0 without any), and whether the program has it at all.
func (m metrics) since(name string, before metrics) (count, mean float64, ok bool) {
	_, ok = m[name+"_count"]
	if count = m.get(name+"_count") - before.get(name+"_count"); count > 0 {
		mean = (m.get(name+"_sum") - before.get(name+"_sum")) / count
	}
	return count, mean, ok
}

// kernelMean is the mean of the program's sync_proxy_rules_kernel_duration_seconds since
// before; nil when it has no such metric (kube-proxy) or made no sync.
func (m metrics) kernelMean(ns string, before metrics) *float64 {
	n, mean, ok := m.since(ns+"sync_proxy_rules_kernel_duration_seconds", before)
	if !ok || n <= 0 {
		return nil
	}
	return &mean
}

func parseMetrics(r io.Reader) (metrics, error) {
	m := metrics{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var name, labels, value string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, labels, value = line[:i], line[i+1:j], strings.TrimSpace(line[j+1:])
		} else {
			var ok bool
			if name, value, ok = strings.Cut(line, " "); !ok {
				continue
			}
		}
		value, _, _ = strings.Cut(value, " ") // a timestamp may follow
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		key := name
		if strings.HasSuffix(name, "_bucket") {
			le, ok := label(labels, "le")
			if !ok {
				continue
			}
			key = name + "{le=" + le + "}"
		}
		if strings.HasSuffix(name, "_timestamp_seconds") {
			m[key] = max(m[key], v)
		} else {
			m[key] += v
		}
	}
	return m, s.Err()
}

// label finds one label's value in the text between a sample's braces.
func label(labels, name string) (string, bool) {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == name {
			return strings.Trim(v, `"`), true
		}
	}
	return "", false
}

// histogram is one Prometheus histogram's cumulative buckets.
type histogram []bucket

type bucket struct {
	le    float64 // upper bound, +Inf last
	count float64 // observations <= le
}

func (m metrics) histogram(name string) histogram {
	var h histogram
	prefix := name + "_bucket{le="
	for k, v := range m {
		if s, ok := strings.CutPrefix(k, prefix); ok {
			le, err := strconv.ParseFloat(strings.TrimSuffix(s, "}"), 64)
			if err == nil {
				h = append(h, bucket{le, v})
			}
		}
	}
	slices.SortFunc(h, func(a, b bucket) int {
		switch {
		case a.le < b.le:
			return -1
		case a.le > b.le:
			return 1
		}
		return 0
	})
	return h
}

// minus is the histogram of the observations made between scrape o and scrape h.
func (h histogram) minus(o histogram) histogram {
	out := slices.Clone(h)
	for i := range out {
		for _, b := range o {
			if b.le == out[i].le {
				out[i].count -= b.count
			}
		}
	}
	return out
}

func (h histogram) count() float64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].count
}

// quantile is an estimate from a histogram.
type quantile struct {
	Value  time.Duration
	Bucket time.Duration // the upper bound of the bucket it fell in
	OK     bool          // there were observations
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does: linear
// interpolation inside the bucket the rank falls in.
func (h histogram) quantile(q float64) quantile {
	total := h.count()
	if total <= 0 {
		return quantile{}
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for _, b := range h {
		if b.count >= rank {
			upper := b.le
			if math.IsInf(upper, 1) {
				return quantile{Value: secs(lower), Bucket: secs(lower), OK: true}
			}
			v := lower
			if b.count > below {
				v += (upper - lower) * (rank - below) / (b.count - below)
			}
			return quantile{Value: secs(v), Bucket: secs(upper), OK: true}
		}
		lower, below = b.le, b.count
	}
	return quantile{}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// rss reads VmHWM (peak) and VmRSS (now) of pid, in KiB.
func rss(pid int) (peak, now int64, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmHWM":
			peak = n
		case "VmRSS":
			now = n
		}
	}
	if peak == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
	}
	return peak, now, nil
}

// cpuTime is the CPU time pid and its waited-for children have used: utime, stime, cutime
// and cstime (fields 14 to 17 of /proc/pid/stat). kube-proxy runs nft and iptables-restore
// as children; edgegate runs none.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields count from after its closing parenthesis,
	// where field 3 (state) is f[0].
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:15] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
