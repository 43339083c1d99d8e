// Package lab builds the network-namespace lab that edgegate's traffic tests and demo run in:
// a gateway namespace (where the daemon runs and programs its rules), two client namespaces
// in front of it and three backend namespaces behind it on a bridge, with in-process
// backends and clients, so real TCP and UDP cross the real kernel rules. Every namespace is
// created and deleted by the lab itself; nothing is routed or sent from the root namespace.
//
// Address plan (fixed; the daemon's embedded default manifests use it):
//
//	client-1  10.200.1.2/24 fd00:200:1::2/64 ─┐
//	                                          ├─ gateway 10.200.1.1 fd00:200:1::1 (node IP)
//	client-2  10.200.3.2/24 fd00:200:3::2/64 ─┤          10.200.3.1 fd00:200:3::1
//	                                          └─ br0     10.200.2.1 fd00:200:2::1
//	backend-1..3  10.200.2.11..13/24  fd00:200:2::11..13/64, all on br0
package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// The lab's fixed addresses.
var (
	NodeIPv4      = netip.MustParseAddr("10.200.1.1")    // the gateway's node IP, client-1's router
	NodeIPv6      = netip.MustParseAddr("fd00:200:1::1") // the gateway's node IP, client-1's router
	BridgeIPv4    = netip.MustParseAddr("10.200.2.1")    // the gateway on the backend bridge: masquerade source
	BridgeIPv6    = netip.MustParseAddr("fd00:200:2::1") // the gateway on the backend bridge: masquerade source
	Client2Router = netip.MustParseAddr("10.200.3.1")    // the gateway as client-2 sees it
)

// GatewayNodeName is the node name the daemon is started with (--hostname-override); an
// endpoint is local to the gateway only when its nodeName equals it.
const GatewayNodeName = "edgegate-gw"

// The ports every backend answers on (package whoami).
const (
	BackendTCPPort = 8080
	BackendUDPPort = 5353
)

// cmdTimeout bounds every ip/nft command the lab runs.
const cmdTimeout = 10 * time.Second

// Options adjust a lab.
type Options struct {
	// Prefix starts every namespace name (default "eg"); a random suffix makes names unique,
	// so labs of concurrent test runs never collide.
	Prefix string
}

// Host is one network namespace of the lab.
type Host struct {
	Name string     // role: "gateway", "client-1", "client-2", "backend-1" ...
	NS   string     // network namespace name, unique to this lab
	IPv4 netip.Addr // primary address; the node IP for the gateway
	IPv6 netip.Addr
	ns   netns.NsHandle
}

// Lab is one instance of the topology.
type Lab struct {
	Gateway  *Host
	Client   *Host   // client-1, inside every allowed source range
	Client2  *Host   // client-2, for loadBalancerSourceRanges that leave it out
	Backends []*Host // backend-1..3, each answering on BackendTCPPort and BackendUDPPort
	Upstream *Host   // behind the gateway's default route; forwards nothing
}

// Hosts returns every host of the lab, gateway first.
func (l *Lab) Hosts() []*Host {
	return append([]*Host{l.Gateway, l.Client, l.Client2, l.Upstream}, l.Backends...)
}

// Backend returns the backend with the given name, or nil.
func (l *Lab) Backend(name string) *Host {
	for _, b := range l.Backends {
		if b.Name == name {
			return b
		}
	}
	return nil
}

