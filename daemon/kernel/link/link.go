// Package link looks up the network interfaces of one network namespace through
// rtnetlink, for components that follow interfaces by name (the LoadBalancer heartbeats)
// without holding a netlink handle themselves. Fake stands in for it in tests.
package link

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNotFound is returned for a name no interface has (yet).
var ErrNotFound = errors.New("no such interface")

// Link is one interface as the kernel reports it now.
type Link struct {
	net.Interface
	// Up: the link carries traffic, that is its operational state is up, or unknown (as
	// drivers without carrier reporting, such as dummy and tun, say) while it is
	// administratively up.
	Up bool
}

// Links finds interfaces by name: Handle, or Fake.
type Links interface {
	ByName(name string) (Link, error)
	Close()
}

// Handle is Links over an rtnetlink socket, which stays in the network namespace it was
// opened in whatever thread asks later.
type Handle struct{ nl *netlink.Handle }

var _ Links = (*Handle)(nil)

// Open opens a Handle in the network namespace of the calling thread.
func Open() (*Handle, error) {
	// Only rtnetlink: a handle with every protocol also opens NETLINK_XFRM, which the
	// firmware's kernels lack.
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return &Handle{nl: nl}, nil
}

// ByName returns the interface called name; ErrNotFound if there is none.
func (h *Handle) ByName(name string) (Link, error) {
	l, err := h.nl.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return Link{}, fmt.Errorf("%s: %w", name, ErrNotFound)
		}
		return Link{}, fmt.Errorf("link %s: %w", name, err)
	}
	a := l.Attrs()
	return Link{
		Interface: net.Interface{Index: a.Index, MTU: a.MTU, Name: a.Name, HardwareAddr: a.HardwareAddr, Flags: a.Flags},
		Up:        a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown && a.Flags&net.FlagUp != 0,
	}, nil
}

// Close closes the netlink socket.
func (h *Handle) Close() { h.nl.Close() }
