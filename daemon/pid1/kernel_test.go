package pid1

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// The tests in this file use the real kernel, in network namespaces they create and
// delete: nothing touches the root namespace.

var nsSeq atomic.Int32

// newNetns creates a named network namespace for the test and a route netlink handle in it.
func newNetns(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	kerneltest.NeedRoot(t)
	name := fmt.Sprintf("egpid1-%d-%d", os.Getpid()%100000, nsSeq.Add(1))
	var ns netns.NsHandle
	err := inThread(func() error {
		var err error
		// NewNamed also moves this thread into the namespace; inThread's thread ends.
		ns, err = netns.NewNamed(name)
		return err
	})
	if err != nil {
		t.Fatalf("netns: %v", err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Close()
		ns.Close()
		_ = netns.DeleteNamed(name)
	})
	return ns, h
}

// inThread runs fn on a locked thread that is thrown away afterwards, so whatever fn does
// to the thread's namespace never reaches another goroutine.
func inThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		errc <- fn()
	}()
	return <-errc
}

// inNetns runs fn with the current network namespace set to ns, for code that opens its
// sockets in the current namespace.
func inNetns(ns netns.NsHandle, fn func() error) error {
	return inThread(func() error {
		if err := netns.Set(ns); err != nil {
			return err
		}
		return fn()
	})
}

// nsDHCP opens the real DHCP client inside a namespace.
type nsDHCP struct{ ns netns.NsHandle }

func (d nsDHCP) Open(dev string) (DHCPSession, error) {
	var s DHCPSession
	err := inNetns(d.ns, func() error {
		var err error
		s, err = nclient4DHCP{}.Open(dev)
		return err
	})
	return s, err
}

func TestNetlinkLinks(t *testing.T) {
	_, h := newNetns(t)
	links := &netlinkLinks{h: h}
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eg0"}, PeerName: "eg0peer"}); err != nil {
		t.Fatal(err)
	}
	peer, _ := h.LinkByName("eg0peer")
	if err := h.LinkSetUp(peer); err != nil {
		t.Fatal(err)
	}
	nics, err := links.NICs()
	if err != nil || len(nics) != 0 {
		t.Errorf("NICs() = %v, %v; want no NICs (lo and veths are not NICs)", nics, err)
	}
	for _, dev := range []string{"lo", "eg0"} {
		if err := links.SetUp(dev); err != nil {
			t.Fatal(err)
		}
		l, _ := h.LinkByName(dev)
		if l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s is not up", dev)
		}
	}
	if err := links.SetUp("nope0"); err == nil {
		t.Error("SetUp of a missing device succeeded")
	}

	for _, a := range []struct {
		prefix   string
		lifetime time.Duration
	}{{"10.77.0.2/24", 0}, {"10.77.1.2/24", 90 * time.Second}, {"fd77::2/64", 0}, {"10.77.1.2/24", 80 * time.Second}} {
		if err := links.ReplaceAddress("eg0", netip.MustParsePrefix(a.prefix), a.lifetime); err != nil {
			t.Fatal(err)
		}
	}
	l, _ := h.LinkByName("eg0")
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	valid := map[string]int{}
	for _, a := range addrs {
		if !a.IP.IsLinkLocalUnicast() {
			valid[a.IPNet.String()] = a.ValidLft
		}
	}
	if len(valid) != 3 || valid["10.77.0.2/24"] != foreverLft || valid["fd77::2/64"] != foreverLft ||
		valid["10.77.1.2/24"] > 80 || valid["10.77.1.2/24"] < 70 {
		t.Errorf("addresses and valid lifetimes = %v; want two forever and one refreshed to 80s", valid)
	}

	for _, gw := range []string{"10.77.0.1", "10.77.0.254", "fd77::1"} {
		if err := links.ReplaceDefaultRoute("eg0", netip.MustParseAddr(gw)); err != nil {
			t.Fatal(err)
		}
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	var defaults []string
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			defaults = append(defaults, fmt.Sprintf("default via %s dev %d", r.Gw, r.LinkIndex))
		}
	}
	want := fmt.Sprintf("[default via 10.77.0.254 dev %[1]d default via fd77::1 dev %[1]d]", l.Attrs().Index)
	if got := fmt.Sprint(defaults); got != want {
		t.Errorf("default routes = %s, want %s (the second IPv4 one replaces the first)", got, want)
	}
}

// foreverLft is the kernel's "forever" for an address lifetime.
const foreverLft = 1<<32 - 1