// New builds a lab, starts its in-process backends and registers its removal with t.Cleanup.
// Without root or iproute2 it skips the test, except under CI=true where it fails.
func New(t testing.TB, opts Options) *Lab {
	t.Helper()
	if reason := missingPrerequisite(); reason != "" {
		cannotBuild(t, reason)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "eg"
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	base := prefix + "-" + hex.EncodeToString(suffix) + "-"

	l := &Lab{
		Gateway:  &Host{Name: "gateway", NS: base + "gw", IPv4: NodeIPv4, IPv6: NodeIPv6},
		Client:   &Host{Name: "client-1", NS: base + "c1", IPv4: netip.MustParseAddr("10.200.1.2"), IPv6: netip.MustParseAddr("fd00:200:1::2")},
		Client2:  &Host{Name: "client-2", NS: base + "c2", IPv4: netip.MustParseAddr("10.200.3.2"), IPv6: netip.MustParseAddr("fd00:200:3::2")},
		Upstream: &Host{Name: "upstream", NS: base + "up", IPv4: netip.MustParseAddr("10.200.9.2"), IPv6: netip.MustParseAddr("fd00:200:9::2")},
	}
	for i := 1; i <= 3; i++ {
		l.Backends = append(l.Backends, &Host{
			Name: fmt.Sprintf("backend-%d", i),
			NS:   fmt.Sprintf("%sb%d", base, i),
			IPv4: netip.MustParseAddr(fmt.Sprintf("10.200.2.1%d", i)),
			IPv6: netip.MustParseAddr(fmt.Sprintf("fd00:200:2::1%d", i)),
		})
	}
	for _, h := range l.Hosts() {
		h.ns = netns.None() // not open yet: remove must not close descriptor 0
	}
	t.Cleanup(func() { l.remove(t) })

	for i, h := range l.Hosts() {
		if out, err := command("netns", "add", h.NS); err != nil {
			if i == 0 {
				// The first namespace is where missing privileges (a container without
				// CAP_SYS_ADMIN) show up: treat it like a missing prerequisite.
				cannotBuild(t, fmt.Sprintf("ip netns add: %v: %s", err, out))
			}
			t.Fatalf("ip netns add %s: %v: %s", h.NS, err, out)
		}
	}
	if err := l.wire(); err != nil {
		t.Fatalf("build lab: %v", err)
	}
	for _, h := range l.Hosts() {
		ns, err := netns.GetFromName(h.NS)
		if err != nil {
			t.Fatalf("open namespace %s: %v", h.NS, err)
		}
		h.ns = ns
	}
	if err := waitLinksUp(l.Hosts()); err != nil {
		t.Fatalf("build lab: %v", err)
	}
	for _, b := range l.Backends {
		startBackend(t, b)
	}
	t.Logf("lab %s*: gateway %s, clients %s %s, backends %s %s %s",
		base, l.Gateway.NS, l.Client.NS, l.Client2.NS, l.Backends[0].NS, l.Backends[1].NS, l.Backends[2].NS)
	return l
}

func missingPrerequisite() string {
	if os.Geteuid() != 0 {
		return "the network-namespace lab needs root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "the network-namespace lab needs iproute2's ip: " + err.Error()
	}
	return ""
}

// cannotBuild skips, or fails under CI=true where a tier that cannot run is a failure.
func cannotBuild(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("cannot build lab (CI=true, so this fails): %s", reason)
	}
	t.Skipf("cannot build lab: %s", reason)
}

// wire creates links, addresses, routes and sysctls. Links are created inside the gateway
// namespace and their peers moved straight into the other namespaces, so nothing ever
// appears in the root namespace.
func (l *Lab) wire() error {
	for _, h := range l.Hosts() {
		if err := l.sysctl(h, "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"); err != nil {
			return err
		}
	}
	// ICMP errors (rejects, unreachables) are rate-limited per peer by default: a test that
	// probes a rejected service a few times in a row would see timeouts instead.
	if err := l.sysctl(l.Gateway, "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1",
		"net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0"); err != nil {
		return err
	}
	// The gateway's uplink: a real gateway has a default route, so traffic to addresses it
	// does not translate is forwarded (and passes the FORWARD hook, where iptables mode
	// refuses services without endpoints) instead of failing the route lookup. Upstream is a
	// namespace that does not forward: what the gateway sends there goes nowhere.
	gw := []string{
		"link set lo up",
		"link add uplink type veth peer name eth0 netns " + l.Upstream.NS,
		"addr add 10.200.9.1/24 dev uplink",
		"addr add fd00:200:9::1/64 dev uplink nodad",
		"link set uplink up",
		"route add default via " + l.Upstream.IPv4.String(),
		"route add default via " + l.Upstream.IPv6.String(),
		"link add br0 type bridge",
		"addr add 10.200.2.1/24 dev br0",
		"addr add fd00:200:2::1/64 dev br0 nodad",
		"link set br0 up",
		"link add c1 type veth peer name eth0 netns " + l.Client.NS,
		"addr add 10.200.1.1/24 dev c1",
		"addr add fd00:200:1::1/64 dev c1 nodad",
		"link set c1 up",
		"link add c2 type veth peer name eth0 netns " + l.Client2.NS,
		"addr add 10.200.3.1/24 dev c2",
		"addr add fd00:200:3::1/64 dev c2 nodad",
		"link set c2 up",
	}
	for i, b := range l.Backends {
		dev := fmt.Sprintf("b%d", i+1)
		gw = append(gw,
			"link add "+dev+" type veth peer name eth0 netns "+b.NS,
			"link set "+dev+" master br0",
			"link set "+dev+" up")
	}
	if err := batch(l.Gateway, gw); err != nil {
		return err
	}
	if err := l.wireLeaf(l.Client, 24, l.Gateway.IPv4, l.Gateway.IPv6); err != nil {
		return err
	}
	if err := l.wireLeaf(l.Client2, 24, Client2Router, netip.MustParseAddr("fd00:200:3::1")); err != nil {
		return err
	}
	if err := l.wireLeaf(l.Upstream, 24, netip.MustParseAddr("10.200.9.1"), netip.MustParseAddr("fd00:200:9::1")); err != nil {
		return err
	}
	for _, b := range l.Backends {
		if err := l.wireLeaf(b, 24, BridgeIPv4, BridgeIPv6); err != nil {
			return err
		}
	}
	return nil
}

