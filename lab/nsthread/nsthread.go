// Package nsthread runs code inside a network namespace, on an OS thread of its own, for
// the lab and its cluster alike.
package nsthread

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Run runs fn on a locked OS thread of its own, inside the network namespace ns when that
// is open, and moves the thread back to its original namespace afterwards (fn may have
// moved it, too), so that sockets fn creates belong to ns; a socket keeps its namespace for
// life and may then be used from any goroutine. A thread that cannot be brought back is left
// locked: the runtime then ends it with its goroutine instead of reusing it. what names the
// namespace in errors.
func Run(ns netns.NsHandle, what string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("%s: current namespace: %w", what, err)
			return
		}
		defer orig.Close()
		if ns.IsOpen() {
			if err := netns.Set(ns); err != nil {
				errc <- fmt.Errorf("%s: enter: %w", what, err)
				return
			}
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("%s: leave: %w", what, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}
