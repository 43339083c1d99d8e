package plantest

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// TestIPVSTracerSelf proves the tracer can fail: a virtual server with only a weight-0
// real server is refused, a VIP's unknown port is refused by the auxiliary table, and a
// packet to a non-local address never meets IPVS.
func TestIPVSTracerSelf(t *testing.T) {
	cfg := IPVSConfig(plan.Config{NodeName: "gw", ClusterCIDRs: MustPrefixes("10.200.2.0/24", "fd00:200:2::/64")})
	p := ipvs.Build(mt.Snapshot(Web(), WebV4Ready()), model.IPv4, cfg)
	it := NewIPVSTracer(t, p, NodeAddrs...)
	if got := it.Results(Pkt(Client, "10.96.0.10", 80)); !slices.Equal(got, All(Masq(Ep1), Masq(Ep2), Masq(Ep3))) {
		t.Errorf("cluster IP from outside the cluster CIDR: %v", got)
	}
	p.Servers[0].Reals = []ipvs.RealServer{{Addr: netip.MustParseAddr("10.200.2.11"), Port: 8080}}
	if got := it.Results(Pkt(Client, "10.96.0.10", 80)); !slices.Equal(got, All(Reject)) {
		t.Errorf("only a weight-0 real server: %v, want REJECT (ip_vs_leave)", got)
	}
	if got := it.Results(Pkt(Client, "10.96.0.10", 22)); !slices.Equal(got, All(Reject)) {
		t.Errorf("unknown port of a VIP: %v, want REJECT", got)
	}
	// Without the VIP on the dummy interface, the address is not local: IPVS never sees it.
	p.VIPs = nil
	it = NewIPVSTracer(t, p, NodeAddrs...)
	if got := it.Results(Pkt("10.200.2.50", "10.96.0.10", 80)); !slices.Equal(got, All(Accept)) {
		t.Errorf("VIP not on the dummy interface, from a pod: %v, want ACCEPT (forwarded untouched)", got)
	}
}
