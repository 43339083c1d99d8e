// Package lab builds the network-namespace lab that edgegate's traffic tests and demo run in:
// a gateway namespace (where the daemon runs and programs its rules), two client namespaces
// in front of it and three backend namespaces behind it on a bridge, with in-process
// backends and clients, so real TCP and UDP cross the real kernel rules. Every namespace is
// created and deleted by the lab itself; nothing is routed or sent from the root namespace.
// The lab is wired with netlink and runs the daemon by forking it from a thread inside the
// gateway namespace, so it needs no program besides the daemon: the same lab runs on a
// development host and inside the firmware booted under QEMU (where IPVS is). Tests use it
// through package labtest, which ties what it builds to the test; lab itself returns errors
// and does not import testing, so commands can link it.
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
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/vishvananda/netns"
)

// The lab's fixed addresses.
var (
	NodeIPv4      = netip.MustParseAddr("10.200.1.1")    // the gateway's node IP, client-1's router
	NodeIPv6      = netip.MustParseAddr("fd00:200:1::1") // the gateway's node IP, client-1's router
	BridgeIPv4    = netip.MustParseAddr("10.200.2.1")    // the gateway on the backend bridge: masquerade source
	BridgeIPv6    = netip.MustParseAddr("fd00:200:2::1") // the gateway on the backend bridge: masquerade source
	Client2Router = netip.MustParseAddr("10.200.3.1")    // the gateway as client-2 sees it
	UpstreamIPv4  = netip.MustParseAddr("10.200.9.2")    // upstream: where a control plane listens
)

// GatewayNodeName is the node name the daemon is started with (--hostname-override); an
// endpoint is local to the gateway only when its nodeName equals it.
const GatewayNodeName = "edgegate-gw"

// The ports every backend answers on (package whoami).
const (
	BackendTCPPort = 8080
	BackendUDPPort = 5353
)

// cmdTimeout bounds every command the lab runs in a namespace (Run).
const cmdTimeout = 10 * time.Second

// Options adjust a lab.
type Options struct {
	// Prefix starts every namespace name (default "eg"); a random suffix makes names unique,
	// so labs of concurrent test runs never collide.
	Prefix string
	// Taps makes the gateway namespace a switch for a gateway that runs elsewhere, a QEMU
	// guest whose NICs are the taps TapNames (taps.go): the guest takes the gateway's
	// addresses itself, and the namespace forwards nothing and has no address.
	Taps bool
}

// Host is one network namespace of the lab.
type Host struct {
	Name string     // role: "gateway", "client-1", "client-2", "backend-1" ...
	NS   string     // network namespace name, unique to this lab
	IPv4 netip.Addr // primary address; the node IP for the gateway
	IPv6 netip.Addr
	ns   netns.NsHandle
	lab  *Lab // nil for HostIn's hosts
}

// Lab is one instance of the topology.
type Lab struct {
	Gateway  *Host
	Client   *Host   // client-1, inside every allowed source range
	Client2  *Host   // client-2, for loadBalancerSourceRanges that leave it out
	Backends []*Host // backend-1..3, each answering on BackendTCPPort and BackendUDPPort
	Upstream *Host   // behind the gateway's default route; forwards nothing
	built    *built
	taps     bool // Options.Taps: Gateway is a switch
}

// HostIn is a Host for a network namespace the lab did not make, such as a QEMU guest's
// root namespace, for reading its kernel state or running code in it. The caller keeps
// ns open meanwhile.
func HostIn(name string, ns netns.NsHandle) *Host { return &Host{Name: name, ns: ns} }

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

// ErrPrerequisite says that this machine cannot build a lab: the lab needs root, and the
// right to make network namespaces (which a container may lack).
var ErrPrerequisite = errors.New("missing prerequisite")

