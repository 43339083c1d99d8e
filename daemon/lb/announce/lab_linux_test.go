package announce

import (
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The lab: two L2 segments, A and B, each a bridge in a switch namespace.
//
//	cliA  eth0 10.77.0.10/24 2001:db8:77::10/64 ── segment A ── gw1 ga, gw2 ga
//	cliB  eth0 10.77.0.20/24 2001:db8:77::20/64 ── segment B ── gw1 gb
//
// Both clients hold the same prefix, so either resolves any test address on its own
// segment. The gateways have no addresses at all: the announcer needs none. Test
// addresses are .100 and up (::100 and up).

var nsSeq atomic.Int32

// host is one network namespace of the lab.
type host struct {
	name string
	ns   netns.NsHandle
	nl   *netlink.Handle
}

func newHost(t *testing.T, role string) *host {
	t.Helper()
	kerneltest.NeedRoot(t)
	h := &host{name: fmt.Sprintf("egan%s%d-%d", role, os.Getpid()%100000, nsSeq.Add(1))}
	err := onThread(func() error {
		var err error
		// NewNamed moves this thread into the namespace; onThread throws the thread away.
		h.ns, err = netns.NewNamed(h.name)
		return err
	})
	if err != nil {
		t.Fatalf("namespace %s: %v", h.name, err)
	}
	if h.nl, err = netlink.NewHandleAt(h.ns, unix.NETLINK_ROUTE); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.nl.Close()
		h.ns.Close()
		_ = netns.DeleteNamed(h.name)
	})
	// No duplicate address detection on the interfaces to come: a tentative link-local
	// address keeps the kernel from sending the unicast probes TestUnreachabilityProbes
	// needs (ndisc_send_ns wants a usable link-local source).
	h.sysctl(t, "net.ipv6.conf.default.accept_dad=0")
	return h
}

// onThread runs fn on a locked thread that ends with it, so whatever fn does to the
// thread's namespace never reaches another goroutine.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- fn()
	}()
	return <-errc
}

// do runs fn on a thread inside h's namespace.
func (h *host) do(t testing.TB, fn func() error) {
	t.Helper()
	err := onThread(func() error {
		if err := netns.Set(h.ns); err != nil {
			return err
		}
		return fn()
	})
	if err != nil {
		t.Fatalf("in %s: %v", h.name, err)
	}
}

func (h *host) link(t testing.TB, name string) netlink.Link {
	t.Helper()
	l, err := h.nl.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: link %s: %v", h.name, name, err)
	}
	return l
}

func (h *host) mac(t testing.TB, name string) net.HardwareAddr {
	return h.link(t, name).Attrs().HardwareAddr
}

func (h *host) sysctl(t testing.TB, settings ...string) {
	h.do(t, func() error {
		for _, s := range settings {
			name, value, _ := strings.Cut(s, "=")
			file := filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
			if err := os.WriteFile(file, []byte(value), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
}

type lab struct {
	t          *testing.T
	sw         *host
	cliA, cliB *host
	gw1, gw2   *host
	segA, segB string
	wireNo     int
}

func newLab(t *testing.T) *lab {
	l := &lab{t: t, segA: "brA", segB: "brB"}
	l.sw = newHost(t, "sw")
	for _, br := range []string{l.segA, l.segB} {
		if err := l.sw.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br}}); err != nil {
			t.Fatalf("bridge %s: %v", br, err)
		}
		if err := l.sw.nl.LinkSetUp(l.sw.link(l.t, br)); err != nil {
			t.Fatal(err)
		}
	}
	l.cliA, l.cliB = newHost(t, "ca"), newHost(t, "cb")
	l.gw1, l.gw2 = newHost(t, "g1"), newHost(t, "g2")
	l.wire(l.cliA, "eth0", l.segA)
	l.wire(l.cliB, "eth0", l.segB)
	l.wire(l.gw1, "ga", l.segA)
	l.wire(l.gw1, "gb", l.segB)
	l.wire(l.gw2, "ga", l.segA)
	l.client(l.cliA, "10.77.0.10/24", "2001:db8:77::10/64")
	l.client(l.cliB, "10.77.0.20/24", "2001:db8:77::20/64")
	return l
}

// wire plugs a new interface name of h into segment seg.
func (l *lab) wire(h *host, name, seg string) {
	l.t.Helper()
	l.wireNo++
	port := fmt.Sprintf("p%d", l.wireNo)
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port}, PeerName: name, PeerNamespace: netlink.NsFd(int(h.ns))}
	if err := l.sw.nl.LinkAdd(v); err != nil {
		l.t.Fatalf("veth %s to %s: %v", port, h.name, err)
	}
	if err := l.sw.nl.LinkSetMaster(l.sw.link(l.t, port), l.sw.link(l.t, seg)); err != nil {
		l.t.Fatal(err)
	}
	if err := l.sw.nl.LinkSetUp(l.sw.link(l.t, port)); err != nil {
		l.t.Fatal(err)
	}
	if err := h.nl.LinkSetUp(h.link(l.t, name)); err != nil {
		l.t.Fatal(err)
	}
}

