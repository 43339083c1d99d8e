package labtest

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/lab"
)

// browserWait bounds every wait for the page: a broken page fails instead of hanging. It
// is a failure bound, not a measurement; the figures are logged.
const browserWait = 20 * time.Second

// browser starts headless Chromium inside h's namespace (through `ip netns exec`, which
// keeps chromedp's pipe descriptors) and returns a chromedp context for one tab.
func browser(t *testing.T, h *lab.Host, flags ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		cannotBuild(t, "the browser tier needs Debian's chromium package (apt-get install chromium): "+err.Error())
	}
	ipPath, err := exec.LookPath("ip")
	if err != nil {
		cannotBuild(t, "the browser tier needs ip(8) to start chromium in a lab namespace: "+err.Error())
	}
	var output strings.Builder
	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1000, 1400), chromedp.Flag("no-proxy-server", true),
		chromedp.CombinedOutput(&output),
		chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			// The browser must live in the lab: its traffic never leaves the namespaces.
			cmd.Args = append([]string{"ip", "netns", "exec", h.NS, cmd.Path}, cmd.Args[1:]...)
			cmd.Path = ipPath
		})}, flags...)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// The first run starts the browser, which lives as long as its context: no timeout here.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium in %s: %v\n%s", h.Name, err, output.String())
	}
	return ctx
}

// do runs browser steps bounded by browserWait.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one browser action that returns a value, bounded by browserWait.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, browserWait)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// backendConnections reads the connection counts the page shows per endpoint.
func backendConnections(t *testing.T, ctx context.Context) map[string]int {
	t.Helper()
	return value(t, ctx, "read the per-backend counts", chromedp.Evaluate[map[string]int](
		`Object.fromEntries([...document.querySelectorAll("tr.endpoint")].map(r => [r.dataset.ep, Number(r.dataset.conns)]))`))
}

