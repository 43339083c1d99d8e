package plan_test

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// Conntrack fixtures: dns is a UDP LoadBalancer (cluster IP 10.96.0.53:53, external IP
// 192.0.2.53, LoadBalancer IP 203.0.113.53, node port 30053) whose endpoints are now
// 10.200.2.11 and 10.200.2.12 on port 5353; 10.200.2.13 was removed. web is TCP on
// 10.96.0.10:80. Node addresses as in nft_test.go.
func dnsService(mods ...func(*v1.Service)) *v1.Service {
	return mt.Service("default", "dns", "10.96.0.53", append([]func(*v1.Service){
		mt.Port("dns", v1.ProtocolUDP, 53, 5353, 30053),
		mt.ExternalIPs("192.0.2.53"),
		mt.LoadBalancerIPs("203.0.113.53"),
	}, mods...)...)
}

func dnsSlice(addrs ...string) *discovery.EndpointSlice {
	var eps []discovery.Endpoint
	for _, a := range addrs {
		eps = append(eps, mt.EP(a))
	}
	return mt.Slice("default", "dns-v4", "dns", "dns", v1.ProtocolUDP, 5353, eps...)
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestUDPStale(t *testing.T) {
	snap := mt.Snapshot(dnsService(), dnsSlice("10.200.2.11", "10.200.2.12"), pt.Web(), pt.WebV4Ready())
	u := plan.UDP(snap, model.IPv4, pt.Cfg)
	if u.Empty() {
		t.Fatal("UDP frontends empty")
	}
	cases := []struct {
		name        string
		orig, reply string
		dstLocal    bool
		wantStale   bool
	}{
		{"cluster IP to a removed endpoint", "10.96.0.53:53", "10.200.2.13:5353", false, true},
		{"cluster IP to a current endpoint", "10.96.0.53:53", "10.200.2.11:5353", false, false},
		{"cluster IP to a current address on another port", "10.96.0.53:53", "10.200.2.11:53", false, true},
		{"untranslated while endpoints exist", "10.96.0.53:53", "10.96.0.53:53", false, true},
		{"external IP to a removed endpoint", "192.0.2.53:53", "10.200.2.13:5353", false, true},
		{"LoadBalancer IP to a current endpoint", "203.0.113.53:53", "10.200.2.12:5353", false, false},
		{"LoadBalancer IP to a removed endpoint", "203.0.113.53:53", "10.200.2.13:5353", false, true},
		{"node port on a local address, removed endpoint", "10.200.1.1:30053", "10.200.2.13:5353", true, true},
		{"node port on a local address, current endpoint", "10.200.1.1:30053", "10.200.2.12:5353", true, false},
		{"node port on a local address, untranslated", "10.200.1.1:30053", "10.200.1.1:30053", true, true},
		{"node port number on a foreign address", "198.51.100.9:30053", "10.200.2.13:5353", false, false},
		{"unrelated flow", "10.96.0.99:53", "10.200.2.13:5353", false, false},
		{"TCP service ignored", "10.96.0.10:80", "10.200.2.99:8080", false, false},
		{"cluster IP on another port", "10.96.0.53:54", "10.200.2.13:5353", false, false},
	}
	for _, c := range cases {
		if got := u.Stale(ap(c.orig), ap(c.reply), c.dstLocal); got != c.wantStale {
			t.Errorf("%s: Stale(%s, %s, local=%v) = %v, want %v", c.name, c.orig, c.reply, c.dstLocal, got, c.wantStale)
		}
	}
}

func TestUDPStaleWithoutEndpoints(t *testing.T) {
	u := plan.UDP(mt.Snapshot(dnsService()), model.IPv4, pt.Cfg)
	// Made while the service had no endpoint: nothing better to steer it to yet.
	if u.Stale(ap("10.96.0.53:53"), ap("10.96.0.53:53"), false) {
		t.Error("untranslated entry stale although the service has no endpoint")
	}
	if !u.Stale(ap("10.96.0.53:53"), ap("10.200.2.11:5353"), false) {
		t.Error("entry to a vanished endpoint not stale")
	}
}

func TestUDPFrontendsPerFamily(t *testing.T) {
	if u := plan.UDP(mt.Snapshot(pt.Web(), pt.WebV4Ready()), model.IPv4, pt.Cfg); !u.Empty() {
		t.Error("TCP-only snapshot has UDP frontends")
	}
	snap := mt.Snapshot(dnsService(), dnsSlice("10.200.2.11"))
	if u := plan.UDP(snap, model.IPv6, pt.Cfg); !u.Empty() {
		t.Error("IPv4-only service has IPv6 UDP frontends")
	}
}

func TestUDPFrontendConflictFirstKeeps(t *testing.T) {
	// Two services claim 10.96.0.53:53; "a-dns" sorts first and keeps it in the nft plan,
	// so its endpoints are the ones conntrack entries may point to.
	first := mt.Service("default", "a-dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	firstEPs := mt.Slice("default", "a-dns-1", "a-dns", "dns", v1.ProtocolUDP, 5353, mt.EP("10.200.2.11"))
	objs := []any{first, firstEPs, dnsService(), dnsSlice("10.200.2.12")}
	snap := mt.Snapshot(objs...)
	tr := pt.NewNFTTracer(t, nft.Build(snap, model.IPv4, pt.Cfg), pt.NodeAddrs...)
	if got := tr.Trace(pt.Pkt(pt.Client, "10.96.0.53", 53).UDP()); got.Result != "10.200.2.11:5353" {
		t.Fatalf("plan sends the flow to %v", got)
	}
	for range 20 { // map order must not decide
		u := plan.UDP(snap, model.IPv4, pt.Cfg)
		if u.Stale(ap("10.96.0.53:53"), ap("10.200.2.11:5353"), false) {
			t.Fatal("entry to the endpoint the plan uses is stale")
		}
	}
}
