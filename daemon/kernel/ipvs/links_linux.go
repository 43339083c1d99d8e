package ipvs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
	// Up, so that IPv6 addresses on it are usable; the VIPs are /32 and /128, so no
	// subnet route ever points at it.
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

// Addrs implements Links.
func (n *Netlink) Addrs(name string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, err := n.link(name)
	if err != nil || l == nil {
		return nil, err
	}
	as, err := n.h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", name, err)
	}
	var out []netip.Addr
	for _, a := range as {
		if ip, ok := fromNetlinkAddr(a); ok && !ip.IsLinkLocalUnicast() {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func hostAddr(a netip.Addr) *netlink.Addr {
	na := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}}
	if a.Is6() {
		// No duplicate address detection: a VIP is usable at once, and the same VIP on
		// every node is intended. No prefix route either: the local route is enough.
		na.Flags = unix.IFA_F_NODAD | unix.IFA_F_NOPREFIXROUTE
	}
	return na
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
		return fmt.Errorf("add address %s to %s: no such interface", a, name)
	}
	if err := n.h.AddrAdd(l, hostAddr(a)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add address %s to %s: %w", a, name, err)
	}
	return nil
}

// DelAddr implements Links.
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
