package lab

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Forward listens on listen inside h's namespace and joins each connection to a new one to
// `to`, dialled from the test process's own namespace, until the test ends. Inside a QEMU
// guest this puts a control plane that runs on the host (reached through QEMU's guestfwd)
// where the lab's gateway expects it, at upstream's address, so the same test runs on the
// host and in the guest.
func (h *Host) Forward(t testing.TB, listen, to string) {
	t.Helper()
	var ln net.Listener
	if err := h.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", listen)
		return err
	}); err != nil {
		t.Fatalf("forward %s in %s: %v", listen, h.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Logf("forward %s in %s: %v", listen, h.Name, err)
				}
				return
			}
			wg.Go(func() { join(ctx, in, to) })
		}
	})
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
