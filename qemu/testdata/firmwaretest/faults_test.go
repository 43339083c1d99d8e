package firmwaretest

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The fault boot's side (qemu/faults_test.go): the image is built with the tag egfault, the
// data partition turns the LoadBalancer announcer on for echo-lb on egt0-root, and the
// kernel command line sets a short hang timeout and a small memory limit for the daemon.
const (
	faultDir   = "/run/edgegate/faults" // daemon/internal/fault.Dir
	metricsURL = "http://127.0.0.1:10249/metrics"
	// The dashboard on loopback (plain HTTP there) and its token, from the data partition.
	dashboardWS    = "ws://127.0.0.1:8080/api/ws"
	dashboardToken = "/var/lib/edgegate/dashboard-token"
	manifestDir    = "/etc/edgegate/manifests"
)

var lbIP = netip.MustParseAddr("10.201.1.100")

// faultCase is one fault: where, what, and how PID 1 must count the daemon's end (none:
// the fault is PID 1's own, and the daemon must not restart).
type faultCase struct {
	point, kind, reason string
	// sync: the point runs at a sync, which the test causes by adding a manifest.
	sync bool
	// ws: the point runs in a websocket client's reader, at each message the client
	// sends; the test connects one to the dashboard and sends until the daemon ends.
	ws bool
}

var faultCases = []faultCase{
	{point: "dashboard-sampler", kind: "panic", reason: "panic"},
	{point: "dashboard-websocket", kind: "panic", reason: "panic", ws: true},
	{point: "lb-heartbeat", kind: "panic", reason: "panic"},
	{point: "lb-announce", kind: "panic", reason: "panic"},
	{point: "sync", kind: "panic", reason: "panic", sync: true},
	{point: "sync", kind: "block", reason: "hang", sync: true},
	// Memory runs out in a goroutine the liveness reports do not watch, so the cgroup's
	// limit, not the hang timeout, ends the run.
	{point: "dashboard-sampler", kind: "alloc", reason: "oom"},
	// The updater runs in PID 1; a panic in its request handling must cost one request.
	{point: "update", kind: "panic"},
}

// TestFaults makes each goroutine family of the daemon fail in turn (panic, deadlock, memory
// exhaustion) while a client sends a request every 50 ms through the ClusterIP and through
// the LoadBalancer IP, and checks that PID 1 lives (this test is its child), that PID 1
// counted the daemon's end with the right reason and started it again, and that not one
// request failed: the kernel's rules forward while the daemon restarts, and the client's
// neighbour entry for the LoadBalancer IP stays good.
func TestFaults(t *testing.T) {
	runFaults(t, faultCases, func(i int, c faultCase) {
		if c.sync {
			changeManifests(t, i)
		}
		if c.ws {
			go talkToDashboard()
		}
	})
}

// clusterFaultCases are the goroutine families that run only in a cluster. The host
// (qemu/cluster_faults_test.go) makes each run once the guest prints that it is armed.
var clusterFaultCases = []faultCase{
	{point: "cluster-informer", kind: "panic", reason: "panic"},
	{point: "lb-leases", kind: "panic", reason: "panic"},
	{point: "lb-alloc", kind: "panic", reason: "panic"},
}

// TestClusterFaults is TestFaults for the daemon joined to a cluster: its informer handlers,
// the LoadBalancer's Lease informer and the allocator's worker panic in turn.
func TestClusterFaults(t *testing.T) {
	runFaults(t, clusterFaultCases, func(_ int, c faultCase) { fmt.Printf("EGFAULT-ARMED %s\n", c.point) })
}

