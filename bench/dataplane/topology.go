package dataplane

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/lab"
)

// The benchmark's network: four namespaces the run creates for one measurement and drops
// after it, in this kernel (the host's, or a QEMU guest's). They are unnamed: nothing is
// bound under /run/netns, so a run that is killed leaves nothing behind once its processes
// are gone. Links are created inside the gateway and the router with their peers made
// straight in the client and the backend, so nothing ever appears in the root namespace.
//
//	client  eth0 10.240.1.2/24 ── gateway c0 10.240.1.1  b0 10.240.2.1 ── backend eth0 10.240.2.2, .3
//	        eth1 10.240.3.2/24 ── router  c0 10.240.3.1  b0 10.240.4.1 ── backend eth1 10.240.4.2
//
// The client's default route goes through the gateway (edgegate's rules, service VIPs
// included); 10.240.4.0/24 goes through the router, a twin of the gateway without any
// rule. The backend answers both ways: default route via the gateway, 10.240.3.0/24 via the
// router. The gateway-side addresses are the target Service's endpoints.
var (
	clientViaGateway = netip.MustParseAddr("10.240.1.2")
	gatewayToClient  = netip.MustParseAddr("10.240.1.1")
	gatewayToBackend = netip.MustParseAddr("10.240.2.1")
	clientViaRouter  = netip.MustParseAddr("10.240.3.2")
	routerToClient   = netip.MustParseAddr("10.240.3.1")
	routerToBackend  = netip.MustParseAddr("10.240.4.1")
	// backendAddrs are the backend's addresses behind the gateway: the target's endpoints.
	backendAddrs = []netip.Addr{netip.MustParseAddr("10.240.2.2"), netip.MustParseAddr("10.240.2.3")}
	// backendViaRouter is the backend's address behind the router.
	backendViaRouter = netip.MustParseAddr("10.240.4.2")
)

// topology is one instance of the network.
type topology struct {
	client, gateway, router, backend node
}

// node is one namespace of the topology: lab's Host runs code and programs in it, the
// handle opens netlink sockets there.
type node struct {
	*lab.Host
	ns netns.NsHandle
}

func (t *topology) nodes() []*node { return []*node{&t.client, &t.gateway, &t.router, &t.backend} }

// newTopology creates and wires the namespaces and waits until every link is up. On error
// it removes what it made.
func newTopology() (_ *topology, err error) {
	t := &topology{}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	for i, n := range t.nodes() {
		name := []string{"client", "gateway", "router", "backend"}[i]
		ns, err := newNamespace()
		if err != nil {
			return nil, fmt.Errorf("namespace %s: %w", name, err)
		}
		*n = node{Host: lab.HostIn(name, ns), ns: ns}
	}
	if err := t.wire(); err != nil {
		return nil, err
	}
	if err := t.waitLinksUp(5 * time.Second); err != nil {
		return nil, err
	}
	return t, nil
}

// newNamespace makes an unnamed network namespace: the thread that unshares into it is
// moved back by Do, and the handle keeps the namespace alive until close.
func newNamespace() (netns.NsHandle, error) {
	h := netns.None()
	err := lab.HostIn("new", netns.None()).Do(func() error {
		var err error
		h, err = netns.New()
		return err
	})
	return h, err
}

// close drops the namespaces: each goes, with its links, rules and conntrack entries, once
// no process holds it (the caller has stopped edgegate and the backend by then).
func (t *topology) close() {
	for _, n := range t.nodes() {
		if n.Host != nil && n.ns.IsOpen() {
			_ = n.ns.Close()
		}
		*n = node{}
	}
}

