package firmwaretest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/lab/nsthread"
)

// host is a network namespace inside the guest, linked to the guest's root namespace by a
// veth pair: the root end gets gw, the namespace's end addr and a default route via gw.
type host struct {
	name string
	addr netip.Prefix
	gw   netip.Prefix
	ns   netns.NsHandle
}

// The hosts of manifests/echo.yaml's address plan.
var (
	client   = &host{name: "client", addr: netip.MustParsePrefix("10.201.1.2/24"), gw: netip.MustParsePrefix("10.201.1.1/24")}
	backends = []*host{
		{name: "backend-1", addr: netip.MustParsePrefix("10.201.2.2/24"), gw: netip.MustParsePrefix("10.201.2.1/24")},
		{name: "backend-2", addr: netip.MustParsePrefix("10.201.3.2/24"), gw: netip.MustParsePrefix("10.201.3.1/24")},
	}
)

const backendPort = 8080

// maxConnections bounds the connections made to see both backends answer: with a random
// choice between two, 40 tries miss one with probability 2^-39.
const maxConnections = 40

// TestClusterIPTraffic: TCP from the client namespace to the ClusterIP reaches a backend
// namespace through the rules edgegate programmed in the guest's root namespace, and the
// connections spread over both endpoints.
func TestClusterIPTraffic(t *testing.T) {
	setUpHosts(t)

	seen := map[string]int{}
	for i := 0; i < maxConnections && len(seen) < len(backends); i++ {
		reply, err := client.get(netip.AddrPortFrom(clusterIP, servicePort))
		if err != nil {
			t.Fatalf("connection %d from %s to %s:%d: %v", i+1, client.name, clusterIP, servicePort, err)
		}
		seen[reply]++
	}
	t.Logf("answers through %s:%d: %v", clusterIP, servicePort, seen)
	for _, b := range backends {
		if seen[b.name] == 0 {
			t.Errorf("%s never answered in %d connections", b.name, maxConnections)
		}
	}
}

// setUpHosts creates the client and the backends (the client's veth is egt0-root in the
// guest's root namespace) and starts the backends' servers, all until t's cleanup.
func setUpHosts(t *testing.T) {
	t.Helper()
	root, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(root.Close)
	for i, h := range append([]*host{client}, backends...) {
		h.create(t, root, fmt.Sprintf("egt%d", i))
	}
	for _, b := range backends {
		b.serve(t)
	}
}

// create makes the namespace and its veth pair; t's cleanup removes both.
func (h *host) create(t *testing.T, root *netlink.Handle, prefix string) {
	t.Helper()
	err := nsthread.Run(netns.None(), h.name, func() error {
		var err error
		// New moves this thread into the namespace; Run moves it back.
		h.ns, err = netns.New()
		return err
	})
	if err != nil {
		t.Fatalf("%s: new namespace: %v", h.name, err)
	}
	t.Cleanup(func() { h.ns.Close() })

	outer, inner := prefix+"-root", prefix+"-ns"
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: outer}, PeerName: inner, PeerNamespace: netlink.NsFd(int(h.ns))}
	if err := root.LinkAdd(veth); err != nil {
		t.Fatalf("%s: veth %s: %v", h.name, outer, err)
	}
	t.Cleanup(func() {
		// The peer goes with it.
		if err := root.LinkDel(veth); err != nil {
			t.Errorf("%s: removing veth %s: %v", h.name, outer, err)
		}
	})
	if err := configure(root, outer, h.gw, netip.Addr{}); err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
	nh, err := netlink.NewHandleAt(h.ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
	defer nh.Close()
	lo, err := nh.LinkByName("lo")
	if err == nil {
		err = nh.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("%s: lo: %v", h.name, err)
	}
	if err := configure(nh, inner, h.addr, h.gw.Addr()); err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
}

// configure gives a device an address, brings it up and, when gw is set, routes
// everything else through gw.
func configure(h *netlink.Handle, dev string, addr netip.Prefix, gw netip.Addr) error {
	link, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	ipnet := &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen())}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("%s: address %s: %w", dev, addr, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("%s: up: %w", dev, err)
	}
	if gw.IsValid() {
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice()}
		if err := h.RouteAdd(route); err != nil {
			return fmt.Errorf("%s: default route via %s: %w", dev, gw, err)
		}
	}
	return nil
}

// serve answers every TCP connection to the host's port 8080 with the host's name, until
// t's cleanup.
func (h *host) serve(t *testing.T) {
	t.Helper()
	var ln net.Listener
	err := h.do(func() error {
		var err error
		ln, err = net.Listen("tcp", netip.AddrPortFrom(h.addr.Addr(), backendPort).String())
		return err
	})
	if err != nil {
		t.Fatalf("%s: listen: %v", h.name, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.WriteString(c, h.name)
			c.Close()
		}
	}()
}

// get connects from the host to addr and returns what the other side sent before closing.
func (h *host) get(addr netip.AddrPort) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var c net.Conn
	err := h.do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr.String())
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// do runs fn on an OS thread inside the host's namespace. Sockets keep the namespace they
// were made in, so they may be used from any goroutine afterwards.
func (h *host) do(fn func() error) error {
	return nsthread.Run(h.ns, h.name, fn)
}
