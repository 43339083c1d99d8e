package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proxy is one program under test.
type proxy struct {
	Name      string   // column title
	NetNS     string   // where it runs
	Argv      []string // binary and flags
	Table     string   // its nftables table (family ip)
	MetricsNS string   // its metrics' prefix: edgegate_ or kubeproxy_
	Log       string   // path of its output
}

// The service map both programs keep in their table: one element per ClusterIP, protocol and
// port, pointing at the service's chain. Both fill it in the same transaction as the chains,
// so its element count reaching N means the full sync is in the kernel.
const serviceMap = "service-ips"

const (
	probeEvery     = 50 * time.Millisecond
	programmedBy   = 10 * time.Minute
	settle         = 5 * time.Second
	stopGrace      = 10 * time.Second
	metricsAddress = "127.0.0.1:10249"
)

// result is what one full-sync run measured.
type result struct {
	Programmed     time.Duration // start to service-ips holding every Service (kernel probe)
	MetricSynced   time.Duration // start to sync_proxy_rules_last_timestamp_seconds (its metrics)
	SyncSeconds    float64       // sync_proxy_rules_duration_seconds sum over count
	SyncCount      float64       // how many syncs that covers
	CPU            time.Duration // user+system CPU from start to programmed
	PeakRSS        int64         // VmHWM in KiB after settle
	SteadyRSS      int64         // VmRSS in KiB after settle
	KernelElements int           // what the probe saw in the end
}

// run starts p, waits until its table's service map holds want elements, lets it settle,
// reads its metrics and memory, and stops it by its PID.
func (p proxy) run(ctx context.Context, want int) (result, error) {
	var r result
	logf, err := os.Create(p.Log)
	if err != nil {
		return r, err
	}
	defer logf.Close()
	// ip netns exec execs the binary, so the PID is the proxy's own.
	argv := append([]string{"ip", "netns", "exec", p.NetNS}, p.Argv...)
	fmt.Fprintf(logf, "--- %s\n", strings.Join(argv, " "))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A harness that dies takes its proxies with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	probe, err := newProbe(p.NetNS, p.Table)
	if err != nil {
		return r, err
	}
	defer probe.close()

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer stop(cmd, done)
	pid := cmd.Process.Pid

	deadline := time.After(programmedBy)
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		n := probe.count()
		if n >= want {
			r.Programmed = time.Since(start)
			r.KernelElements = n
			r.CPU, _ = cpuTime(pid)
			break
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case err := <-done:
			return r, fmt.Errorf("%s exited before programming %d services (it had %d): %v\n%s", p.Name, want, n, err, tail(p.Log, 30))
		case <-deadline:
			return r, fmt.Errorf("%s: %s %s holds %d of %d elements after %v\n%s", p.Name, p.Table, serviceMap, n, want, programmedBy, tail(p.Log, 30))
		case <-tick.C:
		}
	}

	m, err := scrape(p.NetNS)
	if err != nil {
		return r, fmt.Errorf("%s metrics: %w", p.Name, err)
	}
	last, ok := m[p.MetricsNS+"sync_proxy_rules_last_timestamp_seconds"]
	if !ok {
		return r, fmt.Errorf("%s metrics: no %ssync_proxy_rules_last_timestamp_seconds", p.Name, p.MetricsNS)
	}
	r.MetricSynced = time.Unix(0, int64(last*1e9)).Sub(start)
	r.SyncCount = m[p.MetricsNS+"sync_proxy_rules_duration_seconds_count"]
	if r.SyncCount > 0 {
		r.SyncSeconds = m[p.MetricsNS+"sync_proxy_rules_duration_seconds_sum"] / r.SyncCount
	}

	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return r, ctx.Err()
	}
	r.PeakRSS, r.SteadyRSS, err = rss(pid)
	if err != nil {
		return r, fmt.Errorf("%s: %w", p.Name, err)
	}
	r.KernelElements = probe.count()
	return r, nil
}

// stop sends SIGTERM to the proxy's PID, then SIGKILL after stopGrace.
func stop(cmd *exec.Cmd, done chan error) {
	select {
	case <-done:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(stopGrace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// probe reads the table's service map with nft(8) inside the proxy's namespace: the tool an
// operator would use to check either program, independent of both (edgegate programs over
// netlink itself, kube-proxy through nft).
type probe struct {
	ns, table string
}

func newProbe(ns, table string) (*probe, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, fmt.Errorf("probe %s: %w (apt-get install nftables)", ns, err)
	}
	return &probe{ns: ns, table: table}, nil
}

// count is the number of elements in the service map, 0 while there is no table or map:
// every element is "key : verdict".
func (p *probe) count() int {
	out, err := exec.Command("ip", "netns", "exec", p.ns, "nft", "list", "map", "ip", p.table, serviceMap).Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), " : ")
}

func (p *probe) close() {}

// scrape reads the unlabelled samples of the proxy's /metrics, in its namespace.
func scrape(ns string) (map[string]float64, error) {
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: dialer(ns), DisableKeepAlives: true},
	}
	resp, err := client.Get("http://" + metricsAddress + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the text exposition format by sample name without labels: kube-proxy
// labels its sync metrics by IP family, edgegate does not. Samples of one name are added,
// except timestamps, of which the latest counts.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	m := map[string]float64{}
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		var name, value string
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, value = line[:i], strings.TrimSpace(line[j+1:])
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
		if strings.HasSuffix(name, "_timestamp_seconds") {
			m[name] = max(m[name], v)
		} else {
			m[name] += v
		}
	}
	return m, s.Err()
}

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

// cpuTime is the user and system time pid has used (fields 14 and 15 of /proc/pid/stat).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields count from after its closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc/pid/stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short /proc/pid/stat")
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	// USER_HZ is 100 on every Linux this runs on.
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
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