// New builds a lab and starts its in-process backends; Close removes it. Where the machine
// cannot build one, the error wraps ErrPrerequisite.
func New(opts Options) (*Lab, error) {
	if err := CheckPrerequisite(); err != nil {
		return nil, err
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = "eg"
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	base := prefix + "-" + hex.EncodeToString(suffix) + "-"

	l := &Lab{
		taps:     opts.Taps,
		Gateway:  &Host{Name: "gateway", NS: base + "gw", IPv4: NodeIPv4, IPv6: NodeIPv6},
		Client:   &Host{Name: "client-1", NS: base + "c1", IPv4: netip.MustParseAddr("10.200.1.2"), IPv6: netip.MustParseAddr("fd00:200:1::2")},
		Client2:  &Host{Name: "client-2", NS: base + "c2", IPv4: netip.MustParseAddr("10.200.3.2"), IPv6: netip.MustParseAddr("fd00:200:3::2")},
		Upstream: &Host{Name: "upstream", NS: base + "up", IPv4: UpstreamIPv4, IPv6: netip.MustParseAddr("fd00:200:9::2")},
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
		h.lab = l
	}
	var err error
	wire := l.wire
	if l.taps {
		wire = l.wireSwitch
	}
	if l.built, err = build("lab", l.Hosts(), wire, l.Backends); err != nil {
		return nil, err
	}
	return l, nil
}

// Close stops the lab's backends and deletes its namespaces.
func (l *Lab) Close() error { return l.built.close() }

// CheckPrerequisite reports what New and NewSite can tell before they try: nil, or why this
// machine cannot build a lab (wrapping ErrPrerequisite).
func CheckPrerequisite() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the network-namespace lab needs root", ErrPrerequisite)
	}
	return nil
}

// built is what build made, for close to remove: namespaces and the backends' servers.
type built struct {
	what  string
	hosts []*Host
	stops []func() error
}

// build creates the namespaces of hosts, turns off IPv6 duplicate address detection in
// them, wires them, waits until every link is up and starts the backends. On error it removes what it made.
func build(what string, hosts []*Host, wire func() error, backends []*Host) (b *built, err error) {
	b = &built{what: what, hosts: hosts}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.close())
		}
	}()
	for i, h := range hosts {
		ns, err := newNamespace(h.NS)
		if err != nil {
			if i == 0 {
				// The first namespace is where missing privileges (a container without
				// CAP_SYS_ADMIN) show up: treat it like a missing prerequisite.
				return b, fmt.Errorf("%w: %w", ErrPrerequisite, err)
			}
			return b, err
		}
		h.ns = ns
	}
	// Without duplicate address detection, an IPv6 address is usable as soon as it is added.
	for _, h := range hosts {
		if err := h.Sysctl("net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"); err != nil {
			return b, fmt.Errorf("build %s: %w", what, err)
		}
	}
	if err := wire(); err != nil {
		return b, fmt.Errorf("build %s: %w", what, err)
	}
	if err := waitLinksUp(hosts); err != nil {
		return b, fmt.Errorf("build %s: %w", what, err)
	}
	for _, h := range backends {
		stop, err := serveBackend(h)
		if err != nil {
			return b, err
		}
		b.stops = append(b.stops, stop)
	}
	return b, nil
}

// close stops the backends and deletes every namespace. Deleting a namespace destroys its
// links, their veth peers, and every rule and conntrack entry in it.
func (b *built) close() error {
	var errs []error
	for _, stop := range b.stops {
		errs = append(errs, stop())
	}
	b.stops = nil
	for _, h := range b.hosts {
		if h.ns.IsOpen() {
			_ = h.ns.Close()
		}
		errs = append(errs, deleteNamespace(h.NS))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove %s: %w", b.what, err)
	}
	return nil
}

// Lab returns the lab h belongs to: nil for HostIn's hosts and a site's.
func (h *Host) Lab() *Lab { return h.lab }

// Run runs a program inside h's namespace and returns its combined output. The program
// is looked up in the caller's PATH; it gets cmdTimeout.
func (l *Lab) Run(h *Host, argv ...string) (string, error) { return h.Run(argv...) }

// Run runs a program inside h's namespace and returns its combined output, as Lab.Run.
func (h *Host) Run(argv ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := h.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s in %s: %w: %s", strings.Join(argv, " "), h.Name, err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}
