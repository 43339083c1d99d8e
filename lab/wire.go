package lab

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// wire creates links, addresses, routes and sysctls. Links are created inside the gateway
// namespace and their peers made straight in the other namespaces, so nothing ever
// appears in the root namespace.
func (l *Lab) wire() error {
	if err := forwardAsGateway(l.Gateway); err != nil {
		return err
	}
	gw, err := openLinks(l.Gateway)
	if err != nil {
		return err
	}
	defer gw.close()
	// The gateway's uplink: a real gateway has a default route, so traffic to addresses it
	// does not translate is forwarded (and passes the FORWARD hook, where iptables mode
	// refuses services without endpoints) instead of failing the route lookup. Upstream is a
	// namespace that does not forward: what the gateway sends there goes nowhere.
	gw.up("lo")
	gw.veth("uplink", l.Upstream)
	gw.addrs("uplink", "10.200.9.1/24", "fd00:200:9::1/64")
	gw.up("uplink")
	gw.defaultRoutes(l.Upstream.IPv4, l.Upstream.IPv6)
	gw.veth("c1", l.Client)
	gw.addrs("c1", "10.200.1.1/24", "fd00:200:1::1/64")
	gw.up("c1")
	gw.veth("c2", l.Client2)
	gw.addrs("c2", "10.200.3.1/24", "fd00:200:3::1/64")
	gw.up("c2")
	l.backendPorts(gw)
	gw.addrs("br0", "10.200.2.1/24", "fd00:200:2::1/64")
	gw.up("br0")
	if gw.err != nil {
		return gw.err
	}
	return l.wireLeaves()
}

// backendPorts makes the backend bridge br0 with a port for each backend. The ports
// hairpin, as a Kubernetes node's bridge ports do (kubelet's hairpin-veth): where
// br_netfilter is active (the development hosts build it in), an endpoint's connection to
// its own service is DNATed while bridged and must leave by the port it came in on.
func (l *Lab) backendPorts(gw *links) {
	gw.bridge("br0")
	for i, b := range l.Backends {
		dev := fmt.Sprintf("b%d", i+1)
		gw.veth(dev, b)
		gw.master(dev, "br0")
		gw.hairpin(dev)
		gw.up(dev)
	}
}

// wireLeaves addresses the clients, upstream and the backends, each routed via the
// gateway's address on its segment.
func (l *Lab) wireLeaves() error {
	leaves := []struct {
		h          *Host
		via4, via6 netip.Addr
	}{
		{l.Client, l.Gateway.IPv4, l.Gateway.IPv6},
		{l.Client2, Client2Router, netip.MustParseAddr("fd00:200:3::1")},
		{l.Upstream, netip.MustParseAddr("10.200.9.1"), netip.MustParseAddr("fd00:200:9::1")},
	}
	for _, b := range l.Backends {
		leaves = append(leaves, struct {
			h          *Host
			via4, via6 netip.Addr
		}{b, BridgeIPv4, BridgeIPv6})
	}
	for _, leaf := range leaves {
		if err := wireLeaf(leaf.h, leaf.via4, leaf.via6); err != nil {
			return err
		}
	}
	return nil
}

// forwardAsGateway makes h forward IPv4 and IPv6 as a gateway does. ICMP errors (rejects,
// unreachables) are rate-limited per peer by default: a test that probes a rejected service
// a few times in a row would see timeouts instead, so the limit is off.
func forwardAsGateway(h *Host) error {
	return h.Sysctl("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0")
}

// wireLeaf addresses a leaf namespace's eth0 (its IPv4 in a /24, its IPv6 in a /64) and
// routes everything via the given gateway addresses, if any.
func wireLeaf(h *Host, via ...netip.Addr) error {
	n, err := openLinks(h)
	if err != nil {
		return err
	}
	defer n.close()
	n.up("lo")
	n.addrs("eth0", h.IPv4.String()+"/24", h.IPv6.String()+"/64")
	n.up("eth0")
	n.defaultRoutes(via...)
	return n.err
}

// links wires one namespace through rtnetlink. The first failure sticks in err and turns
// every later step into a no-op, so a wiring reads as the list of its steps.
type links struct {
	host *Host
	nl   *netlink.Handle
	err  error
}

func openLinks(h *Host) (*links, error) {
	// Only rtnetlink: a handle with every protocol also opens NETLINK_XFRM, which the
	// firmware's kernels lack.
	nl, err := netlink.NewHandleAt(h.ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", h.Name, err)
	}
	return &links{host: h, nl: nl}, nil
}

func (n *links) close() { n.nl.Close() }

