package labtest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/fastpath"
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

func fastPathOffloads(t *testing.T, l *lab.Lab, g *Gateway) {
	eventually(t, 15*time.Second, "the fast path over the gateway's interfaces", func() (bool, string) {
		fts, err := l.Gateway.Flowtables(fastpath.TableName)
		return err == nil && len(fts) == 1 && strings.HasPrefix(fts[0], fastpath.FlowtableName+":") && strings.Contains(fts[0], "c1"),
			fmt.Sprintf("%q %v", fts, err)
	})
	counter, err := l.Gateway.CountForwarded(lab.BackendTCPPort)
	if err != nil {
		t.Fatal(err)
	}
	defer counter.Close()
	c := openHTTP(t, l.Client, "10.96.10.90:80")
	defer c.Close()
	const exchanges = 100
	for i := range exchanges {
		if _, err := c.Ask(); err != nil {
			t.Fatalf("exchange %d over one connection: %v", i+1, err)
		}
	}
	packets, err := counter.Packets()
	if err != nil {
		t.Fatal(err)
	}
	// Without the fast path every request, reply and ACK passes the hook: over 200
	// packets. Offloaded once established, a handful.
	t.Logf("%d exchanges over one connection: %d packets seen by the forward hook", exchanges, packets)
	if packets > exchanges/4 {
		t.Errorf("the forward hook saw %d packets of %d exchanges: the connection was not offloaded", packets, exchanges)
	}
	if packets == 0 {
		t.Error("the forward hook saw no packet of the connection: the counter counts nothing")
	}
}
