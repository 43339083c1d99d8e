package labtest

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/view"
	"github.com/edgegate/edgegate/lab"
)

// The flood: spoofed sources of 10.201.0.0/16 from client-2 (the gateway routes them back
// to it, so its SYN-ACKs go nowhere else), far above the legitimate client's 40
// connections a second from client-1. The flooder and its packets' processing are on one
// CPU, the client on the other.
const (
	floodSources = "10.201.0.0/16"
	floodCount   = 120000
	floodRate    = 40000
	legitConns   = 150
	legitEvery   = 25 * time.Millisecond
)

type floodFigures struct {
	flood            lab.FloodResult
	answered, probes int
	p50, p99, max    time.Duration
	conntrackGrowth  int // peak entries in the gateway's table during the flood, above before
	synReceived      uint64
}

func (f floodFigures) String() string {
	return fmt.Sprintf("%d SYNs at %.0f/s; legitimate: %d of %d answered (%.1f%%), connect+reply p50 %v p99 %v max %v; gateway conntrack +%d entries; synproxy SYNs %d",
		f.flood.Sent, f.flood.Rate(), f.answered, f.probes, 100*float64(f.answered)/float64(f.probes),
		f.p50.Round(time.Microsecond), f.p99.Round(time.Microsecond), f.max.Round(time.Microsecond), f.conntrackGrowth, f.synReceived)
}

