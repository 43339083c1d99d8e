package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
)

// The benchmark's network: three namespaces it creates and removes, nothing in the root
// namespace. The apiserver's namespace holds a bridge; each proxy's namespace is joined to it
// by a veth pair that is created inside the apiserver's namespace with its peer moved straight
// into the proxy's, so no interface ever appears in the root namespace.
//
//	api  br0 10.251.0.1/24 (etcd on loopback, kube-apiserver on 10.251.0.1)
//	eg   eth0 10.251.0.2/24  edgegate
//	kp   eth0 10.251.0.3/24  kube-proxy
const (
	apiAddr = "10.251.0.1"
	netMask = "/24"
)

// topology names the namespaces of one run; the suffix keeps two runs apart.
type topology struct {
	API, EG, KP string
}

func newTopology(suffix string) topology {
	return topology{API: "egb-api-" + suffix, EG: "egb-eg-" + suffix, KP: "egb-kp-" + suffix}
}

// proxyAddr is the address of a proxy namespace on the bridge.
func (t topology) proxyAddr(ns string) string {
	if ns == t.EG {
		return "10.251.0.2"
	}
	return "10.251.0.3"
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// create makes the namespaces and links; on error, remove undoes what was made.
func (t topology) create() error {
	for _, ns := range []string{t.API, t.EG, t.KP} {
		if err := ipCmd("netns", "add", ns); err != nil {
			return err
		}
		if err := ipCmd("-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	steps := [][]string{
		{"-n", t.API, "link", "add", "br0", "type", "bridge"},
		{"-n", t.API, "addr", "add", apiAddr + netMask, "dev", "br0"},
		{"-n", t.API, "link", "set", "br0", "up"},
	}
	for i, ns := range []string{t.EG, t.KP} {
		side := fmt.Sprintf("p%d", i)
		steps = append(steps,
			[]string{"-n", t.API, "link", "add", side, "type", "veth", "peer", "name", "eth0", "netns", ns},
			[]string{"-n", t.API, "link", "set", side, "master", "br0", "up"},
			[]string{"-n", ns, "addr", "add", t.proxyAddr(ns) + netMask, "dev", "eth0"},
			[]string{"-n", ns, "link", "set", "eth0", "up"},
		)
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the namespaces; their links, rules and sockets go with them once no process
// holds them (the run has stopped its processes by then).
func (t topology) remove() error {
	var errs []string
	for _, ns := range []string{t.KP, t.EG, t.API} {
		if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
			continue // not there
		}
		if err := ipCmd("netns", "del", ns); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove namespaces: %s", strings.Join(errs, "; "))
	}
	return nil
}

// inNS runs fn on a locked OS thread inside the named namespace, so sockets and netlink
// connections fn opens belong to it; a thread that cannot return stays locked and the runtime
// discards it.
func inNS(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: current namespace: %w", name, err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter %s: %w", name, err)
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("leave %s: %w", name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// dialer dials from inside a namespace (the proxies' metrics listen on their loopback).
func dialer(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNS(name, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}
