package fastpath

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Links lists the interfaces of the calling thread's network namespace.
func (Kernel) Links() ([]Link, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink: %w", err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := make([]Link, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		out = append(out, Link{Name: a.Name, Type: l.Type(), Up: a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperDown,
			Loopback: a.Flags&net.FlagLoopback != 0})
	}
	return out, nil
}