func TestNetlinkWaitLink(t *testing.T) {
	ns, h := newNetns(t)
	links := &netlinkLinks{h: h}
	// A handle of its own: one handle serves one request at a time.
	other, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		time.Sleep(150 * time.Millisecond)
		_ = other.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "late0"}, PeerName: "late0peer"})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := links.WaitLink(ctx, "late0"); err != nil {
		t.Errorf("WaitLink(late0) = %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if err := links.WaitLink(short, "never0"); err == nil || !strings.Contains(err.Error(), "did not appear") {
		t.Errorf("WaitLink(never0) = %v, want a timeout", err)
	}
}

// dhcpServer answers DHCPv4 in a namespace with one fixed lease and counts renewals.
type dhcpServer struct {
	renewals atomic.Int32
	requests atomic.Int32
}

func (s *dhcpServer) handle(conn net.PacketConn, peer net.Addr, req *dhcpv4.DHCPv4) {
	reply := dhcpv4.MessageTypeOffer
	if req.MessageType() == dhcpv4.MessageTypeRequest {
		reply = dhcpv4.MessageTypeAck
		s.requests.Add(1)
		if !req.ClientIPAddr.IsUnspecified() {
			s.renewals.Add(1)
		}
	}
	resp, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(reply),
		dhcpv4.WithYourIP(net.IPv4(10, 78, 0, 50)),
		dhcpv4.WithServerIP(net.IPv4(10, 78, 0, 1)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 78, 0, 1))),
		dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
		dhcpv4.WithRouter(net.IPv4(10, 78, 0, 1)),
		dhcpv4.WithDNS(net.IPv4(10, 78, 0, 53)),
		dhcpv4.WithLeaseTime(6),
		dhcpv4.WithOption(dhcpv4.OptRenewTimeValue(time.Second)),
	)
	if err != nil {
		return
	}
	_, _ = conn.WriteTo(resp.ToBytes(), peer)
}

// TestDHCPInNetns boots a fake machine whose network is real: a veth into a namespace
// where a DHCPv4 server runs. Boot takes the lease with nclient4 and configures the address
// and default route through netlink; Run renews it.
func TestDHCPInNetns(t *testing.T) {
	nsSrv, hSrv := newNetns(t)
	nsCli, hCli := newNetns(t)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "egsrv"}, PeerName: "egcli", PeerNamespace: netlink.NsFd(nsCli)}
	if err := hSrv.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	srvLink, _ := hSrv.LinkByName("egsrv")
	if err := hSrv.AddrAdd(srvLink, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 78, 0, 1), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := hSrv.LinkSetUp(srvLink); err != nil {
		t.Fatal(err)
	}
	ds := &dhcpServer{}
	var srv *server4.Server
	if err := inNetns(nsSrv, func() error {
		var err error
		srv, err = server4.NewServer("egsrv", nil, ds.handle)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Close() })

	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.ip=egcli:dhcp"})
	tm.sys.Links = &netlinkLinks{h: hCli}
	tm.sys.DHCP = nsDHCP{ns: nsCli}
	m := tm.boot()
	if !strings.Contains(tm.markers(), "EDGEGATE-NET-UP egcli 10.78.0.50/24\n") {
		t.Fatalf("no lease:\n%s", tm.console())
	}
	cli, _ := hCli.LinkByName("egcli")
	addrs, _ := hCli.AddrList(cli, netlink.FAMILY_V4)
	if len(addrs) != 1 || addrs[0].IPNet.String() != "10.78.0.50/24" || addrs[0].ValidLft > 6 {
		t.Errorf("client addresses = %v, want 10.78.0.50/24 valid for the lease's 6s", addrs)
	}
	routes, _ := hCli.RouteList(cli, netlink.FAMILY_V4)
	var gw string
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			gw = r.Gw.String()
		}
	}
	if gw != "10.78.0.1" {
		t.Errorf("default route via %q, want 10.78.0.1; routes %v", gw, routes)
	}
	resolv, _ := os.ReadFile(filepath.Join(tm.sys.Root, "etc/resolv.conf"))
	if !strings.Contains(string(resolv), "nameserver 10.78.0.53\n") {
		t.Errorf("resolv.conf = %q", resolv)
	}

	wait := run(m)
	deadline := time.Now().Add(10 * time.Second)
	for ds.renewals.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	tm.powerOff(m, wait)
	if ds.renewals.Load() < 1 {
		t.Errorf("no renewal reached the server (%d requests)", ds.requests.Load())
	}
	addrs, _ = hCli.AddrList(cli, netlink.FAMILY_V4)
	if len(addrs) != 1 || addrs[0].ValidLft < 4 {
		t.Errorf("after the renewal the address is %v, want its lifetime refreshed", addrs)
	}
}
