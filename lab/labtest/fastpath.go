package labtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/fastpath"
	"github.com/edgegate/edgegate/daemon/view"
	"github.com/edgegate/edgegate/lab"
)

// RunFastPath runs the traffic matrix in nftables mode with --fast-path, first checking
// that the fast path is there and that established connections to a Service really skip
// the hooks: a counting chain of the test's own in the forward hook sees a kept-alive
// connection's first packets only, while a hundred exchanges go through. It needs a
// kernel with flowtables: the firmware's, in a QEMU guest (qemu/testdata/dataplanetest).
func RunFastPath(t *testing.T) {
	first := threeReady("fast-path-offloads-established-connections", service("offloaded", []string{"10.96.10.90"}), fastPathOffloads)
	RunMatrixWith(t, "nftables", []string{"--fast-path"}, &first)
}

// forwardedPackets counts the packets the gateway's forward hook sees of one kept-alive
// connection from client-1 to addr over n request/response exchanges.
func forwardedPackets(t *testing.T, l *lab.Lab, addr string, n int) uint64 {
	t.Helper()
	counter, err := l.Gateway.CountForwarded(lab.BackendTCPPort)
	if err != nil {
		t.Fatal(err)
	}
	defer counter.Close()
	c := openHTTP(t, l.Client, addr)
	defer c.Close()
	for i := range n {
		if _, err := c.Ask(); err != nil {
			t.Fatalf("exchange %d of %d over one connection to %s: %v", i+1, n, addr, err)
		}
	}
	packets, err := counter.Packets()
	if err != nil {
		t.Fatal(err)
	}
	return packets
}

func fastPathOffloads(t *testing.T, l *lab.Lab, g *Gateway) {
	eventually(t, 15*time.Second, "the fast path over the gateway's interfaces", func() (bool, string) {
		fts, err := l.Gateway.Flowtables(fastpath.TableName)
		return err == nil && len(fts) == 1 && strings.HasPrefix(fts[0], fastpath.FlowtableName+":") && strings.Contains(fts[0], "c1"),
			fmt.Sprintf("%q %v", fts, err)
	})
	eventually(t, 10*time.Second, "the metrics and the dashboard show the fast path", func() (bool, string) {
		m, err := g.Daemon.Metrics(l.Gateway)
		if err != nil {
			return false, err.Error()
		}
		var st struct {
			FastPath struct{ Devices []string } `json:"fastPath"`
		}
		if err := l.DashboardState(&st); err != nil {
			return false, err.Error()
		}
		n := m["edgegate_fast_path_interfaces"]
		return n >= 1 && int(n) == len(st.FastPath.Devices) && slices.Contains(st.FastPath.Devices, "c1"),
			fmt.Sprintf("metric %v, dashboard %v", n, st.FastPath.Devices)
	})
	const exchanges = 100
	packets := forwardedPackets(t, l, "10.96.10.90:80", exchanges)
	// Without the fast path every request, reply and ACK passes the hook: over 200
	// packets. Offloaded once established, a handful.
	t.Logf("%d exchanges over one connection: %d packets seen by the forward hook", exchanges, packets)
	if packets > exchanges/4 {
		t.Errorf("the forward hook saw %d packets of %d exchanges: the connection was not offloaded", packets, exchanges)
	}
	if packets == 0 {
		t.Error("the forward hook saw no packet of the connection: the counter counts nothing")
	}

	// The dashboard's counts are the NAT chains' (one a connection, at its first packet,
	// before any offload): they still move, one per new connection.
	const service = "matrix/offloaded:p"
	connections := func() (uint64, error) {
		var traffic map[string]view.ServiceTraffic
		if err := l.DashboardTraffic(&traffic); err != nil {
			return 0, err
		}
		return traffic[service].Connections, nil
	}
	var before uint64
	eventually(t, 10*time.Second, "the dashboard counts "+service, func() (bool, string) {
		n, err := connections()
		before = n
		return err == nil && n >= 1, fmt.Sprintf("%d connections, %v", n, err)
	})
	for range 5 {
		if r := l.Client.Probe("10.96.10.90:80"); r.Outcome != lab.Answered {
			t.Fatalf("a new connection with the fast path on: %v", r)
		}
	}
	eventually(t, 10*time.Second, "the dashboard counts 5 more connections", func() (bool, string) {
		n, err := connections()
		return err == nil && n == before+5, fmt.Sprintf("%d connections after %d and 5 more, %v", n, before, err)
	})
}
