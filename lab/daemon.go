package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// HealthzURL is where the daemon's /healthz answers, seen from inside the gateway.
const HealthzURL = "http://127.0.0.1:10256/healthz"

// MetricsURL is where DaemonArgs put the metrics.
const MetricsURL = "http://127.0.0.1:10249/metrics"

// healthyWithin bounds the wait for the first programmed sync after start.
const healthyWithin = 30 * time.Second

// Daemon is an edgegate process running in a lab host's namespace (StartDaemon).
type Daemon struct {
	PID        int
	Args       []string // as started, with StartDaemon's defaults
	metricsURL string
	cmd        *exec.Cmd
	logDone    chan struct{}
	exited     chan struct{}
	waitErr    error
	stopped    bool

	mu   sync.Mutex
	logs []string
}

// LogLine returns the first log line that contains every one of the given texts.
func (d *Daemon) LogLine(texts ...string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.logs {
		all := true
		for _, s := range texts {
			all = all && strings.Contains(l, s)
		}
		if all {
			return l, true
		}
	}
	return "", false
}

// DaemonOptions say where a daemon StartDaemon starts keeps its files and where its log goes.
type DaemonOptions struct {
	// Dir holds the daemon's state directory (--state-dir) and its dashboard token file,
	// unless args name their own; it must exist.
	Dir string
	// Log, when set, receives each line the daemon writes.
	Log func(line string)
}

// StartDaemon starts the edgegate binary bin with args inside h's namespace and returns once
// /healthz answers 200 and the first sync is done; on error nothing is left running. Args
// that do not say otherwise get a state directory in opts.Dir, the dashboard in plain HTTP
// on the loopback (DashboardURL) and DashboardToken. If this process dies, the daemon is
// killed with it.
func (h *Host) StartDaemon(bin string, args []string, opts DaemonOptions) (*Daemon, error) {
	args = args[:len(args):len(args)]
	if _, set := flagValue(args, "state-dir"); !set {
		// The daemon's default state directory is the host's /var/lib/edgegate.
		dir := filepath.Join(opts.Dir, "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, fmt.Errorf("start edgegate: %w", err)
		}
		args = append(args, "--state-dir", dir)
	}
	if _, set := flagValue(args, "dashboard-bind-address"); !set {
		// The dashboard on the gateway's loopback, in plain HTTP, where tests read it
		// (DashboardURL); the dashboard tests choose its address themselves.
		args = append(args, "--dashboard-bind-address", "127.0.0.1:80")
	}
	if _, set := flagValue(args, "dashboard-token-file"); !set {
		// The dashboard takes the lab's token, so that it can be read (DashboardState).
		file := filepath.Join(opts.Dir, "dashboard-token")
		if err := os.WriteFile(file, []byte(DashboardToken+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("start edgegate: %w", err)
		}
		args = append(args, "--dashboard-token-file", file)
	}
	cmd := exec.Command(bin, args...)
	// If this process dies (a test timeout), the daemon must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("start edgegate: %w", err)
	}
	cmd.Stdout = cmd.Stderr
	if err := h.Start(cmd); err != nil {
		return nil, fmt.Errorf("start edgegate: %w", err)
	}
	d := &Daemon{PID: cmd.Process.Pid, Args: args, metricsURL: metricsURL(args), cmd: cmd, logDone: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(d.logDone)
		sc := bufio.NewScanner(logs)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			d.mu.Lock()
			d.logs = append(d.logs, sc.Text())
			d.mu.Unlock()
			if opts.Log != nil {
				opts.Log(sc.Text())
			}
		}
	}()
	go func() {
		<-d.logDone // Wait closes the pipe, so the log must be read to its end first
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitHealthy(h); err != nil {
		_ = d.Stop()
		return nil, err
	}
	return d, nil
}

func (d *Daemon) waitHealthy(h *Host) error {
	deadline := time.Now().Add(healthyWithin)
	last := "no answer yet"
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			return fmt.Errorf("edgegate (pid %d) exited before it was healthy: %v", d.PID, d.waitErr)
		default:
		}
		code, body, err := h.Fetch(HealthzURL)
		if err == nil && code == 200 && d.synced(h) {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("edgegate (pid %d) not healthy within %v: %s", d.PID, healthyWithin, last)
}

// synced reports whether the daemon has finished a sync since its source last queued one:
// /healthz answers 200 from the start, as kube-proxy's does, before any rule exists. It
// reads the last-sync and last-queued timestamps from the metrics; a daemon started
// without them (--metrics-bind-address empty) counts as synced once healthy. Metrics that
// do not answer yet mean not synced yet: the metrics server may start after healthz, and a
// test must not run before the first sync (it would see the previous daemon's rules half
// removed), nor after a first sync that ran before the manifests were loaded (a slow guest's
// rules then came 8 s after the test began).
func (d *Daemon) synced(h *Host) bool {
	if d.metricsURL == "" {
		return true
	}
	code, body, err := h.Fetch(d.metricsURL)
	if err != nil || code != 200 {
		return false
	}
	m := parseMetrics(body)
	synced, queued := m["edgegate_sync_proxy_rules_last_timestamp_seconds"], m["edgegate_sync_proxy_rules_last_queued_timestamp_seconds"]
	return synced > 0 && synced >= queued
}