// wireLeaf addresses a leaf namespace's eth0 and routes everything via the gateway.
func (l *Lab) wireLeaf(h *Host, bits int, via4, via6 netip.Addr) error {
	return batch(h, []string{
		"link set lo up",
		fmt.Sprintf("addr add %s/%d dev eth0", h.IPv4, bits),
		fmt.Sprintf("addr add %s/64 dev eth0 nodad", h.IPv6),
		"link set eth0 up",
		"route add default via " + via4.String(),
		"route add default via " + via6.String(),
	})
}

// waitLinksUp waits until every link but lo is operationally up. The kernel applies a
// carrier change (and only then lets a veth transmit and a bridge port forward) in a
// deferred link-watch pass up to a second later; a probe sent before it is lost.
func waitLinksUp(hosts []*Host) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, h := range hosts {
		nl, err := netlink.NewHandleAt(h.ns)
		if err != nil {
			return fmt.Errorf("netlink in %s: %w", h.Name, err)
		}
		down, err := linksDown(nl)
		for err == nil && len(down) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			down, err = linksDown(nl)
		}
		nl.Close()
		if err != nil {
			return fmt.Errorf("links of %s: %w", h.Name, err)
		}
		if len(down) > 0 {
			return fmt.Errorf("links of %s not up within 5s: %s", h.Name, strings.Join(down, ", "))
		}
	}
	return nil
}

func linksDown(nl *netlink.Handle) ([]string, error) {
	links, err := nl.LinkList()
	if err != nil {
		return nil, err
	}
	var down []string
	for _, link := range links {
		a := link.Attrs()
		if a.Name != "lo" && a.OperState != netlink.OperUp {
			down = append(down, a.Name+" "+a.OperState.String())
		}
	}
	return down, nil
}

func (l *Lab) sysctl(h *Host, settings ...string) error {
	out, err := command(append([]string{"netns", "exec", h.NS, "sysctl", "-q", "-w"}, settings...)...)
	if err != nil {
		return fmt.Errorf("sysctl in %s: %w: %s", h.Name, err, out)
	}
	return nil
}

// batch runs ip commands inside h's namespace in one ip process.
func batch(h *Host, cmds []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "-n", h.NS, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -n %s -batch (%s): %w: %s", h.NS, h.Name, err, out)
	}
	return nil
}

// command runs ip with args.
func command(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	return string(out), err
}

// remove deletes every namespace this lab created. Deleting a namespace destroys its links,
// their veth peers, and every rule and conntrack entry in it.
func (l *Lab) remove(t testing.TB) {
	var errs []error
	for _, h := range l.Hosts() {
		if h.ns.IsOpen() {
			_ = h.ns.Close()
		}
		if _, err := os.Stat("/run/netns/" + h.NS); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if out, err := command("netns", "del", h.NS); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", h.NS, err, out))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("remove lab: %v", err)
	}
}

// Run runs a command inside h's namespace (ip netns exec) and returns its combined output.
func (l *Lab) Run(h *Host, argv ...string) (string, error) {
	out, err := command(append([]string{"netns", "exec", h.NS}, argv...)...)
	if err != nil {
		return out, fmt.Errorf("%s in %s: %w: %s", strings.Join(argv, " "), h.Name, err, strings.TrimSpace(out))
	}
	return out, nil
}

// Exec is Run that fails the test on error.
func (l *Lab) Exec(t testing.TB, h *Host, argv ...string) string {
	t.Helper()
	out, err := l.Run(h, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
