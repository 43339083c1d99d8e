package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/edgegate/edgegate/lab"
)

// The benchmark's network: namespaces the run creates and removes, nothing in the root
// namespace. The apiserver's namespace holds a bridge; each proxy run gets a fresh namespace,
// joined to the bridge by a veth pair created inside the apiserver's namespace with its peer
// moved straight into the proxy's, so no interface ever appears in the root namespace and no
// run sees the rules of the one before.
//
//	api  br0 10.251.0.1/24 (etcd on loopback, kube-apiserver on 10.251.0.1)
//	eg   eth0 10.251.0.2/24  edgegate (one namespace per run)
//	kp   eth0 10.251.0.3/24  kube-proxy (one namespace per run)
//
// Namespaces are made with ip(8): package lab creates its own with unexported helpers only;
// once made, lab.HostIn gives the harness lab's helpers to run and dial inside them.
const (
	apiAddr = "10.251.0.1"
	netMask = "/24"
)

// topology names the namespaces of one harness process; the suffix keeps two apart.
type topology struct {
	API    string
	suffix string
	runs   int
	live   map[string]*proxyNS // made and not yet removed
}

func newTopology(suffix string) *topology {
	return &topology{API: "egb-api-" + suffix, suffix: suffix, live: map[string]*proxyNS{}}
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// create makes the apiserver's namespace and bridge; on error, remove undoes what was made.
func (t *topology) create() error {
	for _, s := range [][]string{
		{"netns", "add", t.API},
		{"-n", t.API, "link", "set", "lo", "up"},
		{"-n", t.API, "link", "add", "br0", "type", "bridge"},
		{"-n", t.API, "addr", "add", apiAddr + netMask, "dev", "br0"},
		{"-n", t.API, "link", "set", "br0", "up"},
	} {
		if err := ipCmd(s...); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the apiserver's namespace and any proxy namespace a failed run left.
func (t *topology) remove() error {
	var errs []error
	for _, p := range t.live {
		errs = append(errs, t.removeProxy(p))
	}
	return errors.Join(append(errs, removeNS(t.API))...)
}

func removeNS(name string) error {
	if _, err := os.Stat(filepath.Join("/run/netns", name)); err != nil {
		return nil // not there
	}
	return ipCmd("netns", "del", name)
}

// proxyNS is one run's namespace.
type proxyNS struct {
	Name string
	Addr string
	Host *lab.Host // lab's helpers (Start, DialContext) inside it
	h    netns.NsHandle
	port string // the veth's end on the bridge
}

// addProxy makes a fresh namespace on the bridge with addr, for one run of role ("eg", "kp").
func (t *topology) addProxy(role, addr string) (*proxyNS, error) {
	t.runs++
	p := &proxyNS{
		Name: fmt.Sprintf("egb-%s%d-%s", role, t.runs, t.suffix),
		Addr: addr,
		port: fmt.Sprintf("p%d", t.runs),
		h:    netns.None(),
	}
	t.live[p.Name] = p
	steps := [][]string{
		{"netns", "add", p.Name},
		{"-n", p.Name, "link", "set", "lo", "up"},
		{"-n", t.API, "link", "add", p.port, "type", "veth", "peer", "name", "eth0", "netns", p.Name},
		{"-n", t.API, "link", "set", p.port, "master", "br0", "up"},
		{"-n", p.Name, "addr", "add", addr + netMask, "dev", "eth0"},
		{"-n", p.Name, "link", "set", "eth0", "up"},
		// The run before used the same address from another MAC.
		{"-n", t.API, "neigh", "flush", "dev", "br0"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			_ = t.removeProxy(p)
			return nil, err
		}
	}
	h, err := netns.GetFromName(p.Name)
	if err != nil {
		_ = t.removeProxy(p)
		return nil, fmt.Errorf("open namespace %s: %w", p.Name, err)
	}
	p.h = h
	p.Host = lab.HostIn(role, h)
	return p, nil
}

// removeProxy deletes a run's namespace once its processes are gone, and waits until its
// veth left the bridge: the kernel tears the namespace down, rules and all, in the
// background, which after a large ruleset takes seconds of CPU the next run should not share.
func (t *topology) removeProxy(p *proxyNS) error {
	if p.h.IsOpen() {
		_ = p.h.Close()
	}
	if err := removeNS(p.Name); err != nil {
		return err
	}
	delete(t.live, p.Name)
	const patience = time.Minute
	for end := time.Now().Add(patience); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if ipCmd("-n", t.API, "link", "show", p.port) != nil {
			return nil
		}
	}
	// Not fatal: the next run's veth has a name of its own.
	progress("warning: veth %s in %s still there %v after namespace %s was deleted", p.port, t.API, patience, p.Name)
	return nil
}
