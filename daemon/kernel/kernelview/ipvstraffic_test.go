package kernelview

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
	"github.com/edgegate/edgegate/daemon/view"
)

func vs(addr string, proto model.Protocol, port uint16, c ipvs.Counters, dests ...ipvs.Destination) ipvs.Entry {
	return ipvs.Entry{
		Service:      ipvs.Service{VSKey: ipvsplan.VSKey{Addr: netip.MustParseAddr(addr), Proto: proto, Port: port}, Scheduler: "rr", Stats: c},
		Destinations: dests,
	}
}

func rs(addr string, port uint16, c ipvs.Counters) ipvs.Destination {
	return ipvs.Destination{Addr: netip.MustParseAddr(addr), Port: port, Weight: 1, Stats: c}
}

// TestIPVSTrafficSumsVirtualServers: a service port's traffic is the sum over its virtual
// servers (cluster IP, load-balancer IP, node port on two node addresses), per endpoint
// over the real servers that are it; virtual servers of no service in the snapshot, and a
// VIP's port that equals a node port, count for nobody else.
func TestIPVSTrafficSumsVirtualServers(t *testing.T) {
	snap := mt.Snapshot(
		mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080), mt.LoadBalancerIPs("203.0.113.10")),
		mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.0.1.1"), mt.EP("10.0.1.2"), mt.EP("10.0.1.3")),
		// Its cluster IP's port is web's node port: that virtual server is dns's alone.
		mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 30080, 53, 0)),
		mt.Slice("default", "dns-1", "dns", "dns", v1.ProtocolUDP, 53, mt.EP("10.0.1.9")),
	)
	c := func(conns, pkts uint32, bytes uint64) ipvs.Counters {
		return ipvs.Counters{Connections: conns, PacketsIn: pkts, PacketsOut: pkts, BytesIn: bytes, BytesOut: 2 * bytes}
	}
	entries := []ipvs.Entry{
		vs("10.96.0.10", model.TCP, 80, c(3, 10, 100), rs("10.0.1.1", 8080, c(2, 7, 70)), rs("10.0.1.2", 8080, c(1, 3, 30))),
		vs("203.0.113.10", model.TCP, 80, c(1, 5, 50), rs("10.0.1.3", 8080, c(1, 5, 50))),
		vs("10.200.1.1", model.TCP, 30080, c(2, 4, 40), rs("10.0.1.1", 8080, c(1, 2, 20)), rs("10.0.1.3", 8080, c(1, 2, 20))),
		vs("192.168.7.1", model.TCP, 30080, c(1, 1, 10), rs("10.0.1.2", 8080, c(1, 1, 10))),
		vs("10.96.0.53", model.UDP, 30080, c(4, 4, 4), rs("10.0.1.9", 53, c(4, 4, 4))),
		vs("10.96.9.9", model.TCP, 80, c(9, 9, 9), rs("10.0.9.9", 80, c(9, 9, 9))), // not ours
	}
	got, err := IPVSTraffic{List: func() ([]ipvs.Entry, error) { return entries, nil }}.Traffic(snap)
	if err != nil {
		t.Fatal(err)
	}
	b := func(conns, pkts, bytes uint64) view.BackendTraffic {
		return view.BackendTraffic{Connections: conns, Packets: pkts, Bytes: bytes}
	}
	want := map[string]view.ServiceTraffic{
		"default/web:http": {BackendTraffic: b(7, 40, 600), Backends: map[string]view.BackendTraffic{
			"10.0.1.1:8080": b(3, 18, 270), "10.0.1.2:8080": b(2, 8, 120), "10.0.1.3:8080": b(2, 14, 210)}},
		"default/dns:dns": {BackendTraffic: b(4, 8, 12), Backends: map[string]view.BackendTraffic{"10.0.1.9:53": b(4, 8, 12)}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("traffic:\n got %+v\nwant %+v", got, want)
	}
}

// TestIPVSTrafficWithoutVirtualServers: a service not (yet) in the IPVS table shows zero
// for itself and each endpoint; a table that cannot be read is an error naming IPVS.
func TestIPVSTrafficWithoutVirtualServers(t *testing.T) {
	snap := mt.Snapshot(
		mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)),
		mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.0.1.1")))
	got, err := IPVSTraffic{List: func() ([]ipvs.Entry, error) { return nil, nil }}.Traffic(snap)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]view.ServiceTraffic{"default/web:http": {Backends: map[string]view.BackendTraffic{"10.0.1.1:8080": {}}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("traffic: got %+v, want %+v", got, want)
	}
	_, err = IPVSTraffic{List: func() ([]ipvs.Entry, error) { return nil, errors.New("no ip_vs") }}.Traffic(snap)
	if err == nil || !strings.Contains(err.Error(), "IPVS counters: no ip_vs") {
		t.Errorf("unreadable table: %v, want an error naming the IPVS counters", err)
	}
}
