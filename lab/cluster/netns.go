package cluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netns"

	"github.com/edgegate/edgegate/lab/nsthread"
)

// namespace is where the cluster's processes live and its sockets are made: a named network
// namespace (ip netns), or the test's own when the name is empty.
type namespace string

// do runs fn on an OS thread inside the namespace, so that sockets fn creates belong to it;
// a socket keeps its namespace for life and may then be used from any goroutine. A thread
// that cannot return to its original namespace stays locked, so the runtime discards it.
func (ns namespace) do(fn func() error) error {
	if ns == "" {
		return fn()
	}
	target, err := netns.GetFromName(string(ns))
	if err != nil {
		return fmt.Errorf("enter %s: %w", ns, err)
	}
	defer target.Close()
	return nsthread.Run(target, string(ns), fn)
}

// dial connects from inside the namespace; it is the Dial of every client this package makes,
// so a test in the root namespace reaches an apiserver that listens only inside the gateway's.
func (ns namespace) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// freePorts returns one free TCP port on each of addrs, all distinct even where addresses
// repeat. They are free when returned, not reserved: the processes bind them right after.
func (ns namespace) freePorts(addrs ...netip.Addr) ([]uint16, error) {
	var ports []uint16
	err := ns.do(func() error {
		var held []net.Listener
		defer func() {
			for _, l := range held {
				l.Close()
			}
		}()
		for _, addr := range addrs {
			l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
			if err != nil {
				return fmt.Errorf("find a free port on %s: %w", addr, err)
			}
			held = append(held, l)
			ports = append(ports, uint16(l.Addr().(*net.TCPAddr).Port))
		}
		return nil
	})
	return ports, err
}