func (t *topology) wire() error {
	for _, n := range []node{t.gateway, t.router} {
		if err := n.Sysctl("net.ipv4.ip_forward=1"); err != nil {
			return err
		}
	}
	type end struct {
		host  node
		dev   string
		addrs []netip.Addr
	}
	// Each pair: the side made first (inside the gateway or the router) and its peer.
	pairs := []struct{ near, far end }{
		{end{t.gateway, "c0", []netip.Addr{gatewayToClient}}, end{t.client, "eth0", []netip.Addr{clientViaGateway}}},
		{end{t.gateway, "b0", []netip.Addr{gatewayToBackend}}, end{t.backend, "eth0", backendAddrs}},
		{end{t.router, "c0", []netip.Addr{routerToClient}}, end{t.client, "eth1", []netip.Addr{clientViaRouter}}},
		{end{t.router, "b0", []netip.Addr{routerToBackend}}, end{t.backend, "eth1", []netip.Addr{backendViaRouter}}},
	}
	for _, p := range pairs {
		err := withLinks(p.near.host, func(nl *netlink.Handle) error {
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.near.dev}, PeerName: p.far.dev, PeerNamespace: netlink.NsFd(int(p.far.host.ns))}
			if err := nl.LinkAdd(v); err != nil {
				return fmt.Errorf("veth %s to %s %s: %w", p.near.dev, p.far.host.Name, p.far.dev, err)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", p.near.host.Name, err)
		}
		for _, e := range []end{p.near, p.far} {
			if err := withLinks(e.host, func(nl *netlink.Handle) error { return upWithAddrs(nl, e.dev, e.addrs) }); err != nil {
				return fmt.Errorf("%s: %w", e.host.Name, err)
			}
		}
	}
	routes := []struct {
		host node
		dst  string // "" for the default route
		via  netip.Addr
	}{
		{t.client, "", gatewayToClient},
		{t.client, "10.240.4.0/24", routerToClient},
		{t.backend, "", gatewayToBackend},
		{t.backend, "10.240.3.0/24", routerToBackend},
	}
	for _, r := range routes {
		err := withLinks(r.host, func(nl *netlink.Handle) error {
			route := &netlink.Route{Gw: r.via.AsSlice(), Family: unix.AF_INET}
			if r.dst != "" {
				route.Dst = ipNet(netip.MustParsePrefix(r.dst))
			}
			if err := nl.RouteAdd(route); err != nil {
				return fmt.Errorf("route %s via %s: %w", cmp.Or(r.dst, "default"), r.via, err)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: %w", r.host.Name, err)
		}
	}
	for _, n := range t.nodes() {
		if err := withLinks(*n, func(nl *netlink.Handle) error { return upWithAddrs(nl, "lo", nil) }); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return nil
}

// withLinks runs fn with an rtnetlink handle of h's namespace. Only rtnetlink: a handle
// with every protocol also opens NETLINK_XFRM, which the guest's kernel lacks.
func withLinks(n node, fn func(*netlink.Handle) error) error {
	nl, err := netlink.NewHandleAt(n.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer nl.Close()
	return fn(nl)
}

func upWithAddrs(nl *netlink.Handle, dev string, addrs []netip.Addr) error {
	link, err := nl.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("interface %s: %w", dev, err)
	}
	for _, a := range addrs {
		if err := nl.AddrAdd(link, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(a, 24))}); err != nil {
			return fmt.Errorf("address %s/24 on %s: %w", a, dev, err)
		}
	}
	if err := nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", dev, err)
	}
	return nil
}

// waitLinksUp waits until every link but lo is operationally up: the kernel applies a
// carrier change (and only then lets a veth transmit) in a deferred pass up to a second
// later, and a SYN sent before it would be lost and retried a second later, which would
// land in the figures.
func (t *topology) waitLinksUp(within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, n := range t.nodes() {
		nl, err := netlink.NewHandleAt(n.ns, unix.NETLINK_ROUTE)
		if err != nil {
			return fmt.Errorf("%s: netlink: %w", n.Name, err)
		}
		for {
			down, err := linksDown(nl)
			if err != nil || len(down) == 0 {
				nl.Close()
				if err != nil {
					return err
				}
				break
			}
			if time.Now().After(deadline) {
				nl.Close()
				return fmt.Errorf("%s: links not up within %v: %s", n.Name, within, strings.Join(down, ", "))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

func linksDown(nl *netlink.Handle) ([]string, error) {
	links, err := nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var down []string
	for _, l := range links {
		if a := l.Attrs(); a.Name != "lo" && a.OperState != netlink.OperUp {
			down = append(down, a.Name+" "+a.OperState.String())
		}
	}
	return down, nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