// client gives h its addresses and short neighbour retransmit times, so an address
// nobody answers for is FAILED within a second.
func (l *lab) client(h *host, prefixes ...string) {
	l.t.Helper()
	for _, s := range prefixes {
		p := netip.MustParsePrefix(s)
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.nl.AddrAdd(h.link(l.t, "eth0"), a); err != nil {
			l.t.Fatalf("%s: address %s: %v", h.name, s, err)
		}
	}
	h.sysctl(l.t, "net.ipv4.neigh.eth0.retrans_time_ms=100", "net.ipv6.neigh.eth0.retrans_time_ms=100")
}

// announcer starts an Announcer in h's namespace, running until the test ends.
func announcer(t *testing.T, h *host, retry time.Duration) *Announcer {
	t.Helper()
	var a *Announcer
	h.do(t, func() error {
		var err error
		a, err = New(slog.New(slog.NewTextHandler(t.Output(), nil)).With("gateway", h.name))
		return err
	})
	if retry > 0 {
		a.retryEvery = retry
	}
	testkit.GoErr(t, "Run", a.Run)
	return a
}

func mustSet(t *testing.T, a *Announcer, owned map[netip.Addr][]string) {
	t.Helper()
	if err := a.Set(owned); err != nil {
		t.Fatalf("Set: %v", err)
	}
}

// poke makes h's kernel resolve addr: a UDP datagram to it waits in the neighbour
// entry's queue until the address is resolved, or fails.
func poke(t testing.TB, h *host, addr netip.Addr) {
	h.do(t, func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 9)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("who has it?"))
		return err
	})
}

func family(addr netip.Addr) int {
	if addr.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// neigh is h's neighbour entry for addr on eth0, nil if there is none.
func neigh(t testing.TB, h *host, addr netip.Addr) *netlink.Neigh {
	t.Helper()
	ns, err := h.nl.NeighList(h.link(t, "eth0").Attrs().Index, family(addr))
	if err != nil {
		t.Fatal(err)
	}
	for i := range ns {
		if ip, ok := netip.AddrFromSlice(ns[i].IP); ok && ip.Unmap() == addr {
			return &ns[i]
		}
	}
	return nil
}

func describe(n *netlink.Neigh) string {
	if n == nil {
		return "no entry"
	}
	return fmt.Sprintf("state %#x lladdr %s", n.State, n.HardwareAddr)
}

// waitFor polls cond every 20ms for up to 10s; the deadline bounds the loop, the test
// asserts only the state reached.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s: not reached within 10s; last seen: %s", what, last)
}

const resolvedStates = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE

// waitResolved waits until h's kernel holds addr at mac.
func waitResolved(t *testing.T, h *host, addr netip.Addr, mac net.HardwareAddr) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s resolves %s to %s", h.name, addr, mac), func() (bool, string) {
		n := neigh(t, h, addr)
		return n != nil && n.State&resolvedStates != 0 && n.HardwareAddr.String() == mac.String(), describe(n)
	})
}

// waitFailed waits until h's kernel gave up resolving addr. It must never have held a
// link-layer address for it meanwhile.
func waitFailed(t *testing.T, h *host, addr netip.Addr) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s fails to resolve %s", h.name, addr), func() (bool, string) {
		n := neigh(t, h, addr)
		if n != nil && n.State&resolvedStates != 0 {
			t.Fatalf("%s resolved %s: %s", h.name, addr, describe(n))
		}
		return n != nil && n.State == netlink.NUD_FAILED, describe(n)
	})
}

// waitAnnounced waits until every announcement round of every owned address went out, so
// that what a client resolves afterwards it resolved by asking.
func waitAnnounced(t *testing.T, a *Announcer) {
	t.Helper()
	waitFor(t, "all announcement rounds sent", func() (bool, string) {
		ss := a.Stats()
		for _, s := range ss {
			if s.Announced != uint64(len(s.Interfaces)*len(defaultSchedule)) {
				return false, fmt.Sprintf("%+v", ss)
			}
		}
		return true, ""
	})
}

func stats(a *Announcer, addr netip.Addr) AddrStats {
	for _, s := range a.Stats() {
		if s.Addr == addr {
			return s
		}
	}
	return AddrStats{}
}

// groupsJoined lists the IPv6 multicast groups h's interface dev is a member of, from
// the kernel's own table.
func groupsJoined(t testing.TB, h *host, dev string) []netip.Addr {
	var out []netip.Addr
	h.do(t, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/igmp6")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[1] != dev || len(f[2]) != 32 {
				continue
			}
			if b, err := hex.DecodeString(f[2]); err == nil {
				out = append(out, netip.AddrFrom16([16]byte(b)))
			}
		}
		return nil
	})
	return out
}

var families = []struct {
	name string
	addr func(last uint8) netip.Addr
}{
	{"IPv4", func(last uint8) netip.Addr { return netip.AddrFrom4([4]byte{10, 77, 0, last}) }},
	{"IPv6", func(last uint8) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("2001:db8:77::%d", last)) }},
}