// Metrics scrapes the daemon's metrics from h: each sample by its series, labels as the
// exposition writes them (`name{a="x",b="y"}`).
func (d *Daemon) Metrics(h *Host) (map[string]float64, error) {
	if d.metricsURL == "" {
		return nil, fmt.Errorf("edgegate (pid %d) serves no metrics", d.PID)
	}
	code, body, err := h.Fetch(d.metricsURL)
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("%s: status %d", d.metricsURL, code)
	}
	return parseMetrics(body), nil
}

func parseMetrics(body string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); i > 0 && err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// DaemonArgs are the flags the traffic matrix (package labtest) starts edgegate with in the
// lab's gateway: the node's name and addresses, and manifests from manifestDir.
func DaemonArgs(mode, manifestDir string) []string {
	return []string{
		"--proxy-mode=" + mode,
		"--manifests", manifestDir,
		"--hostname-override", GatewayNodeName,
		"--node-ip", NodeIPv4.String() + "," + NodeIPv6.String(),
		"--zone", "lab-a",
		"--healthz-bind-address", "0.0.0.0:10256",
		"--metrics-bind-address", "127.0.0.1:10249",
		"--min-sync-period", "100ms",
		"--sync-period", "30s",
		"--full-sync-period", "2s",
	}
}

// metricsURL is where a daemon started with args serves its metrics, seen from inside the
// gateway ("" when it serves none): the last --metrics-bind-address, else the daemon's
// default, MetricsURL.
func metricsURL(args []string) string {
	addr, set := flagValue(args, "metrics-bind-address")
	if !set {
		return MetricsURL
	}
	if addr == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return MetricsURL
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics"
}

// flagValue returns the value of the last --name flag in args (as --name=value or
// --name value), and whether there is one.
func flagValue(args []string, name string) (string, bool) {
	value, set := "", false
	for i, a := range args {
		n, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || n != name {
			continue
		}
		switch {
		case hasValue:
			value, set = v, true
		case i+1 < len(args):
			value, set = args[i+1], true
		}
	}
	return value, set
}

// DashboardToken is the dashboard access token of every daemon StartDaemon starts without
// a --dashboard-token-file of its own.
const DashboardToken = "lab-dashboard-token-0123456789"

// DashboardURL is the dashboard of a daemon StartDaemon started without a
// --dashboard-bind-address, seen from inside the gateway.
const DashboardURL = "http://127.0.0.1:80/"

// DashboardState reads the state the daemon's dashboard pushes to its pages (GET
// /api/state, on DashboardURL with DashboardToken) into v.
func (l *Lab) DashboardState(v any) error { return l.Gateway.DashboardState(v) }

// DashboardState reads the state the dashboard of the daemon in h's namespace pushes.
func (h *Host) DashboardState(v any) error { return h.dashboardJSON("api/state", v) }

// DashboardTraffic is the lab gateway's Host.DashboardTraffic.
func (l *Lab) DashboardTraffic(v any) error { return l.Gateway.DashboardTraffic(v) }

// DashboardTraffic reads the traffic counters the dashboard of the daemon in h's namespace
// reads from the kernel at the request (GET /api/traffic), not its sampled state.
func (h *Host) DashboardTraffic(v any) error { return h.dashboardJSON("api/traffic", v) }

func (h *Host) dashboardJSON(path string, v any) error {
	code, body, err := h.Fetch(DashboardURL + path + "?token=" + DashboardToken)
	if err != nil {
		return fmt.Errorf("dashboard %s: %w", path, err)
	}
	if code != 200 {
		return fmt.Errorf("dashboard %s: %d %s", path, code, strings.TrimSpace(body))
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		return fmt.Errorf("dashboard %s: %w", path, err)
	}
	return nil
}

// Exited reports whether the daemon has exited, and how.
func (d *Daemon) Exited() (bool, error) {
	select {
	case <-d.exited:
		return true, d.waitErr
	default:
		return false, nil
	}
}

// Kill ends the daemon at once with SIGKILL, as a crash or a power cut would: it cleans
// nothing up. It returns when the process is gone. Kill and Stop act once.
func (d *Daemon) Kill() error {
	if d.stopped {
		return nil
	}
	d.stopped = true
	err := d.cmd.Process.Kill()
	<-d.exited
	if err != nil {
		return fmt.Errorf("kill edgegate (pid %d): %w", d.PID, err)
	}
	return nil
}

// Stop ends the daemon: SIGTERM, then SIGKILL after 5s. A daemon that had already exited
// on its own is an error: nothing asks it to. Kill and Stop act once; Exited says how the
// daemon ended.
func (d *Daemon) Stop() error {
	if d.stopped {
		return nil
	}
	d.stopped = true
	if gone, err := d.Exited(); gone {
		return fmt.Errorf("edgegate (pid %d) exited on its own: %v", d.PID, err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
		return nil
	case <-time.After(5 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("edgegate (pid %d) ignored SIGTERM for 5s; killed it", d.PID)
	}
}