func (n *links) fail(step string, err error) {
	if err != nil && n.err == nil {
		n.err = fmt.Errorf("%s: %s: %w", n.host.Name, step, err)
	}
}

func (n *links) link(name string) netlink.Link {
	if n.err != nil {
		return nil
	}
	link, err := n.nl.LinkByName(name)
	n.fail("interface "+name, err)
	return link
}

func (n *links) up(name string) {
	if link := n.link(name); link != nil {
		n.fail("set "+name+" up", n.nl.LinkSetUp(link))
	}
}

// veth creates a veth pair: name here, eth0 in peer's namespace.
func (n *links) veth(name string, peer *Host) { _ = n.vethNamed(name, peer, "eth0") }

// vethNamed creates a veth pair: name here, peerName in peer's namespace.
func (n *links) vethNamed(name string, peer *Host, peerName string) error {
	if n.err != nil {
		return n.err
	}
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peerName, PeerNamespace: netlink.NsFd(int(peer.ns))}
	n.fail("veth "+name+" to "+peer.Name, n.nl.LinkAdd(v))
	return n.err
}

func (n *links) bridge(name string) {
	if n.err == nil {
		n.fail("bridge "+name, n.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}))
	}
}

func (n *links) master(name, master string) {
	link, m := n.link(name), n.link(master)
	if link != nil && m != nil {
		n.fail("set "+name+" master "+master, n.nl.LinkSetMaster(link, m))
	}
}

func (n *links) hairpin(name string) {
	if link := n.link(name); link != nil {
		n.fail("set "+name+" hairpin on", n.nl.LinkSetHairpin(link, true))
	}
}

// addrs adds addresses; IPv6 ones without duplicate address detection, so they are usable
// at once.
func (n *links) addrs(name string, prefixes ...string) {
	link := n.link(name)
	for _, s := range prefixes {
		if link == nil || n.err != nil {
			return
		}
		p := netip.MustParsePrefix(s)
		a := &netlink.Addr{IPNet: ipNet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		n.fail("address "+s+" on "+name, n.nl.AddrAdd(link, a))
	}
}

// AddAddrs adds addresses to h's interface dev, IPv6 ones without duplicate address
// detection.
func (h *Host) AddAddrs(dev string, prefixes ...netip.Prefix) error {
	n, err := openLinks(h)
	if err != nil {
		return err
	}
	defer n.close()
	var ss []string
	for _, p := range prefixes {
		ss = append(ss, p.String())
	}
	n.addrs(dev, ss...)
	return n.err
}

// RemoveAddrs removes addresses from h's interface dev.
func (h *Host) RemoveAddrs(dev string, prefixes ...netip.Prefix) error {
	n, err := openLinks(h)
	if err != nil {
		return err
	}
	defer n.close()
	link := n.link(dev)
	for _, p := range prefixes {
		if link != nil {
			n.fail("remove "+p.String(), n.nl.AddrDel(link, &netlink.Addr{IPNet: ipNet(p)}))
		}
	}
	return n.err
}

func (n *links) defaultRoutes(via ...netip.Addr) {
	for _, gw := range via {
		if n.err != nil {
			return
		}
		r := &netlink.Route{Gw: gw.AsSlice(), Family: unix.AF_INET}
		if gw.Is6() {
			r.Family = unix.AF_INET6
		}
		n.fail("default route via "+gw.String(), n.nl.RouteAdd(r))
	}
}

// waitLinksUp waits until every link but lo is operationally up. The kernel applies a
// carrier change (and only then lets a veth transmit and a bridge port forward) in a
// deferred link-watch pass up to a second later; a probe sent before it is lost.
func waitLinksUp(hosts []*Host) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, h := range hosts {
		n, err := openLinks(h)
		if err != nil {
			return err
		}
		down, err := linksDown(n.nl)
		for err == nil && len(down) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			down, err = linksDown(n.nl)
		}
		n.close()
		if err != nil {
			return fmt.Errorf("links of %s: %w", h.Name, err)
		}
		if len(down) > 0 {
			return fmt.Errorf("links of %s not up within 5s: %s", h.Name, strings.Join(down, ", "))
		}
	}
	return nil
}

func linksDown(nl *netlink.Handle) ([]string, error) {
	links, err := nl.LinkList()
	if err != nil {
		return nil, err
	}
	var down []string
	for _, link := range links {
		a := link.Attrs()
		// A tap has no carrier until its QEMU opens it (Options.Taps).
		if _, tap := link.(*netlink.Tuntap); a.Name != "lo" && !tap && a.OperState != netlink.OperUp {
			down = append(down, a.Name+" "+a.OperState.String())
		}
	}
	return down, nil
}
