package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Forwarder joins connections accepted inside a host's namespace to an address dialled from
// the process's own namespace, until Close.
type Forwarder struct {
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	err    error // what ended accepting, other than Close
}

// Forward listens on listen inside h's namespace and joins each connection to a new one to
// `to`, dialled from the process's own namespace, until Close. Inside a QEMU guest this puts
// a control plane that runs on the host (reached through QEMU's guestfwd) where the lab's
// gateway expects it, at upstream's address, so the same test runs on the host and in the
// guest.
func (h *Host) Forward(listen, to string) (*Forwarder, error) {
	var ln net.Listener
	if err := h.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", listen)
		return err
	}); err != nil {
		return nil, fmt.Errorf("forward %s in %s: %w", listen, h.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Forwarder{ln: ln, cancel: cancel}
	f.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					f.err = fmt.Errorf("forward %s in %s: %w", listen, h.Name, err)
				}
				return
			}
			f.wg.Go(func() { join(ctx, in, to) })
		}
	})
	return f, nil
}

// Close stops listening and ends the joined connections. It returns what made the
// forwarder stop accepting before, if anything did.
func (f *Forwarder) Close() error {
	f.cancel()
	f.ln.Close()
	f.wg.Wait()
	return f.err
}

// join copies between in and a new connection to addr, both ways, until either side ends
// or ctx is done.
func join(ctx context.Context, in net.Conn, addr string) {
	defer in.Close()
	out, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return
	}
	defer out.Close()
	stop := context.AfterFunc(ctx, func() { in.Close(); out.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(out, in)
		_ = out.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(in, out)
	_ = in.(*net.TCPConn).CloseWrite()
	<-done
}
