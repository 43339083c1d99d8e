// Package route is edgegate's adapter over the kernel's routing table (rtnetlink): it owns
// the routes tagged with its protocol and never touches another.
package route

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

// Protocol tags every route edgegate makes (rtm_protocol; ip route shows "proto 69").
// Only routes with it are listed, replaced or deleted, so that no other route is ever
// touched.
const Protocol = 0x45

// Kernel is the RouteTable of the kernel's routing table, through rtnetlink.
type Kernel struct {
	table int

	mu sync.Mutex
	h  *netlink.Handle
}

var _ Table = (*Kernel)(nil)

// NewKernel opens rtnetlink in the calling thread's network namespace for the given
// routing table (0 means main).
func New(table int) (*Kernel, error) {
	// NewHandle with no protocols also opens NETLINK_XFRM, which fails where xfrm is absent.
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink: %w", err)
	}
	if table == 0 {
		table = unix.RT_TABLE_MAIN
	}
	return &Kernel{table: table, h: h}, nil
}

// Close releases the netlink socket. The routes stay.
func (k *Kernel) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.h.Close()
}

// List implements Table.
func (k *Kernel) List() ([]Route, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.list()
}

func (k *Kernel) list() ([]Route, error) {
	var out []Route
	filter := &netlink.Route{Table: k.table, Protocol: Protocol}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := k.h.RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range rs {
			out = append(out, fromNetlink(r))
		}
	}
	slices.SortFunc(out, Compare)
	return out, nil
}

func fromNetlink(r netlink.Route) Route {
	var rt Route
	if r.Dst != nil {
		a, _ := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		rt.Dst = netip.PrefixFrom(a.Unmap(), ones)
	}
	if a, ok := netip.AddrFromSlice(r.Gw); ok {
		rt.Via = a.Unmap()
	}
	return rt
}

func (k *Kernel) toNetlink(r Route) *netlink.Route {
	return &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Gw:       r.Via.AsSlice(),
		Protocol: Protocol,
		Table:    k.table,
	}
}

// Apply implements Table. A destination that already has a route of someone else's
// (same prefix and metric) is reported and left alone.
func (k *Kernel) Apply(want []Route) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	have, err := k.list()
	if err != nil {
		return err
	}
	mine := map[netip.Prefix]Route{}
	for _, r := range have {
		mine[r.Dst] = r
	}
	wanted := map[netip.Prefix]bool{}
	var errs []error
	for _, r := range want {
		wanted[r.Dst] = true
		cur, ok := mine[r.Dst]
		switch {
		case ok && cur.Via == r.Via:
		case ok:
			// The route at this prefix is ours: replacing it cannot clobber another's.
			if err := k.h.RouteReplace(k.toNetlink(r)); err != nil {
				errs = append(errs, fmt.Errorf("replace route %s: %w", r, err))
			}
		default:
			err := k.h.RouteAdd(k.toNetlink(r))
			if errors.Is(err, unix.EEXIST) {
				err = errors.New("a route to it that is not edgegate's exists; left alone")
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("add route %s: %w", r, err))
			}
		}
	}
	for _, r := range have {
		if wanted[r.Dst] {
			continue
		}
		// The protocol in the request makes the kernel delete only a route of ours.
		if err := k.h.RouteDel(k.toNetlink(r)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}
