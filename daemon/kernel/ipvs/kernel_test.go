package ipvs

import (
	"net"
	"net/netip"
	"testing"

	moby "github.com/moby/ipvs"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/model"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// The converters at the moby/ipvs edge: what the kernel is sent and what is read back.
func TestMobyConversion(t *testing.T) {
	v4 := Service{VSKey: ipvsplan.VSKey{Addr: netip.MustParseAddr("10.96.0.10"), Proto: model.TCP, Port: 80}, Scheduler: "sh", Timeout: 300}
	m := toMobyService(v4)
	if m.AddressFamily != unix.AF_INET || m.Protocol != unix.IPPROTO_TCP || m.Port != 80 || m.SchedName != "sh" ||
		m.Flags != flagPersistent || m.Timeout != 300 || m.Netmask != 0xffffffff || !m.Address.Equal(net.ParseIP("10.96.0.10")) {
		t.Errorf("IPv4 persistent service: %+v", m)
	}
	v6 := Service{VSKey: ipvsplan.VSKey{Addr: netip.MustParseAddr("fd00:96::10"), Proto: model.SCTP, Port: 80}, Scheduler: "rr"}
	m = toMobyService(v6)
	if m.AddressFamily != unix.AF_INET6 || m.Protocol != unix.IPPROTO_SCTP || m.Flags != 0 || m.Timeout != 0 || m.Netmask != 128 {
		t.Errorf("IPv6 service: %+v", m)
	}
	// Read back: the kernel adds the hashed flag and keeps a timeout on non-persistent
	// services; only persistence counts.
	got, ok := fromMobyService(&moby.Service{Address: net.ParseIP("10.96.0.10").To4(), Protocol: unix.IPPROTO_UDP, Port: 53,
		SchedName: "rr", Flags: flagHashed, Timeout: 300, AddressFamily: unix.AF_INET, Stats: moby.SvcStats{Connections: 7, BytesIn: 9}})
	if !ok || got.Proto != model.UDP || got.Persistent() || got.Addr != netip.MustParseAddr("10.96.0.10") || got.Stats.Connections != 7 || got.Stats.BytesIn != 9 {
		t.Errorf("read back UDP service: %+v %v", got, ok)
	}
	if _, ok := fromMobyService(&moby.Service{FWMark: 5, Protocol: unix.IPPROTO_TCP}); ok {
		t.Error("a firewall-mark virtual server converted")
	}
	if _, ok := fromMobyService(&moby.Service{Address: net.ParseIP("10.0.0.1").To4(), Protocol: 254}); ok {
		t.Error("a virtual server of an unknown protocol converted")
	}
	d := toMobyDest(Destination{Addr: netip.MustParseAddr("fd00:200:2::11"), Port: 8080, Weight: 1})
	if d.AddressFamily != unix.AF_INET6 || d.ConnectionFlags != moby.ConnFwdMasq || d.Weight != 1 || d.Port != 8080 {
		t.Errorf("destination: %+v", d)
	}
	back, ok := fromMobyDest(&moby.Destination{Address: net.ParseIP("10.200.2.11"), Port: 8080, Weight: 0,
		ConnectionFlags: moby.ConnFwdMasq | 0x100, ActiveConnections: 2, InactiveConnections: 3})
	if !ok || back.Addr != netip.MustParseAddr("10.200.2.11") || back.Forward != Masq || back.ActiveConns != 2 || back.InactiveConns != 3 {
		t.Errorf("read back destination: %+v", back)
	}
}

// List reads the table in ipvsadm's order (protocol, family, address, port); Format
// prints it as ipvsadm -Ln and -Ln --stats do.
func TestListAndFormat(t *testing.T) {
	f := NewFake()
	for _, s := range []Service{
		{VSKey: ipvsplan.VSKey{Addr: netip.MustParseAddr("fd00:96::10"), Proto: model.TCP, Port: 80}, Scheduler: "rr"},
		{VSKey: ipvsplan.VSKey{Addr: netip.MustParseAddr("10.96.0.53"), Proto: model.UDP, Port: 53}, Scheduler: "rr"},
		{VSKey: ipvsplan.VSKey{Addr: netip.MustParseAddr("10.96.0.10"), Proto: model.TCP, Port: 80}, Scheduler: "sh", Timeout: 300},
	} {
		if err := f.NewService(s); err != nil {
			t.Fatal(err)
		}
		if err := f.NewDestination(s, Destination{Addr: netip.MustParseAddr("10.200.2.11"), Port: 8080, Weight: 1}); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := List(f)
	if err != nil {
		t.Fatal(err)
	}
	want := `Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.10:80 sh persistent 300
  -> 10.200.2.11:8080             Masq    1      0          0         
TCP  [fd00:96::10]:80 rr
  -> 10.200.2.11:8080             Masq    1      0          0         
UDP  10.96.0.53:53 rr
  -> 10.200.2.11:8080             Masq    1      0          0         
`
	if got := Format(entries, false); got != want {
		t.Errorf("Format:\n%s\nwant:\n%s", got, want)
	}
	entries[0].Stats = Counters{Connections: 3, PacketsIn: 10, PacketsOut: 8, BytesIn: 900, BytesOut: 4000}
	entries[0].Destinations[0].Stats = entries[0].Stats
	stats := Format(entries[:1], true)
	wantStats := `Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  10.96.0.10:80                       3       10        8      900     4000
  -> 10.200.2.11:8080                    3       10        8      900     4000
`
	if stats != wantStats {
		t.Errorf("Format with stats:\n%s\nwant:\n%s", stats, wantStats)
	}
	if f.Dump() != want {
		t.Errorf("Fake.Dump differs from List+Format:\n%s", f.Dump())
	}
}