// runFaults arms each case in turn (then calls armed, which makes the point run) while the
// client's requests flow, and checks what TestFaults says.
func runFaults(t *testing.T, cases []faultCase, armed func(i int, c faultCase)) {
	setUpHosts(t)
	lbAddr := netip.AddrPortFrom(lbIP, servicePort)
	waitUntil(t, "the LoadBalancer IP answering the client", time.Minute, func() bool {
		_, err := client.get(lbAddr)
		return err == nil
	})

	loops := []*requestLoop{
		{name: "ClusterIP", addr: netip.AddrPortFrom(clusterIP, servicePort)},
		{name: "LoadBalancer IP", addr: lbAddr},
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(func() { l.run(ctx) })
	}
	defer func() {
		stop()
		wg.Wait()
		for _, l := range loops {
			t.Logf("%s: %d requests, %d failed", l.name, l.ok+len(l.failed), len(l.failed))
			for _, f := range l.failed {
				t.Errorf("%s: a request failed at %s: %v", l.name, f.at.Format("15:04:05.000"), f.err)
			}
		}
	}()

	for i, c := range cases {
		before := daemonMetrics(t)
		start := time.Now()
		arm(t, c)
		armed(i, c)
		if c.reason == "" {
			waitUntil(t, "PID 1 to take the fault", 30*time.Second, func() bool {
				_, err := os.Stat(filepath.Join(faultDir, c.point))
				return os.IsNotExist(err)
			})
			// A few reports later the daemon must still be the same run.
			time.Sleep(3 * time.Second)
			if after := daemonMetrics(t); after["run"] != before["run"] {
				t.Errorf("%s %s in PID 1: the daemon's run went from %v to %v", c.kind, c.point, before["run"], after["run"])
			}
			t.Logf("%s %s: PID 1 and the daemon went on", c.kind, c.point)
			continue
		}
		var after map[string]float64
		waitUntil(t, fmt.Sprintf("the daemon's restart after %s at %s", c.kind, c.point), 2*time.Minute, func() bool {
			m, err := readDaemonMetrics()
			if err != nil || m["run"] <= before["run"] {
				return false
			}
			after = m
			return true
		})
		if got, want := after[c.reason], before[c.reason]+1; got != want {
			t.Errorf("%s %s: restarts{reason=%q} = %v, want %v (before: %v, after: %v)", c.kind, c.point, c.reason, got, want, before, after)
		}
		t.Logf("%s %s: run %v → %v, counted as %s, after %v", c.kind, c.point, before["run"], after["run"], c.reason,
			time.Since(start).Round(time.Millisecond))
	}
	// The last run serves the LoadBalancer IP again.
	if _, err := client.get(lbAddr); err != nil {
		t.Errorf("after the faults: %v", err)
	}
}

// arm arms c's fault: written under a dot name, then renamed into place, so the hook never
// reads half a file.
func arm(t *testing.T, c faultCase) {
	t.Helper()
	if err := os.MkdirAll(faultDir, 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(faultDir, "."+c.point)
	if err := os.WriteFile(tmp, []byte(c.kind+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(faultDir, c.point)); err != nil {
		t.Fatal(err)
	}
}

// talkToDashboard connects a websocket client to the dashboard, as its page does, and sends
// a message every 200 ms until the connection breaks (the daemon's run ended) or for two
// minutes at most. It may outlive the test, so it prints rather than logs, and fails
// nothing: the restart the test waits for says whether the point ran.
func talkToDashboard() {
	token, err := os.ReadFile(dashboardToken)
	if err != nil {
		fmt.Printf("websocket client: %v\n", err)
		return
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial(dashboardWS, http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(token))}})
	if err != nil {
		fmt.Printf("websocket client: %v\n", err)
		return
	}
	defer conn.Close()
	go func() { // the dashboard's pushes, read and dropped
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := conn.WriteMessage(websocket.TextMessage, []byte("poke")); err != nil {
			fmt.Printf("websocket client: the connection ended: %v\n", err)
			return
		}
	}
}

// changeManifests adds a Service to the baked manifests (inotify tells the daemon), so the
// daemon syncs.
func changeManifests(t *testing.T, n int) {
	t.Helper()
	svc := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: trigger-%d
  namespace: firmware-test
spec:
  type: ClusterIP
  clusterIP: 10.96.8.%d
  clusterIPs: [10.96.8.%d]
  ports:
  - {name: tcp, port: 80, protocol: TCP}
`, n, n+1, n+1)
	if err := os.WriteFile(filepath.Join(manifestDir, fmt.Sprintf("trigger-%d.yaml", n)), []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// daemonMetrics reads the daemon's run and its restarts by reason from its metrics, waiting
// (bounded) for a daemon that answers.
func daemonMetrics(t *testing.T) map[string]float64 {
	t.Helper()
	var m map[string]float64
	waitUntil(t, "the daemon's metrics", time.Minute, func() bool {
		var err error
		m, err = readDaemonMetrics()
		return err == nil && m["run"] > 0
	})
	return m
}

func readDaemonMetrics() (map[string]float64, error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch {
		case name == "edgegate_daemon_run":
			m["run"] = v
		case strings.HasPrefix(name, `edgegate_daemon_restarts_total{reason="`):
			m[strings.TrimSuffix(strings.TrimPrefix(name, `edgegate_daemon_restarts_total{reason="`), `"}`)] = v
		}
	}
	return m, sc.Err()
}

// requestLoop sends a request every 50 ms from the client until ctx ends.
type requestLoop struct {
	name   string
	addr   netip.AddrPort
	ok     int
	failed []failure
}

type failure struct {
	at  time.Time
	err error
}

func (l *requestLoop) run(ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := client.get(l.addr); err != nil {
			l.failed = append(l.failed, failure{time.Now(), err})
		} else {
			l.ok++
		}
	}
}

// waitUntil polls cond every 100 ms for up to within.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
