package labtest

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/lab"
)

// conntrackMax is the file of the kernel's global connection tracking limit: writable only
// from the initial network namespace, and shared by every namespace of the kernel.
const conntrackMax = "/proc/sys/net/netfilter/nf_conntrack_max"

// RunConntrackFull fills the lab gateway's connection tracking table: nf_conntrack_max is
// set to max (and restored at the end), then spoofed SYNs from client-2 to a LoadBalancer
// IP without protection fill the table. Connections client-1 established before keep
// working while it is full (the kernel evicts only entries of unanswered handshakes), and
// the gateway says so: the metrics show the table at its maximum and count the evictions
// and drops, the log says it is full, and the dashboard marks it. It changes a global
// kernel setting, so it runs only where the test owns the kernel: in a QEMU guest
// (qemu/testdata/ipvstest), never on a development host.
func RunConntrackFull(t *testing.T, max int) {
	l := New(t, lab.Options{Prefix: "egc"})
	dir := ManifestDir(t.TempDir())
	held := service("held", []string{"10.96.0.44"}, loadBalancer(30044, "203.0.113.44"))
	flooded := service("flooded", []string{"10.96.0.45"}, loadBalancer(30045, "203.0.113.45"))
	dir.Write(t, "held", manifests(held, slice(held, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	dir.Write(t, "flooded", manifests(flooded, slice(flooded, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	d := StartDaemon(t, l.Gateway, append(lab.DaemonArgs("nftables", string(dir)), "--full-sync-period", "1m")...)
	if err := l.Gateway.RouteVia(netip.MustParsePrefix("10.201.0.0/16"), l.Client2.IPv4); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "held answers", func() (bool, string) {
		r := l.Client.Probe("203.0.113.44:80")
		return r.Outcome == lab.Answered, r.String()
	})
	var conns []*lab.HTTPConn
	for range 10 {
		c := openHTTP(t, l.Client, "203.0.113.44:80")
		if _, err := c.Ask(); err != nil {
			t.Fatalf("a connection to hold: %v", err)
		}
		conns = append(conns, c)
	}

	old, err := os.ReadFile(conntrackMax)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(conntrackMax, old, 0o644); err != nil {
			t.Errorf("restore %s: %v", conntrackMax, err)
		}
	})
	if err := os.WriteFile(conntrackMax, []byte(strconv.Itoa(max)), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := l.Client2.SYNFlood(lab.FloodOptions{Target: netip.MustParseAddrPort("203.0.113.45:80"),
		Sources: netip.MustParsePrefix("10.201.0.0/16"), Count: 3 * max, Rate: 20000, CPU: -1, MaxTime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	n, err := l.Gateway.ConntrackCount()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d spoofed SYNs at %.0f/s: the gateway's table holds %d entries of %d", res.Sent, res.Rate(), n, max)
	if n < max*95/100 {
		t.Fatalf("the flood left the table at %d entries of %d: not full", n, max)
	}
	for i, c := range conns {
		if r, err := c.Ask(); err != nil {
			t.Errorf("held connection %d while the table is full: %v", i+1, err)
		} else if !strings.HasPrefix(r.Backend, "backend-") {
			t.Errorf("held connection %d answered by %q", i+1, r.Backend)
		}
	}
	outcomes := map[lab.Outcome]int{}
	for range 10 {
		outcomes[l.Client.Probe("203.0.113.44:80").Outcome]++
	}
	t.Logf("10 new connections while the table is full: %v", outcomes)

	eventually(t, 20*time.Second, "the metrics show the table full", func() (bool, string) {
		m, err := d.Metrics(l.Gateway)
		if err != nil {
			return false, err.Error()
		}
		entries, limit := m["edgegate_conntrack_entries"], m["edgegate_conntrack_max"]
		lost := m["edgegate_conntrack_early_drops_total"] + m["edgegate_conntrack_dropped_total"]
		return limit == float64(max) && entries >= 0.95*limit && lost > 0,
			fmt.Sprintf("entries %v of %v, early drops %v, drops %v", entries, limit, m["edgegate_conntrack_early_drops_total"], m["edgegate_conntrack_dropped_total"])
	})
	eventually(t, 20*time.Second, "the log says the table is full", func() (bool, string) {
		line, ok := d.LogLine("connection tracking table full")
		return ok, line
	})
	eventually(t, 20*time.Second, "the dashboard marks the table", func() (bool, string) {
		var st struct {
			Conntrack *dashboard.Conntrack `json:"conntrack"`
		}
		if err := l.DashboardState(&st); err != nil {
			return false, err.Error()
		}
		return st.Conntrack != nil && st.Conntrack.Max == max && st.Conntrack.Pressed, fmt.Sprintf("%+v", st.Conntrack)
	})
	for _, c := range conns {
		c.Close()
	}
}

// RunSynProxy checks SYN proxying on the running kernel: connections to a SYN-proxied
// LoadBalancer IP and node port are answered, each handshake completed by the kernel's
// synproxy (its counters say so). Host tests flood it (TestSYNFlood); in a QEMU guest this
// proves the firmware's kernel and modules.
func RunSynProxy(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egy"})
	dir := ManifestDir(t.TempDir())
	svc := service("guarded", []string{"10.96.0.48"}, loadBalancer(30048, "203.0.113.48"), protection("{synProxy: true, maxConnsPerSource: 100}"))
	dir.Write(t, "guarded", manifests(svc, slice(svc, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	StartDaemon(t, l.Gateway, append(lab.DaemonArgs("nftables", string(dir)), "--full-sync-period", "1m")...)
	for _, addr := range []string{"203.0.113.48:80", lab.NodeIPv4.String() + ":30048"} {
		eventually(t, 20*time.Second, addr+" answers", func() (bool, string) {
			r := l.Client.Probe(addr)
			return r.Outcome == lab.Answered, r.String()
		})
		before, err := l.Gateway.SynProxyStats()
		if err != nil {
			t.Fatal(err)
		}
		for range 10 {
			if r := l.Client.Probe(addr); r.Outcome != lab.Answered {
				t.Errorf("%s through the synproxy: %v", addr, r)
			}
		}
		after, err := l.Gateway.SynProxyStats()
		if err != nil {
			t.Fatal(err)
		}
		if n := after.CookieValid - before.CookieValid; n < 10 {
			t.Errorf("%s: 10 connections, %d handshakes completed by the synproxy", addr, n)
		}
	}
}
