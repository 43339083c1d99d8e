package lab

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Site is a bare-metal site for LoadBalancer IP tests: a client and N gateways on one L2
// segment (the "front" bridge), whose LoadBalancer IPs the gateways announce with ARP and
// NDP; the gateways' second NICs and three backends on another segment (the "back"
// bridge); an upstream host on the front segment for the control plane. Both bridges live
// in a switch namespace of their own, so a gateway's link can be cut at its switch port.
//
//	front 10.210.0.0/24 fd00:210::/64  gateway-N .N ::N, client .100 ::100, upstream .250 ::250
//	      LoadBalancer IPs: SitePool (10.210.0.200-10.210.0.219, fd00:210::200-fd00:210::21f)
//	back  10.210.1.0/24 fd00:210:1::/64 gateway-N .N ::N, backend-N .1N ::1N
//
// The backends have no route beyond the back segment: the gateways masquerade what they
// forward to them (externalTrafficPolicy Cluster), as a dedicated ingress node does.
type Site struct {
	Switch   *Host
	Client   *Host
	Upstream *Host
	Gateways []*Host
	Backends []*Host
	built    *built
}

// SitePool4 and SitePool6 are the LoadBalancer IP ranges on the front segment.
var (
	SitePool4 = [2]netip.Addr{netip.MustParseAddr("10.210.0.200"), netip.MustParseAddr("10.210.0.219")}
	SitePool6 = [2]netip.Addr{netip.MustParseAddr("fd00:210::200"), netip.MustParseAddr("fd00:210::21f")}
)

// SiteOptions adjust a site.
type SiteOptions struct {
	Prefix   string // namespace name prefix (default "egs")
	Gateways int    // default 2
}

// GatewayPort is the name of gateway i's port (0-based) on the front bridge, for CutLink.
func GatewayPort(i int) string { return fmt.Sprintf("f-gw%d", i+1) }

// NewSite builds a site; Close removes it. Where the machine cannot build one, the error
// wraps ErrPrerequisite.
func NewSite(opts SiteOptions) (*Site, error) {
	if err := CheckPrerequisite(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = "egs"
	}
	if opts.Gateways == 0 {
		opts.Gateways = 2
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	base := opts.Prefix + "-" + hex.EncodeToString(suffix) + "-"
	host := func(name, ns, v4, v6 string) *Host {
		h := &Host{Name: name, NS: base + ns, ns: netns.None()}
		if v4 != "" {
			h.IPv4, h.IPv6 = netip.MustParseAddr(v4), netip.MustParseAddr(v6)
		}
		return h
	}
	s := &Site{
		Switch:   host("switch", "sw", "", ""),
		Client:   host("client", "c", "10.210.0.100", "fd00:210::100"),
		Upstream: host("upstream", "up", "10.210.0.250", "fd00:210::250"),
	}
	for i := 1; i <= opts.Gateways; i++ {
		s.Gateways = append(s.Gateways, host(fmt.Sprintf("gateway-%d", i), fmt.Sprintf("gw%d", i),
			fmt.Sprintf("10.210.0.%d", i), fmt.Sprintf("fd00:210::%d", i)))
	}
	for i := 1; i <= 3; i++ {
		s.Backends = append(s.Backends, host(fmt.Sprintf("backend-%d", i), fmt.Sprintf("b%d", i),
			fmt.Sprintf("10.210.1.1%d", i), fmt.Sprintf("fd00:210:1::1%d", i)))
	}
	var err error
	if s.built, err = build("site", s.Hosts(), s.wire, s.Backends); err != nil {
		return nil, err
	}
	return s, nil
}

// Close stops the site's backends and deletes its namespaces.
func (s *Site) Close() error { return s.built.close() }

// Hosts returns every host of the site, switch first.
func (s *Site) Hosts() []*Host {
	out := []*Host{s.Switch, s.Client, s.Upstream}
	out = append(out, s.Gateways...)
	return append(out, s.Backends...)
}

// GatewayBackIPv4 is gateway i's (0-based) address on the back segment.
func GatewayBackIPv4(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 210, 1, byte(i + 1)}) }

func (s *Site) wire() error {
	sw, err := openLinks(s.Switch)
	if err != nil {
		return err
	}
	defer sw.close()
	sw.up("lo")
	// Multicast snooping would hold the gateways' heartbeats back until a querier shows
	// up: a site's access switch floods them.
	off := false
	for _, br := range []string{"front", "back"} {
		if sw.err == nil {
			sw.fail("bridge "+br, sw.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br}, MulticastSnooping: &off}))
		}
		sw.up(br)
	}
	port := func(name, bridge string, h *Host) {
		sw.veth(name, h)
		sw.master(name, bridge)
		sw.up(name)
	}
	port("f-client", "front", s.Client)
	port("f-up", "front", s.Upstream)
	for i, g := range s.Gateways {
		port(GatewayPort(i), "front", g)
	}
	for i, b := range s.Backends {
		port(fmt.Sprintf("b-b%d", i+1), "back", b)
	}
	if sw.err != nil {
		return sw.err
	}
	// The gateways' back NICs: a second veth into each, named eth1 there.
	for i, g := range s.Gateways {
		if err := sw.vethNamed(fmt.Sprintf("b-gw%d", i+1), g, "eth1"); err != nil {
			return err
		}
		sw.master(fmt.Sprintf("b-gw%d", i+1), "back")
		sw.up(fmt.Sprintf("b-gw%d", i+1))
	}
	if sw.err != nil {
		return sw.err
	}
	for _, h := range append([]*Host{s.Client, s.Upstream}, s.Backends...) {
		if err := wireLeaf(h); err != nil {
			return err
		}
	}
	for i, g := range s.Gateways {
		if err := forwardAsGateway(g); err != nil {
			return err
		}
		n, err := openLinks(g)
		if err != nil {
			return err
		}
		n.up("lo")
		n.addrs("eth0", g.IPv4.String()+"/24", g.IPv6.String()+"/64")
		n.up("eth0")
		n.addrs("eth1", GatewayBackIPv4(i).String()+"/24", fmt.Sprintf("fd00:210:1::%d/64", i+1))
		n.up("eth1")
		n.close()
		if n.err != nil {
			return n.err
		}
	}
	return nil
}

// CutLink takes gateway i's (0-based) front switch port down, or up again: the gateway
// stays up but nothing reaches it on the front segment, nor its heartbeats the others.
func (s *Site) CutLink(i int, cut bool) error {
	n, err := openLinks(s.Switch)
	if err != nil {
		return err
	}
	defer n.close()
	link := n.link(GatewayPort(i))
	if n.err != nil {
		return n.err
	}
	if cut {
		return n.nl.LinkSetDown(link)
	}
	return n.nl.LinkSetUp(link)
}
