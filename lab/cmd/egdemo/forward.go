package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/edgegate/edgegate/lab/nsthread"
)

// runForward makes a page inside the lab reachable from the host's loopback: it listens on
// -listen (a loopback address of the root namespace) and opens every connection to -to from
// inside -netns, so the host itself never sends a packet anywhere but to loopback. It runs
// until a signal ends the demo.
func runForward(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("forward", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "loopback address:port to listen on")
	nsName := fs.String("netns", "", "network namespace to connect from (required)")
	to := fs.String("to", "", "address:port to connect to, inside -netns (required)")
	_ = fs.Parse(args)
	if *nsName == "" || *to == "" {
		return errors.New("forward: -netns and -to are required")
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("forward: -listen: %w", err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("forward: -listen %s: only a loopback address", *listen)
	}
	target, err := netns.GetFromName(*nsName)
	if err != nil {
		return fmt.Errorf("forward: netns %s: %w", *nsName, err)
	}
	defer target.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("forward: %w", err)
	}
	context.AfterFunc(ctx, func() { ln.Close() })
	fmt.Printf("egdemo: forwarding %s to %s in netns %s\n", *listen, *to, *nsName)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("forward: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			u, err := dialIn(target, *to)
			if err != nil {
				fmt.Printf("egdemo: forward: %v\n", err)
				return
			}
			defer u.Close()
			stop := context.AfterFunc(ctx, func() { c.Close(); u.Close() })
			defer stop()
			pipe(c, u)
		}()
	}
}

// dialIn connects to addr from inside ns: the socket is made on a thread that has entered
// ns and keeps belonging to it afterwards.
func dialIn(ns netns.NsHandle, addr string) (net.Conn, error) {
	var c net.Conn
	err := nsthread.Run(ns, "dial in the netns", func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

// pipe copies both ways until either side ends.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	<-done
	<-done
}
