package labtest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/plan/nft"

	"github.com/edgegate/edgegate/lab"
)

// TestTrafficMatrixNftables runs every scenario against one daemon in nftables mode.
func TestTrafficMatrixNftables(t *testing.T) { RunMatrix(t, "nftables") }

// TestTrafficMatrixNftablesSplit runs every scenario with the Services' dispatch split over
// tables (two endpoints a table: dozens of tables per family), as a large cluster's is:
// traffic must behave exactly as with one table.
func TestTrafficMatrixNftablesSplit(t *testing.T) {
	RunMatrixWith(t, "nftables", []string{"--nftables-endpoints-per-table=2"}, &Scenario{Name: "split", Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
		eventually(t, 10*time.Second, "the dispatch split over tables in both families", func() (bool, string) {
			st := kernelState(t, l)
			var v4, v6 int
			for _, name := range st.TablesMatching(nft.IsShardTable) {
				if strings.HasPrefix(name, "table ip6 ") {
					v6++
				} else {
					v4++
				}
			}
			// The matrix has fewer IPv6 endpoints.
			return v4 >= 8 && v6 >= 2, fmt.Sprintf("%d IPv4 and %d IPv6 shard tables (want 8 and 2 or more): %v", v4, v6, st.TablesMatching(nft.ModeTable))
		})
	}})
}

// TestEmbeddedDefaultNftables starts the daemon the way the demo does, without --manifests,
// and checks the embedded default services that the demo shows.
func TestEmbeddedDefaultNftables(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egd"})
	StartDaemon(t, l.Gateway, "--proxy-mode=nftables", "--hostname-override", lab.GatewayNodeName,
		"--node-ip", lab.NodeIPv4.String()+","+lab.NodeIPv6.String())
	for _, addr := range []string{"10.96.0.10:80", "[fd00:96::10]:80", "10.200.1.1:30080", "203.0.113.10:80", "[2001:db8:113::10]:80"} {
		byBackend, _ := tally(t, l.Client, addr, 12)
		if len(byBackend) < 2 {
			t.Errorf("default/web at %s: 12 connections reached only %s", addr, describe(byBackend))
		}
	}
	flow, err := l.Client.OpenUDP(40054, "10.96.0.53:53")
	if err != nil {
		t.Fatal(err)
	}
	defer flow.Close()
	if r := flow.Ask(); r.Outcome != lab.Answered {
		t.Errorf("default/dns 10.96.0.53:53: %v", r)
	}
	// The daemon set kube-proxy's conntrack timeouts in its namespace (the table size is
	// the host's: global, read-only outside the initial namespace).
	for name, want := range map[string]string{"nf_conntrack_tcp_timeout_established": "86400", "nf_conntrack_tcp_timeout_close_wait": "3600"} {
		var b []byte
		err := l.Gateway.Do(func() (err error) { b, err = os.ReadFile("/proc/sys/net/netfilter/" + name); return err })
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("gateway %s = %q, %v; want %s", name, b, err, want)
		}
	}
}
