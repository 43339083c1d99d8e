package ipvslink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/route"
)

// Netlink is the Links of the kernel, through rtnetlink. The socket is opened at first use,
// in the network namespace of the thread that uses it first, and kept.
type Netlink struct {
	mu sync.Mutex
	h  *netlink.Handle
}

var _ Links = (*Netlink)(nil)

// open opens the socket if it is not open yet; the caller holds mu.
func (n *Netlink) open() error {
	if n.h != nil {
		return nil
	}
	// NewHandle with no protocols also opens NETLINK_XFRM, which fails where xfrm is absent.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open rtnetlink: %w", err)
	}
	n.h = h
	return nil
}

// Close releases the netlink socket; a later call opens a new one.
func (n *Netlink) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.h != nil {
		n.h.Close()
		n.h = nil
	}
}

// link returns the named interface, or nil when there is none.
func (n *Netlink) link(name string) (netlink.Link, error) {
	if err := n.open(); err != nil {
		return nil, err
	}
	l, err := n.h.LinkByName(name)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	return l, nil
}

// EnsureDummy implements Links.
func (n *Netlink) EnsureDummy(name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.link(name)
	if err != nil {
		return err
	}
	if l == nil {
		if err := n.h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			return fmt.Errorf("create dummy interface %s: %w", name, err)
		}
		if l, err = n.link(name); err != nil || l == nil {
			return fmt.Errorf("dummy interface %s not found after creating it: %v", name, err)
		}
	}
	if l.Type() != "dummy" {
		return fmt.Errorf("interface %s exists and is a %s, not a dummy: not using it", name, l.Type())
	}
	// Up: the kernel takes IPv6 routes only through an interface that is up.
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := n.h.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up: %w", name, err)
		}
	}
	return nil
}

// DeleteLink implements Links.
func (n *Netlink) DeleteLink(name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.link(name)
	if err != nil || l == nil {
		return err
	}
	if err := n.h.LinkDel(l); err != nil {
		return fmt.Errorf("delete interface %s: %w", name, err)
	}
	return nil
}

func fromNetlinkAddr(a netlink.Addr) (netip.Addr, bool) {
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// Addrs implements Links: the destinations of the local routes through the interface,
// which include the local routes of addresses on it (an earlier build bound VIPs so).
func (n *Netlink) Addrs(name string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.link(name)
	if err != nil || l == nil {
		return nil, err
	}
	filter := &netlink.Route{Table: unix.RT_TABLE_LOCAL, LinkIndex: l.Attrs().Index, Type: unix.RTN_LOCAL}
	var out []netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := n.h.RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF|netlink.RT_FILTER_TYPE)
		if err != nil {
			return nil, fmt.Errorf("local routes through %s: %w", name, err)
		}
		for _, r := range rs {
			if r.Dst == nil {
				continue
			}
			ip, ok := netip.AddrFromSlice(r.Dst.IP)
			if ones, bits := r.Dst.Mask.Size(); ok && ones == bits && !ip.Unmap().IsLinkLocalUnicast() {
				out = append(out, ip.Unmap())
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// localRoute is the route that makes a VIP local: what an address on the interface would
// add to the local table, without the address. The kernel keeps an interface's addresses
// in a list it walks for every address added, so 30,000 VIPs as addresses took 10.4 s of
// kernel time on the idle development machine (10,000: 0.94 s) and minutes in a QEMU
// guest; as local routes, 30,000 take 0.35 s.
func localRoute(l netlink.Link, a netip.Addr) *netlink.Route {
	return &netlink.Route{
		LinkIndex: l.Attrs().Index,
		Dst:       &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())},
		Table:     unix.RT_TABLE_LOCAL,
		Type:      unix.RTN_LOCAL,
		Scope:     netlink.SCOPE_HOST,
		Protocol:  route.Protocol,
	}
}

// hostAddr is a VIP as an address, as an earlier build bound it: DelAddr removes those.
func hostAddr(a netip.Addr) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}}
}

// AddAddr implements Links.
func (n *Netlink) AddAddr(name string, a netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.link(name)
	if err != nil {
		return err
	}
	if l == nil {
		return fmt.Errorf("add local route %s through %s: no such interface", a, name)
	}
	if err := n.h.RouteAdd(localRoute(l, a)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add local route %s through %s: %w", a, name, err)
	}
	return nil
}

// DelAddr implements Links: the local route, or the address an earlier build added.
func (n *Netlink) DelAddr(name string, a netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.link(name)
	if err != nil || l == nil {
		return err
	}
	if err := n.h.AddrDel(l, hostAddr(a)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("remove address %s from %s: %w", a, name, err)
	}
	r := localRoute(l, a)
	r.Protocol = 0 // any: the route of an address is the kernel's
	if err := n.h.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("remove local route %s through %s: %w", a, name, err)
	}
	return nil
}

// NodeAddrs implements Links.
func (n *Netlink) NodeAddrs(exclude string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	skip := -1
	if l, err := n.link(exclude); err != nil {
		return nil, err
	} else if l != nil {
		skip = l.Attrs().Index
	}
	as, err := n.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range as {
		if ip, ok := fromNetlinkAddr(a); ok && a.LinkIndex != skip {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}
