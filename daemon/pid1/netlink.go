package pid1

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netlinkLinks is the LinkConfigurator of the running kernel. Its handle opens on first
// use, so a failure shows up in the network step's log, by device.
type netlinkLinks struct {
	mu sync.Mutex // a netlink handle is one socket: one request at a time
	h  *netlink.Handle
}

// handle returns the route-only handle, opening it if needed: the no-argument NewHandle
// also opens NETLINK_XFRM, which fails on kernels without xfrm. Call with mu held.
func (n *netlinkLinks) handle() (*netlink.Handle, error) {
	if n.h == nil {
		h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("netlink: %w", err)
		}
		n.h = h
	}
	return n.h, nil
}

// link returns the handle and the link named dev. Call with mu held.
func (n *netlinkLinks) link(dev string) (*netlink.Handle, netlink.Link, error) {
	h, err := n.handle()
	if err != nil {
		return nil, nil, err
	}
	l, err := h.LinkByName(dev)
	if err != nil {
		return nil, nil, fmt.Errorf("link %s: %w", dev, err)
	}
	return h, l, nil
}

var _ LinkConfigurator = (*netlinkLinks)(nil)

func (n *netlinkLinks) NICs() ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, err := n.handle()
	if err != nil {
		return nil, err
	}
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var nics []string
	for _, l := range links {
		a := l.Attrs()
		// "device" is what the kernel reports for hardware (and virtio) NICs; bridges,
		// veths, dummies and tunnels have their own kinds.
		if a.Flags&net.FlagLoopback == 0 && l.Type() == "device" {
			nics = append(nics, a.Name)
		}
	}
	return nics, nil
}

func (n *netlinkLinks) WaitLink(ctx context.Context, dev string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n.mu.Lock()
		h, err := n.handle()
		if err == nil {
			_, err = h.LinkByName(dev)
		}
		n.mu.Unlock()
		if err == nil {
			return nil
		}
		var notFound netlink.LinkNotFoundError
		if !errors.As(err, &notFound) {
			return fmt.Errorf("link %s: %w", dev, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("link %s did not appear: %w", dev, ctx.Err())
		case <-tick.C:
		}
	}
}

func (n *netlinkLinks) SetUp(dev string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, l, err := n.link(dev)
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", dev, err)
	}
	return nil
}

func (n *netlinkLinks) ReplaceAddress(dev string, addr netip.Prefix, lifetime time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, l, err := n.link(dev)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   addr.Addr().AsSlice(),
		Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen()),
	}}
	if lifetime > 0 {
		// All ones is forever to the kernel, so a longer lease saturates there.
		secs := int(min(lifetime/time.Second, math.MaxUint32))
		a.ValidLft, a.PreferedLft = secs, secs
	}
	if err := h.AddrReplace(l, a); err != nil {
		return fmt.Errorf("address %s on %s: %w", addr, dev, err)
	}
	return nil
}

func (n *netlinkLinks) ReplaceDefaultRoute(dev string, gw netip.Addr) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, l, err := n.link(dev)
	if err != nil {
		return err
	}
	dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	if gw.Is6() {
		dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	}
	r := &netlink.Route{
		LinkIndex: l.Attrs().Index,
		Dst:       &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(0, dst.Addr().BitLen())},
		Gw:        gw.AsSlice(),
	}
	if err := h.RouteReplace(r); err != nil {
		return fmt.Errorf("default route via %s on %s: %w", gw, dev, err)
	}
	return nil
}

func (n *netlinkLinks) Rename(dev, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, l, err := n.link(dev)
	if err != nil {
		return err
	}
	if err := h.LinkSetName(l, name); err != nil {
		return fmt.Errorf("rename %s to %s: %w", dev, name, err)
	}
	return nil
}

func (n *netlinkLinks) AddAltName(dev, name string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, l, err := n.link(dev)
	if err != nil {
		return err
	}
	if err := h.LinkAddAltName(l, name); err != nil {
		return fmt.Errorf("alternative name %s for %s: %w", name, dev, err)
	}
	return nil
}
