package l2

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// netnsPath names the network namespace of the calling thread (not of the process: Go
// tests and the lab move single threads between namespaces).
const netnsPath = "/proc/thread-self/ns/net"

// netnsPin holds the network namespace a Namespace serves. Sockets belong to the
// namespace of the thread that opens them, and interface names resolve there, so every
// socket and interface lookup runs on a thread inside it, whichever goroutine asks: a
// retry from the announcer's Run can never open a socket on a same-named interface of
// another namespace.
type netnsPin struct {
	fd       int
	dev, ino uint64
}

// pinNetns opens the network namespace of the calling thread.
func pinNetns() (*netnsPin, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", netnsPath, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat %s: %w", netnsPath, err)
	}
	return &netnsPin{fd: fd, dev: st.Dev, ino: st.Ino}, nil
}

// do runs fn on a locked OS thread inside the pinned namespace. A thread already there
// (the daemon's case: it has one namespace) is used as it is, which needs no privilege;
// any other enters the namespace for fn and leaves it afterwards. A thread that cannot
// leave stays locked, so the runtime ends it with its goroutine instead of reusing it.
func (p *netnsPin) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		here, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open %s: %w", netnsPath, err)
			return
		}
		defer unix.Close(here)
		var st unix.Stat_t
		if err := unix.Fstat(here, &st); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("stat %s: %w", netnsPath, err)
			return
		}
		if st.Dev == p.dev && st.Ino == p.ino {
			err := fn()
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		if err := unix.Setns(p.fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter the announcer's network namespace: %w", err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(here, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(fnErr, fmt.Errorf("leave the announcer's network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// close releases the pinned namespace.
func (p *netnsPin) close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}