// floodWhileProbing runs the flood against target while client-1 probes it, and measures.
func floodWhileProbing(t *testing.T, l *lab.Lab, target string) floodFigures {
	t.Helper()
	var f floodFigures
	before, err := l.Gateway.ConntrackCount()
	if err != nil {
		t.Fatal(err)
	}
	spBefore, err := l.Gateway.SynProxyStats()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var floodErr error
	done := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(done)
		f.flood, floodErr = l.Client2.SYNFlood(lab.FloodOptions{Target: netip.MustParseAddrPort(target),
			Sources: netip.MustParsePrefix(floodSources), Count: floodCount, Rate: floodRate, CPU: 1})
	}()
	peak := before
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if n, err := l.Gateway.ConntrackCount(); err == nil && n > peak {
				peak = n
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // the flood under way
	results, err := l.Client.ProbeEvery(target, legitConns, legitEvery, 0)
	wg.Wait()
	if err != nil || floodErr != nil {
		t.Fatalf("probes: %v; flood: %v", err, floodErr)
	}
	spAfter, err := l.Gateway.SynProxyStats()
	if err != nil {
		t.Fatal(err)
	}
	f.conntrackGrowth, f.synReceived = peak-before, spAfter.SynReceived-spBefore.SynReceived
	var took []time.Duration
	for _, r := range results {
		f.probes++
		if r.Outcome == lab.Answered {
			f.answered++
			took = append(took, r.Took)
		} else {
			t.Logf("%s: legitimate connection: %v", target, r)
		}
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	if n := len(took); n > 0 {
		f.p50, f.p99, f.max = took[n/2], took[min(n-1, n*99/100)], took[n-1]
	}
	return f
}

// TestSYNFlood floods a SYN-proxied LoadBalancer IP and an unprotected one of the same
// gateway with spoofed SYNs. Behind the synproxy the flood leaves the gateway's conntrack
// table alone and at least 99% of a legitimate client's connections made during it are
// answered; the unprotected address's figures are logged for comparison, and its flood
// must have reached the conntrack table (or the comparison would mean nothing).
func TestSYNFlood(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egf"})
	dir := ManifestDir(t.TempDir())
	guarded := service("guarded", []string{"10.96.0.41"}, loadBalancer(30041, "203.0.113.41"), protection("{synProxy: true}"))
	open := service("open", []string{"10.96.0.40"}, loadBalancer(30040, "203.0.113.40"))
	dir.Write(t, "guarded", manifests(guarded, slice(guarded, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	dir.Write(t, "open", manifests(open, slice(open, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	d := StartDaemon(t, l.Gateway, append(lab.DaemonArgs("nftables", string(dir)), "--full-sync-period", "1m")...)
	if err := l.Gateway.RouteVia(netip.MustParsePrefix(floodSources), l.Client2.IPv4); err != nil {
		t.Fatal(err)
	}
	for _, addr := range []string{"203.0.113.41:80", "203.0.113.40:80", lab.NodeIPv4.String() + ":30041"} {
		eventually(t, 10*time.Second, addr+" answers", func() (bool, string) {
			r := l.Client.Probe(addr)
			return r.Outcome == lab.Answered, r.String()
		})
	}

	g := floodWhileProbing(t, l, "203.0.113.41:80")
	t.Logf("SYN-proxied: %v", g)
	if g.flood.Sent != floodCount {
		t.Errorf("SYN-proxied: the flood sent %d of %d SYNs", g.flood.Sent, floodCount)
	}
	if float64(g.answered) < 0.99*float64(g.probes) {
		t.Errorf("SYN-proxied: %d of %d legitimate connections answered during the flood, want 99%%", g.answered, g.probes)
	}
	if g.conntrackGrowth > 1000 {
		t.Errorf("SYN-proxied: the gateway's conntrack table grew by %d entries during the flood", g.conntrackGrowth)
	}
	if g.synReceived < uint64(floodCount)*9/10 {
		t.Errorf("SYN-proxied: the synproxy saw %d SYNs of %d sent", g.synReceived, floodCount)
	}
	m, err := d.Metrics(l.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	if v := m["edgegate_synproxy_syns_total"]; v < float64(g.synReceived) {
		t.Errorf("edgegate_synproxy_syns_total = %v after the synproxy answered %d", v, g.synReceived)
	}
	if m["edgegate_synproxy_cookies_valid_total"] < float64(g.answered) {
		t.Errorf("edgegate_synproxy_cookies_valid_total = %v after %d answered connections", m["edgegate_synproxy_cookies_valid_total"], g.answered)
	}

	o := floodWhileProbing(t, l, "203.0.113.40:80")
	t.Logf("unprotected: %v", o)
	if o.conntrackGrowth < floodCount/2 {
		t.Errorf("unprotected: the flood added only %d entries to the gateway's conntrack table: the comparison means nothing", o.conntrackGrowth)
	}
	if m, err = d.Metrics(l.Gateway); err != nil {
		t.Fatal(err)
	}
	if v := m["edgegate_conntrack_entries"]; v < floodCount/2 || m["edgegate_conntrack_max"] < v {
		t.Errorf("after the unprotected flood: edgegate_conntrack_entries %v of edgegate_conntrack_max %v", v, m["edgegate_conntrack_max"])
	}
}

// TestSourceLimits: a source holding maxConnsPerSource connections has its next one
// refused, while another source still connects; a source opening connections faster than
// newConnsPerSecond has the excess refused. Both refusals are counted in the rules'
// counters, which nft shows.
func TestSourceLimits(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egs"})
	dir := ManifestDir(t.TempDir())
	capped := service("capped", []string{"10.96.0.42"}, loadBalancer(30042, "203.0.113.42"), protection("{maxConnsPerSource: 4}"))
	paced := service("paced", []string{"10.96.0.43"}, loadBalancer(30043, "203.0.113.43"), protection("{newConnsPerSecond: 2, newConnsBurst: 5}"))
	dir.Write(t, "capped", manifests(capped, slice(capped, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	dir.Write(t, "paced", manifests(paced, slice(paced, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	d := StartDaemon(t, l.Gateway, append(lab.DaemonArgs("nftables", string(dir)), "--full-sync-period", "1m")...)
	eventually(t, 10*time.Second, "capped answers", func() (bool, string) {
		r := l.Client2.Probe("203.0.113.42:80")
		return r.Outcome == lab.Answered, r.String()
	})

	var held []*lab.HTTPConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 4 {
		c, err := l.Client.OpenHTTP("203.0.113.42:80")
		if err != nil {
			t.Fatalf("connection %d of 4 to the capped address: %v", i+1, err)
		}
		if _, err := c.Ask(); err != nil {
			t.Fatalf("connection %d of 4 to the capped address: %v", i+1, err)
		}
		held = append(held, c)
	}
	if r := l.Client.Probe("203.0.113.42:80"); r.Outcome != lab.Refused {
		t.Errorf("a fifth connection from client-1 while it holds four: %v, want refused", r)
	}
	if r := l.Client2.Probe("203.0.113.42:80"); r.Outcome != lab.Answered {
		t.Errorf("client-2 while client-1 holds its four: %v, want answered", r)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	eventually(t, 5*time.Second, "client-1 connects again once it holds none", func() (bool, string) {
		r := l.Client.Probe("203.0.113.42:80")
		return r.Outcome == lab.Answered, r.String()
	})

	outcomes := map[lab.Outcome]int{}
	for range 20 {
		outcomes[l.Client.Probe("203.0.113.43:80").Outcome]++
	}
	// The burst of 5 and at most a couple more at 2 a second pass; the rest are refused.
	if outcomes[lab.Answered] < 5 || outcomes[lab.Answered] > 10 || outcomes[lab.Refused] != 20-outcomes[lab.Answered] {
		t.Errorf("20 quick connections to the paced address: %v, want 5 to 10 answered, the rest refused", outcomes)
	}
	out := Exec(t, l.Gateway, "nft", "list", "ruleset")
	for _, want := range []string{`comment "refused-conns-`, `comment "refused-rate-`} {
		if !strings.Contains(out, want) {
			t.Errorf("nft list ruleset lacks %s", want)
		}
	}
	if !regexp.MustCompile(`counter packets [1-9][0-9]* bytes [0-9]+ goto reject-chain comment "refused-conns-`).MatchString(out) ||
		!regexp.MustCompile(`counter packets [1-9][0-9]* bytes [0-9]+ goto reject-chain comment "refused-rate-`).MatchString(out) {
		t.Errorf("the refusals are not counted:\n%s", out)
	}
	m, err := d.Metrics(l.Gateway)
	if err != nil {
		t.Fatal(err)
	}
	conns := m[`edgegate_protection_refused_connections_total{reason="conns",service_port="matrix/capped:p"}`]
	rate := m[`edgegate_protection_refused_connections_total{reason="rate",service_port="matrix/paced:p"}`]
	if conns < 1 || rate != float64(outcomes[lab.Refused]) {
		t.Errorf("refusals in the metrics: conns %v (want 1 or more), rate %v (want %d)", conns, rate, outcomes[lab.Refused])
	}
	// The dashboard shows the same counts, and the protection itself.
	var traffic map[string]view.ServiceTraffic
	if err := l.DashboardTraffic(&traffic); err != nil {
		t.Fatal(err)
	}
	if r := traffic["matrix/paced:p"].Refused; r == nil || r.Rate != uint64(rate) {
		t.Errorf("the dashboard's traffic of matrix/paced:p shows refusals %+v, the metrics %v", r, rate)
	}
	var st struct {
		Services []dashboard.Service `json:"services"`
	}
	if err := l.DashboardState(&st); err != nil {
		t.Fatal(err)
	}
	shown := "(not listed)"
	for _, svc := range st.Services {
		if svc.Name == "matrix/capped:p" {
			shown = svc.Protection
		}
	}
	if shown != "{maxConnsPerSource: 4}" {
		t.Errorf("the dashboard shows matrix/capped:p's protection as %q", shown)
	}
}

// TestPoolProtection: a pool's protection (pools file) reaches a Service of the pool that
// has no annotation of its own: its LoadBalancer IP is SYN-proxied, and connections still
// reach its backends through the synproxy.
func TestPoolProtection(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egp"})
	dir := ManifestDir(t.TempDir())
	pooled := service("pooled", []string{"10.96.0.47"}, loadBalancer(30047, "203.0.113.47"))
	dir.Write(t, "pooled", manifests(pooled, slice(pooled, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	key := filepath.Join(t.TempDir(), "lb.key")
	for file, content := range map[string]string{
		pools: "pools:\n- name: guarded\n  addresses: [203.0.113.47/32]\n  interfaces: [c1]\n  protection: {synProxy: true}\n",
		key:   "a-lab-heartbeat-key-of-32-bytes!\n",
	} {
		if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	StartDaemon(t, l.Gateway, append(lab.DaemonArgs("nftables", string(dir)),
		"--lb-announce", "--lb-pools-file", pools, "--lb-key-file", key)...)
	eventually(t, 10*time.Second, "the pool's address is SYN-proxied", func() (bool, string) {
		out := Exec(t, l.Gateway, "nft", "list", "map", "ip", "edgegate", "syn-proxy-ips")
		return strings.Contains(out, "203.0.113.47 . tcp . 80 : goto syn-proxy-"), out
	})
	before, err := l.Gateway.SynProxyStats()
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if r := l.Client.Probe("203.0.113.47:80"); r.Outcome != lab.Answered {
			t.Errorf("through the pool's synproxy: %v", r)
		}
	}
	after, err := l.Gateway.SynProxyStats()
	if err != nil {
		t.Fatal(err)
	}
	if n := after.CookieValid - before.CookieValid; n < 5 {
		t.Errorf("5 connections, %d handshakes completed by the synproxy", n)
	}
}
