package labtest

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edgegate/edgegate/lab"
)

// The management plane as a client sees it: TLS pinned to the key the console prints,
// plain HTTP refused, sources outside the allow-list dropped by the kernel.

func readToken(t *testing.T, stateDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "dashboard-token"))
	if err != nil {
		t.Fatalf("the generated dashboard token: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// spkiField finds the SPKI hash in a log line: base64 ends in "=", so slog quotes it.
var spkiField = regexp.MustCompile(`spkiSHA256="?([A-Za-z0-9+/=]+)"?`)

func loggedSPKI(line string) string {
	if m := spkiField.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// pinnedKey returns the SPKI hash the daemon logs, after checking it against the
// certificate file in its state directory.
func pinnedKey(t *testing.T, d *Daemon, stateDir string) string {
	t.Helper()
	line, ok := d.LogLine("dashboard TLS certificate: pin it")
	if !ok {
		t.Fatal("the daemon logged no certificate fingerprint")
	}
	b, err := os.ReadFile(filepath.Join(stateDir, "dashboard-tls.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatal("dashboard-tls.crt holds no PEM block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	want := base64.StdEncoding.EncodeToString(sum[:])
	if loggedSPKI(line) != want {
		t.Fatalf("logged %q, want spkiSHA256=%s", line, want)
	}
	return want
}

// fetchPinned GETs url from h over TLS, trusting only the key whose SPKI hash is spki (no
// CA vouches for a gateway's own certificate), with token as a bearer when set.
func fetchPinned(h *lab.Host, url, spki, token string) (int, string, error) {
	pin := func(cs tls.ConnectionState) error {
		sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
		if got := base64.StdEncoding.EncodeToString(sum[:]); got != spki {
			return fmt.Errorf("certificate key %s, pinned %s", got, spki)
		}
		return nil
	}
	client := &http.Client{Timeout: lab.ExchangeTimeout, Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, VerifyConnection: pin}}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("get %s from %s: %w", url, h.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(body), err
}

// unpinnedBrowserRefused: a browser that does not pin the key (nor trusts it otherwise)
// does not open the page: Chromium stops at its certificate error.
func unpinnedBrowserRefused(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, browserWait)
	defer cancel()
	err := chromedp.Do(ctx, chromedp.Navigate(url))
	if err == nil {
		text, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		t.Errorf("a browser without the pin opened %s: %q", url, text)
		return
	}
	if !strings.Contains(err.Error(), "ERR_CERT") {
		t.Errorf("a browser without the pin: %v, want a certificate error", err)
	}
	t.Logf("a browser without the pin: %v", err)
}

// mgmtPlaneRefusals: plain HTTP off loopback is refused on the TLS port and served on no
// other; client-2, outside --dashboard-allowed-cidrs, gets no answer at all (the kernel
// drops it) while the same address answers it on /healthz; the table is in the kernel for
// both families.
func mgmtPlaneRefusals(t *testing.T, l *lab.Lab, token, spki string) {
	t.Helper()
	plain := fmt.Sprintf("http://%s:443/api/state?token=%s", lab.NodeIPv4, token)
	if code, body, err := l.Client.Fetch(plain); err == nil && (code == http.StatusOK || strings.Contains(body, `"firmware"`)) {
		t.Errorf("plain HTTP to the TLS port was served: %d %q", code, body)
	} else {
		t.Logf("plain HTTP to the TLS port: %d %q %v", code, strings.TrimSpace(body), err)
	}
	if code, _, err := l.Client.Fetch(fmt.Sprintf("http://%s:80/?token=%s", lab.NodeIPv4, token)); err == nil {
		t.Errorf("plain HTTP on port 80 answered %d; want nothing listening", code)
	}
	for _, addr := range []string{lab.NodeIPv4.String(), lab.NodeIPv6.String()} {
		url := "https://" + net.JoinHostPort(addr, "443") + "/api/state"
		if code, _, err := fetchPinned(l.Client, url, spki, token); err != nil || code != http.StatusOK {
			t.Errorf("client-1 -> %s: %d %v, want served", url, code, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := l.Client2.DialContext(ctx, "tcp", net.JoinHostPort(addr, "443"))
		cancel()
		if err == nil {
			c.Close()
			t.Errorf("client-2 (outside the allow-list) connected to %s:443", addr)
		} else if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("client-2 -> %s:443: %v, want no answer (dropped in the kernel)", addr, err)
		}
	}
	if code, _, err := l.Client2.Fetch(fmt.Sprintf("http://%s:10256/healthz", lab.NodeIPv4)); err != nil || code != http.StatusOK {
		t.Errorf("client-2 -> /healthz: %d %v; the refusal above must be the allow-list's", code, err)
	}
	ruleset := Exec(t, l.Gateway, "nft", "list", "table", "inet", "edgegate-mgmt")
	for _, want := range []string{"ip daddr 10.200.1.1 tcp dport 443 jump allowlist", "ip6 daddr fd00:200:1::1 tcp dport 443 jump allowlist",
		"ip saddr 10.200.1.0/24 accept", "ip6 saddr fd00:200:1::/64 accept"} {
		if !strings.Contains(ruleset, want) {
			t.Errorf("nft list table inet edgegate-mgmt lacks %q:\n%s", want, ruleset)
		}
	}
	t.Logf("the allow-list in the kernel:\n%s", ruleset)
}

// allowListOutlivesModes: the table stays when the daemon stops and when it comes back in
// another proxy mode (which removes the first mode's rules), the certificate is reused, the
// daemon refuses outsiders without the table too, and `edgegate --cleanup` removes it.
func allowListOutlivesModes(t *testing.T, l *lab.Lab, d *Daemon, args []string, spki string) {
	t.Helper()
	d.Stop(t)
	has := func() bool {
		out, _ := l.Run(l.Gateway, "nft", "list", "tables")
		return strings.Contains(out, "table inet edgegate-mgmt")
	}
	if !has() {
		t.Fatal("the allow-list went with the daemon; it must stay like the proxy's rules")
	}
	i := slices.Index(args, "--proxy-mode=nftables")
	if i < 0 {
		t.Fatalf("no --proxy-mode=nftables in %q", args)
	}
	args = slices.Clone(args)
	args[i] = "--proxy-mode=iptables"
	d = StartDaemon(t, l.Gateway, args...)
	if _, ok := d.LogLine("dashboard TLS certificate generated"); ok {
		t.Error("a second start generated a new certificate")
	}
	if line, _ := d.LogLine("dashboard TLS certificate: pin it"); loggedSPKI(line) != spki {
		t.Errorf("after the restart: %q, want the same key %s", line, spki)
	}
	if !has() {
		t.Error("the allow-list is gone after a start in iptables mode")
	}
	if code, _, err := fetchPinned(l.Client, "https://"+lab.NodeIPv4.String()+"/api/state", spki, ""); err != nil || code != http.StatusUnauthorized {
		t.Errorf("the dashboard after the restart in iptables mode: %d %v", code, err)
	}
	// Without the kernel's table the daemon still refuses client-2: it closes the
	// connection before the TLS handshake.
	Exec(t, l.Gateway, "nft", "delete", "table", "inet", "edgegate-mgmt")
	if code, _, err := fetchPinned(l.Client2, "https://"+lab.NodeIPv4.String()+"/api/state", spki, ""); err == nil {
		t.Errorf("client-2 (outside the allow-list) was answered %d once the kernel's table was gone", code)
	} else {
		t.Logf("client-2 without the kernel's table: %v", err)
	}
	d.Stop(t)
	// The table back (empty) for --cleanup to find: it removes it whatever it holds.
	Exec(t, l.Gateway, "nft", "add", "table", "inet", "edgegate-mgmt")
	out := Exec(t, l.Gateway, DaemonBinary(t), "--cleanup")
	if has() {
		t.Errorf("edgegate --cleanup (%s) left table inet edgegate-mgmt", strings.TrimSpace(out))
	}
}
