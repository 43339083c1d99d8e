package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// HealthzURL is where the daemon's /healthz answers, seen from inside the gateway.
const HealthzURL = "http://127.0.0.1:10256/healthz"

// MetricsURL is where DaemonArgs put the metrics.
const MetricsURL = "http://127.0.0.1:10249/metrics"

// healthyWithin bounds the wait for the first programmed sync after start.
const healthyWithin = 30 * time.Second

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Main runs a test binary's tests and then removes the daemon binary DaemonBinary built for
// them. Test packages that start the daemon call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// DaemonBinary returns the edgegate binary to test: $EDGEGATE_BIN when set, else ./daemon
// of this module built once per test binary.
func DaemonBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("EDGEGATE_BIN"); p != "" {
		return p
	}
	built.once.Do(func() {
		built.path, built.err = buildDaemon()
	})
	if built.err != nil {
		t.Fatalf("build edgegate: %v", built.err)
	}
	return built.path
}

func buildDaemon() (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if built.dir, err = os.MkdirTemp("", "edgegate-lab-"); err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	path := filepath.Join(built.dir, "edgegate")
	cmd := exec.Command("go", "build", "-o", path, "./daemon")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./daemon in %s: %w\n%s", root, err, out)
	}
	return path, nil
}

// Daemon is an edgegate process running in the lab's gateway namespace.
type Daemon struct {
	PID        int
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

// StartDaemon starts edgegate with args inside the gateway namespace, copies its log into
// the test log, waits until /healthz answers 200 and the first sync is done, and registers Stop with t.Cleanup.
func (l *Lab) StartDaemon(t testing.TB, args ...string) *Daemon {
	t.Helper()
	return l.Gateway.StartDaemon(t, args...)
}

// StartDaemon starts edgegate with args inside h's namespace, as Lab.StartDaemon does in
// the gateway's.
func (h *Host) StartDaemon(t testing.TB, args ...string) *Daemon {
	t.Helper()
	bin := DaemonBinary(t)
	args = args[:len(args):len(args)]
	if _, set := flagValue(args, "state-dir"); !set {
		// The daemon's default state directory is the host's /var/lib/edgegate: a test
		// daemon keeps its state in the test's.
		args = append(args, "--state-dir", t.TempDir())
	}
	if _, set := flagValue(args, "dashboard-bind-address"); !set {
		// The dashboard on the gateway's loopback, in plain HTTP, where tests read it
		// (DashboardURL); the dashboard tests choose its address themselves.
		args = append(args, "--dashboard-bind-address", "127.0.0.1:80")
	}
	if _, set := flagValue(args, "dashboard-token-file"); !set {
		// The dashboard takes the lab's token, so that tests can read it (DashboardState).
		file := filepath.Join(t.TempDir(), "dashboard-token")
		if err := os.WriteFile(file, []byte(DashboardToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--dashboard-token-file", file)
	}
	cmd := exec.Command(bin, args...)
	// If the test binary dies (a test timeout), the daemon must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatalf("start edgegate: %v", err)
	}
	cmd.Stdout = cmd.Stderr
	if err := h.Start(cmd); err != nil {
		t.Fatalf("start edgegate: %v", err)
	}
	who := "edgegate"
	if h.Name != "gateway" {
		who = "edgegate on " + h.Name
	}
	d := &Daemon{PID: cmd.Process.Pid, metricsURL: metricsURL(args), cmd: cmd, logDone: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(d.logDone)
		sc := bufio.NewScanner(logs)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			d.mu.Lock()
			d.logs = append(d.logs, sc.Text())
			d.mu.Unlock()
			t.Logf("%s: %s", who, sc.Text())
		}
	}()
	go func() {
		<-d.logDone // Wait closes the pipe, so the log must be read to its end first
		d.waitErr = cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() { d.Stop(t) })
	t.Logf("started edgegate (pid %d): %s %s", d.PID, bin, strings.Join(args, " "))
	d.waitHealthy(t, h)
	return d
}

func (d *Daemon) waitHealthy(t testing.TB, h *Host) {
	t.Helper()
	deadline := time.Now().Add(healthyWithin)
	last := "no answer yet"
	for time.Now().Before(deadline) {
		select {
		case <-d.exited:
			t.Fatalf("edgegate exited before it was healthy: %v", d.waitErr)
		default:
		}
		code, body, err := h.Fetch(HealthzURL)
		if err == nil && code == 200 && d.synced(h) {
			return
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("edgegate not healthy within %v: %s", healthyWithin, last)
}

// synced reports whether the daemon has finished a sync: /healthz answers 200 from the
// start, as kube-proxy's does, before any rule exists. It reads the last-sync timestamp from
// the metrics; a daemon started without them (--metrics-bind-address empty) counts as
// synced once healthy. Metrics that do not answer yet mean not synced yet: the metrics
// server may start after healthz, and a test must not run before the first sync (it would
// see the previous daemon's rules half removed).
func (d *Daemon) synced(h *Host) bool {
	if d.metricsURL == "" {
		return true
	}
	code, body, err := h.Fetch(d.metricsURL)
	if err != nil || code != 200 {
		return false
	}
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, "edgegate_sync_proxy_rules_last_timestamp_seconds "); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return false
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
func (h *Host) DashboardState(v any) error {
	code, body, err := h.Fetch(DashboardURL + "api/state?token=" + DashboardToken)
	if err != nil {
		return fmt.Errorf("dashboard state: %w", err)
	}
	if code != 200 {
		return fmt.Errorf("dashboard state: %d %s", code, strings.TrimSpace(body))
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		return fmt.Errorf("dashboard state: %w", err)
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
// nothing up. It returns when the process is gone.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	if d.stopped {
		return
	}
	d.stopped = true
	if err := d.cmd.Process.Kill(); err != nil {
		t.Errorf("kill edgegate (pid %d): %v", d.PID, err)
	}
	<-d.exited
}

// Stop ends the daemon: SIGTERM, then SIGKILL after 5s. A daemon that had already exited
// on its own is an error: nothing in a test asks it to. Stop is idempotent.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if d.stopped {
		return
	}
	d.stopped = true
	if gone, err := d.Exited(); gone {
		t.Errorf("edgegate (pid %d) exited on its own during the test: %v", d.PID, err)
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(5 * time.Second):
		t.Errorf("edgegate (pid %d) ignored SIGTERM for 5s; killing it", d.PID)
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	if d.waitErr != nil {
		t.Logf("edgegate (pid %d) stopped: %v", d.PID, d.waitErr)
	} else {
		t.Logf("edgegate (pid %d) stopped cleanly", d.PID)
	}
}
