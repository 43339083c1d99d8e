package lab

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn on an OS thread that has entered h's network namespace, so sockets fn creates
// belong to h. Sockets keep their namespace for life, so they may be used from any
// goroutine afterwards. A thread that cannot be brought back to its original namespace is
// left locked: the runtime then ends it with its goroutine instead of reusing it.
func (h *Host) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: current namespace: %w", h.Name, err)
			return
		}
		defer orig.Close()
		if err := netns.Set(h.ns); err != nil {
			errc <- fmt.Errorf("enter %s: %w", h.Name, err)
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("leave %s: %w", h.Name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// DialContext dials from inside h's namespace.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}
