package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/plan"
)

// serveTLSPlane serves a test dashboard as the daemon does on a non-loopback bind: every
// address (0.0.0.0), so TLS, reached here through 127.0.0.1. It returns the port, the
// certificate and a client that trusts it.
func serveTLSPlane(t *testing.T, d *Dashboard) (port int, cert Cert, client *http.Client) {
	t.Helper()
	cert, err := LoadCert(CertRequest{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	// As Start opens it: the gate between the allow-list and TLS.
	ln, err := Listen(Bind{Addr: "0.0.0.0:0"}, TLSConfig(cert), nil, d.opts.Gate, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.serve(ctx, ln) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	pool := x509.NewCertPool()
	leaf, err := x509.ParseCertificate(cert.Certificate.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pool.AddCert(leaf)
	client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}}
	t.Cleanup(client.CloseIdleConnections)
	return ln.Addr().(*net.TCPAddr).Port, cert, client
}

// TestPlainHTTPRefusedOffLoopback: a bind that is not loopback speaks TLS only; plain HTTP
// to it gets no answer of the API's (Go's TLS server answers a bare 400, or drops it).
func TestPlainHTTPRefusedOffLoopback(t *testing.T) {
	d, _ := newTestDashboard(t, plan.ModeNFTables)
	port, _, client := serveTLSPlane(t, d)
	url := fmt.Sprintf("127.0.0.1:%d/api/state", port)

	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /api/state HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	answer, _ := io.ReadAll(bufio.NewReader(c))
	if bytes.Contains(answer, []byte(`"firmware"`)) || bytes.Contains(answer, []byte("200 OK")) {
		t.Errorf("plain HTTP to a TLS bind was served:\n%s", answer)
	}
	t.Logf("plain HTTP to the TLS bind got %q", firstLine(string(answer)))

	resp, body := getBearer(t, client, "https://"+url, testToken)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"firmware"`) {
		t.Errorf("HTTPS GET /api/state: %d %q", resp.StatusCode, body)
	}
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Errorf("connection state %+v, want TLS 1.2 or later", resp.TLS)
	}
	// A client that offers TLS 1.1 at most is refused.
	old := &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}
	if conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), old); err == nil {
		conn.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
}

// getBearer GETs url with the token in an Authorization header.
func getBearer(t *testing.T, client *http.Client, url, token string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return strings.TrimSpace(l) }

// TestPlainHTTPNeedsLoopback: without a certificate only a loopback bind opens.
func TestPlainHTTPNeedsLoopback(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if ln, err := Listen(Bind{Addr: "0.0.0.0:0"}, nil, nil, nil, log); err == nil {
		ln.Close()
		t.Error("a plain HTTP listener opened on every interface")
	}
	ln, err := Listen(Bind{Addr: "127.0.0.1:0"}, nil, nil, nil, log)
	if err != nil {
		t.Fatalf("plain HTTP on loopback: %v", err)
	}
	ln.Close()
}

func TestSecureCookie(t *testing.T) {
	d, _ := newTestDashboard(t, plan.ModeNFTables)
	port, _, client := serveTLSPlane(t, d)
	resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/api/state?token=%s", port, testToken))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].Secure || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie over TLS: %v (%q), want Secure, HttpOnly, SameSite=Strict", cookies, resp.Header.Values("Set-Cookie"))
	}
}

// TestTokenNeverInLogTail: a generated token goes to the console only; neither its
// generation nor requests carrying it put it in the tail /api/logs serves.
func TestTokenNeverInLogTail(t *testing.T) {
	var console bytes.Buffer
	log := slog.New(slog.NewTextHandler(&console, nil))
	d, log := ForDaemon(Options{Version: "test", Mode: plan.ModeNFTables}, []Bind{{Addr: "10.200.1.1:443"}}, "", t.TempDir(), log)
	if d == nil {
		t.Fatal("no dashboard")
	}
	token := d.opts.Token
	if !strings.Contains(console.String(), "https://10.200.1.1:443/?token="+token) {
		t.Errorf("the console lacks the generated token's URL:\n%s", console.String())
	}
	port, _, client := serveTLSPlane(t, d)
	for _, path := range []string{"/?token=" + token, "/api/state?token=" + token, "/api/logs?token=" + token, "/api/state?token=wrong-" + token} {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	log.Info("a line after the requests")
	_, tail := getBearer(t, client, fmt.Sprintf("https://127.0.0.1:%d/api/logs", port), token)
	if !strings.Contains(tail, "dashboard token generated") || !strings.Contains(tail, "a line after the requests") {
		t.Errorf("/api/logs lacks the daemon's lines:\n%s", tail)
	}
	if strings.Contains(tail, token) {
		t.Errorf("/api/logs serves the token:\n%s", tail)
	}
	if strings.Contains(string(d.hub.Snapshot()), token) {
		t.Error("the websocket state carries the token")
	}
}

func TestResolveBinds(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.200.1.1"), netip.MustParseAddr("fd00:200:1::1")
	pools := func(a netip.Addr) string {
		if a == v4 {
			return "on eth0, which carries LoadBalancer pools"
		}
		return ""
	}
	none := func(netip.Addr) string { return "" }
	for _, tc := range []struct {
		spec  string
		ips   []netip.Addr
		skip  func(netip.Addr) string
		want  string
		notes int
	}{
		{"node-ip:443", []netip.Addr{v4, v6}, none, "10.200.1.1:443 [fd00:200:1::1]:443", 0},
		{"node-ip:443", []netip.Addr{v4, v6}, pools, "[fd00:200:1::1]:443", 1},
		{"node-ip:443", []netip.Addr{v4}, pools, "127.0.0.1:443", 2},
		{"node-ip:8443", nil, none, "127.0.0.1:8443", 1},
		{"0.0.0.0:443", []netip.Addr{v4}, pools, "0.0.0.0:443", 0},
		{"", []netip.Addr{v4}, none, "", 0},
	} {
		binds, notes, err := ResolveBinds(tc.spec, tc.ips, tc.skip)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, b := range binds {
			got = append(got, b.Addr)
		}
		if strings.Join(got, " ") != tc.want || len(notes) != tc.notes {
			t.Errorf("ResolveBinds(%q, %v) = %v %q, want %s and %d notes", tc.spec, tc.ips, got, notes, tc.want, tc.notes)
		}
	}
}

func TestAllowList(t *testing.T) {
	allowed, err := ParseCIDRs("--dashboard-allowed-cidrs", []string{"::ffff:10.200.1.0/120", "fd00:200:1::/64"})
	if err != nil {
		t.Fatal(err)
	}
	local := netip.MustParseAddr("10.200.1.1")
	for src, want := range map[string]bool{
		"10.200.1.2": true, "::ffff:10.200.1.2": true, "fd00:200:1::2": true, "127.0.0.1": true, "::1": true, "10.200.1.1": true,
		"10.200.2.2": false, "203.0.113.5": false, "fd00:200:2::2": false,
	} {
		if got := SourceAllowed(netip.MustParseAddr(src), local, allowed); got != want {
			t.Errorf("source %s allowed: %v, want %v", src, got, want)
		}
	}
	if _, err := ParseCIDRs("--dashboard-allowed-cidrs", []string{"10.0.0.0/8", " 10.1.0.0/16", "010.2.0.0/16"}); err == nil ||
		!strings.Contains(err.Error(), `" 10.1.0.0/16"`) || !strings.Contains(err.Error(), "010.2.0.0/16") {
		t.Errorf("unparseable entries: %v, want each named", err)
	}
	ports, err := BindPorts([]Bind{{Addr: "127.0.0.1:80"}, {Addr: "10.200.1.1:443"}, {Addr: ":8443"}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ports) != "[10.200.1.1:443 0.0.0.0:8443 [::]:8443]" {
		t.Errorf("kernel allow-list ports %v", ports)
	}
}

// TestRebind: Rebind opens the addresses a started dashboard lacks and closes those it no
// longer names; an address it keeps stays open throughout, its connections too.
func TestRebind(t *testing.T) {
	d, _ := newTestDashboard(t, plan.ModeNFTables)
	// One port, held on 127.0.0.1 so that no wildcard listener can take it meanwhile, on
	// three loopback addresses nobody else uses.
	hold, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	port := hold.Addr().(*net.TCPAddr).Port
	a, b, c := fmt.Sprintf("127.0.0.21:%d", port), fmt.Sprintf("127.0.0.22:%d", port), fmt.Sprintf("127.0.0.23:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { d.Start(ctx, Plane{Binds: []Bind{{Addr: a}, {Addr: b}}}) })
	defer wg.Wait()
	defer cancel()

	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	answers := func(addr string) bool {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/state", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	// A connection of its own to b, which must live through the move.
	kept, err := net.DialTimeout("tcp", b, 5*time.Second)
	for i := 0; err != nil && i < 100; i++ { // Start opens its listeners on goroutines
		time.Sleep(50 * time.Millisecond)
		kept, err = net.DialTimeout("tcp", b, 5*time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	ask := func() string {
		_ = kept.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(kept, "GET /api/state HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
		resp, err := http.ReadResponse(bufio.NewReader(kept), nil)
		if err != nil {
			return err.Error()
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Status
	}
	if got := ask(); got != "200 OK" {
		t.Fatalf("GET on a connection to %s: %s", b, got)
	}
	waitFor(t, a+" answers", func() bool { return answers(a) })
	if answers(c) {
		t.Fatalf("%s answers before it is bound", c)
	}

	d.Rebind(Plane{Binds: []Bind{{Addr: b}, {Addr: c}}})
	waitFor(t, c+" answers and "+a+" no longer", func() bool { return answers(c) && !answers(a) })
	if !answers(b) {
		t.Errorf("%s, kept, no longer answers", b)
	}
	if got := ask(); got != "200 OK" {
		t.Errorf("GET on the connection to %s, opened before the move: %s", b, got)
	}
}

// waitFor polls cond for at most 10 s (a bound against hangs, not a timing claim).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}