// TestDashboardInBrowser starts the daemon with its dashboard on its default address, the
// node IP's port 443 in TLS, and drives the page from headless Chromium in client-1, the
// operator's side of the gateway, pinned to the certificate's key as the log prints it.
func TestDashboardInBrowser(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egw"})
	dir := ManifestDir(t.TempDir())
	web := service("web", []string{"10.96.0.10"}, nodePort(30080))
	dir.Write(t, "web", manifests(web, slice(web, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	stateDir := t.TempDir()
	args := append(lab.DaemonArgs("nftables", string(dir)), "--state-dir", stateDir,
		// The token generated at first start, as on a fresh gateway.
		"--dashboard-token-file", "", "--dashboard-bind-address", "node-ip:443",
		"--dashboard-allowed-cidrs", "10.200.1.0/24,fd00:200:1::/64",
		// A full sync restarts the rule counters (the dashboard carries the counts
		// over); none is needed here.
		"--full-sync-period", "5m")
	d := StartDaemon(t, l.Gateway, args...)
	token := readToken(t, stateDir)
	spki := pinnedKey(t, d, stateDir)
	if _, ok := d.LogLine("dashboard token generated", token); !ok {
		t.Error("the console does not show the generated token")
	}
	base := "https://" + lab.NodeIPv4.String() + "/"
	mgmtPlaneRefusals(t, l, token, spki)

	if code, body, err := fetchPinned(l.Client, base+"api/state", spki, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("GET /api/state without a token from client-1: %d %q %v, want 401", code, body, err)
	}
	unpinnedBrowserRefused(t, browser(t, l.Client), base+"?token="+token)
	ctx := browser(t, l.Client, chromedp.Flag("ignore-certificate-errors-spki-list", spki))

	do(t, ctx, "open the page with a wrong token", chromedp.Navigate(base+"?token=wrong-"+token))
	body := value(t, ctx, "read the refusal", chromedp.Text(chromedp.CSS("body")))
	if !strings.Contains(body, "wrong token") {
		t.Errorf("page with a wrong token shows %q, want it refused", body)
	}

	const svc = `div.service[data-service="matrix/web:p"]`
	do(t, ctx, "open the page with the token and see matrix/web with three endpoints",
		chromedp.Navigate(base+"?token="+token),
		chromedp.WaitVisible(chromedp.CSS(svc+`[data-endpoints="3"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#link[data-state="live"]`)))
	// The connection tracking table's fill, read by the daemon every 5 s.
	do(t, ctx, "see the conntrack table's fill in the header",
		chromedp.WaitVisible(chromedp.CSS(`#conntrack[data-pressed="false"] .badge`)))
	if txt := value(t, ctx, "read the conntrack badge", chromedp.Text(chromedp.CSS(`#conntrack .badge`))); !strings.HasPrefix(txt, "conntrack ") {
		t.Errorf("the conntrack badge reads %q", txt)
	}
	url := value(t, ctx, "read the address bar", chromedp.Location())
	if strings.Contains(url, token) {
		t.Errorf("the token stays in the address bar: %s", url)
	}
	before := backendConnections(t, ctx)
	for _, ep := range []string{"10.200.2.11:8080", "10.200.2.12:8080", "10.200.2.13:8080"} {
		if _, ok := before[ep]; !ok {
			t.Errorf("endpoint %s not shown; rows %v", ep, before)
		}
	}

	// Traffic: the per-backend numbers rise without a reload.
	const conns = 30
	byBackend, _ := tally(t, l.Client, "10.96.0.10:80", conns)
	var after map[string]int
	for i := 0; ; i++ {
		after = backendConnections(t, ctx)
		rose, sum := 0, 0
		for ep, n := range after {
			sum += n - before[ep]
			if n > before[ep] {
				rose++
			}
		}
		if sum >= conns && rose >= 2 {
			break
		}
		if i == 100 {
			t.Fatalf("after %d connections (%s) the page shows %v (before %v), want them counted per backend", conns, describe(byBackend), after, before)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("per-backend connections before %v, after %d connections (%s): %v", before, conns, describe(byBackend), after)

	// An endpoint removed: the page follows without a reload (a reload would clear the
	// marker set on window).
	value(t, ctx, "mark the page", chromedp.Evaluate[int](`window.labMarker = 42`))
	start := time.Now()
	dir.Write(t, "web", manifests(web, slice(web, discovery.AddressTypeIPv4, ready(1, 3))))
	do(t, ctx, "see backend-2 go",
		chromedp.WaitNotPresent(chromedp.CSS(`tr.endpoint[data-ep="10.200.2.12:8080"]`)),
		chromedp.WaitVisible(chromedp.CSS(svc+`[data-endpoints="2"]`)))
	t.Logf("the page showed the removed endpoint gone %v after the manifest changed (file watch, sync and push)", time.Since(start).Round(time.Millisecond))
	if marker := value(t, ctx, "read the marker", chromedp.Evaluate[int](`window.labMarker || 0`)); marker != 42 {
		t.Error("the page reloaded to show the change; it must update in place")
	}

	// The drain action: /healthz (what load balancers probe) fails while the operator
	// drains, and passes again after; traffic keeps flowing meanwhile.
	healthz := "http://" + lab.NodeIPv4.String() + ":10256/healthz"
	do(t, ctx, "drain the gateway", chromedp.Click(chromedp.CSS(`#drain[data-on="1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#drain[data-on="0"]`)))
	if code, body, err := l.Client.Fetch(healthz); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("/healthz while the operator drains: %d %q %v, want 503", code, body, err)
	}
	if state := value(t, ctx, "read the drain state", chromedp.Text(chromedp.CSS("#drain-state"))); !strings.Contains(state, "draining: operator") {
		t.Errorf("the page shows %q while draining", state)
	}
	expectOutcome(t, l.Client, "10.96.0.10:80", lab.Answered)
	shot := value(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	do(t, ctx, "serve again", chromedp.Click(chromedp.CSS(`#drain[data-on="0"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#drain[data-on="1"]`)))
	if code, body, err := l.Client.Fetch(healthz); err != nil || code != http.StatusOK {
		t.Errorf("/healthz after the drain ended: %d %q %v, want 200", code, body, err)
	}
	if line, ok := d.LogLine("operator action", "action=drain", "on=true"); !ok {
		t.Errorf("the drain action was not logged (%q)", line)
	}

	out := filepath.Join("..", "..", "out", "dashboard-browser.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(out)
	t.Logf("screenshot: %s (%d bytes)", abs, len(shot))

	for _, path := range []string{"api/nft", "api/conntrack?q=dst=10.96.0.10&q=sport=8080", "api/network?format=text", "api/logs?n=5"} {
		code, body, err := fetchPinned(l.Client, base+path+sep(path)+"token="+token, spki, "")
		if err != nil || code != http.StatusOK || body == "" {
			t.Errorf("GET %s: %d %v", path, code, err)
			continue
		}
		for p, want := range map[string]string{"api/nft": "table ip edgegate", "api/conntrack": "dport=80", "api/network": lab.NodeIPv4.String() + "/24", "api/logs": "INFO"} {
			if strings.HasPrefix(path, p) && !strings.Contains(body, want) {
				t.Errorf("GET /%s: want %q in\n%s", path, want, body)
			}
		}
	}
	// The page was opened with ?token= and every view above carried it: none of it, nor
	// the generated token's own line, reached the tail the dashboard serves.
	code, logs, err := fetchPinned(l.Client, base+"api/logs", spki, token)
	if err != nil || code != http.StatusOK || !strings.Contains(logs, "dashboard token generated") {
		t.Errorf("GET /api/logs: %d %v\n%s", code, err, logs)
	}
	if strings.Contains(logs, token) {
		t.Errorf("/api/logs serves the token:\n%s", logs)
	}
	allowListOutlivesModes(t, l, d, args, spki)
}

func sep(path string) string {
	if strings.Contains(path, "?") {
		return "&"
	}
	return "?"
}
