package announce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

// TestAnswersOwnedAddressesOnTheirInterfaces: clients resolve owned addresses to the MAC
// of the gateway interface on their own segment, never an address not owned, never an
// owned address on an interface it is not configured for; a dropped address stops being
// answered.
func TestAnswersOwnedAddressesOnTheirInterfaces(t *testing.T) {
	l := newLab(t)
	var onA, onBoth, unowned []netip.Addr
	owned := map[netip.Addr][]string{}
	for _, f := range families {
		a, ab := f.addr(100), f.addr(101)
		onA, onBoth, unowned = append(onA, a), append(onBoth, ab), append(unowned, f.addr(102))
		owned[a], owned[ab] = []string{"ga"}, []string{"gb", "ga"}
	}
	gw := announcer(t, l.gw1, 0)
	mustSet(t, gw, owned)
	gaMAC, gbMAC := l.gw1.mac(t, "ga"), l.gw1.mac(t, "gb")
	// Three rounds per address and interface, then no more.
	waitAnnounced(t, gw)

	for i, f := range families {
		t.Run(f.name, func(t *testing.T) {
			a, ab := onA[i], onBoth[i]
			poke(t, l.cliA, a)
			waitResolved(t, l.cliA, a, gaMAC)
			poke(t, l.cliA, ab)
			waitResolved(t, l.cliA, ab, gaMAC)
			poke(t, l.cliB, ab)
			waitResolved(t, l.cliB, ab, gbMAC)
			poke(t, l.cliB, a)
			waitFailed(t, l.cliB, a)
			poke(t, l.cliA, unowned[i])
			waitFailed(t, l.cliA, unowned[i])

			if s := stats(gw, a); s.Answered == 0 || !slices.Equal(s.Interfaces, []string{"ga"}) || s.Failed != nil {
				t.Errorf("stats of %s = %+v; want answered > 0 on [ga]", a, s)
			}
			if s := stats(gw, ab); s.Answered < 2 || !slices.Equal(s.Interfaces, []string{"ga", "gb"}) {
				t.Errorf("stats of %s = %+v; want answered on both interfaces", ab, s)
			}
			if s := stats(gw, ab); s.Announced != 6 {
				t.Errorf("stats of %s = %+v; want 3 announcement rounds on each interface", ab, s)
			}
		})
	}

	// Solicited-node groups, as the kernel lists them: each on exactly its interfaces.
	a6, ab6 := onA[1], onBoth[1]
	if got := groupsJoined(t, l.gw1, "ga"); !slices.Contains(got, l2.SolicitedNode(a6)) || !slices.Contains(got, l2.SolicitedNode(ab6)) {
		t.Errorf("ga groups %v; want %s and %s", got, l2.SolicitedNode(a6), l2.SolicitedNode(ab6))
	}
	if got := groupsJoined(t, l.gw1, "gb"); slices.Contains(got, l2.SolicitedNode(a6)) || !slices.Contains(got, l2.SolicitedNode(ab6)) {
		t.Errorf("gb groups %v; want %s and not %s", got, l2.SolicitedNode(ab6), l2.SolicitedNode(a6))
	}

	// Drop the ga-only addresses: cliA forgets its entries and asks again, in vain.
	for _, a := range onA {
		delete(owned, a)
	}
	mustSet(t, gw, owned)
	if got := groupsJoined(t, l.gw1, "ga"); slices.Contains(got, l2.SolicitedNode(a6)) || !slices.Contains(got, l2.SolicitedNode(ab6)) {
		t.Errorf("after the drop, ga groups %v; want %s left and %s kept", got, l2.SolicitedNode(a6), l2.SolicitedNode(ab6))
	}
	for i, f := range families {
		t.Run(f.name+" dropped", func(t *testing.T) {
			if err := l.cliA.nl.NeighDel(neigh(t, l.cliA, onA[i])); err != nil {
				t.Fatal(err)
			}
			poke(t, l.cliA, onA[i])
			waitFailed(t, l.cliA, onA[i])
			if s := stats(gw, onA[i]); s.Addr.IsValid() {
				t.Errorf("dropped address still in stats: %+v", s)
			}
			poke(t, l.cliA, onBoth[i])
			waitResolved(t, l.cliA, onBoth[i], gaMAC)
		})
	}
}

// TestTakeover: a second gateway takes an address over and the first drops it; the
// client's existing entry moves to the new MAC from the announcements alone.
func TestTakeover(t *testing.T) {
	l := newLab(t)
	gw1, gw2 := announcer(t, l.gw1, 0), announcer(t, l.gw2, 0)
	mac1, mac2 := l.gw1.mac(t, "ga"), l.gw2.mac(t, "ga")
	owned := map[netip.Addr][]string{}
	for _, f := range families {
		owned[f.addr(110)] = []string{"ga"}
	}
	mustSet(t, gw1, owned)
	waitAnnounced(t, gw1)
	for _, f := range families {
		poke(t, l.cliA, f.addr(110))
		waitResolved(t, l.cliA, f.addr(110), mac1)
	}

	mustSet(t, gw2, owned)
	mustSet(t, gw1, nil)
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			addr := f.addr(110)
			waitResolved(t, l.cliA, addr, mac2)
			// gw2 answered no request: the client did not resolve again, it took the
			// gratuitous ARP / unsolicited advertisement.
			if s := stats(gw2, addr); s.Answered != 0 || s.Announced == 0 {
				t.Errorf("new owner's stats %+v; want announcements and no answers", s)
			}
		})
	}
}

// TestUnreachabilityProbes: the unicast probes a client sends to the address itself when
// its entry needs confirming are answered while the address is owned, and not after.
func TestUnreachabilityProbes(t *testing.T) {
	l := newLab(t)
	gw := announcer(t, l.gw1, 0)
	mac := l.gw1.mac(t, "ga")
	owned := map[netip.Addr][]string{}
	for _, f := range families {
		owned[f.addr(120)] = []string{"ga"}
	}
	mustSet(t, gw, owned)
	waitAnnounced(t, gw)
	probe := func(addr netip.Addr) {
		n := neigh(t, l.cliA, addr)
		n.State = netlink.NUD_PROBE
		if err := l.cliA.nl.NeighSet(n); err != nil {
			t.Fatalf("set %s to PROBE: %v", addr, err)
		}
	}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			addr := f.addr(120)
			poke(t, l.cliA, addr)
			waitResolved(t, l.cliA, addr, mac)
			before := stats(gw, addr).Answered
			probe(addr)
			waitFor(t, "the probe confirms the entry", func() (bool, string) {
				n := neigh(t, l.cliA, addr)
				return n != nil && n.State == netlink.NUD_REACHABLE && stats(gw, addr).Answered > before, describe(n)
			})
		})
	}
	mustSet(t, gw, nil)
	for _, f := range families {
		probe(f.addr(120))
		waitFor(t, f.name+" probe unanswered once dropped", func() (bool, string) {
			n := neigh(t, l.cliA, f.addr(120))
			return n != nil && n.State == netlink.NUD_FAILED, describe(n)
		})
	}
}

// TestDuplicateAddressDetection: a host that tries to configure an owned IPv6 address
// finds it taken (the kernel marks it dadfailed); an address not owned configures.
func TestDuplicateAddressDetection(t *testing.T) {
	l := newLab(t)
	gw := announcer(t, l.gw1, 0)
	owned, free := families[1].addr(130), families[1].addr(131)
	mustSet(t, gw, map[netip.Addr][]string{owned: {"ga"}})
	// An unsolicited advertisement during DAD fails it as well: let them pass first.
	waitAnnounced(t, gw)
	l.cliA.sysctl(t, "net.ipv6.conf.eth0.accept_dad=1")
	eth0 := l.cliA.link(t, "eth0")
	for _, a := range []netip.Addr{owned, free} {
		if err := l.cliA.nl.AddrAdd(eth0, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(64, 128)}}); err != nil {
			t.Fatal(err)
		}
	}
	flags := func(a netip.Addr) (int, bool) {
		addrs, err := l.cliA.nl.AddrList(eth0, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range addrs {
			if x.IP.Equal(a.AsSlice()) {
				return x.Flags, true
			}
		}
		return 0, false
	}
	waitFor(t, "DAD of both addresses ends", func() (bool, string) {
		fo, _ := flags(owned)
		ff, _ := flags(free)
		return fo&unix.IFA_F_DADFAILED != 0 && ff&unix.IFA_F_TENTATIVE == 0, fmt.Sprintf("owned %#x, free %#x", fo, ff)
	})
	if ff, ok := flags(free); !ok || ff&unix.IFA_F_DADFAILED != 0 {
		t.Errorf("free address flags %#x (present %v); want configured", ff, ok)
	}
	if s := stats(gw, owned); s.Answered == 0 {
		t.Errorf("stats %+v; want the DAD probe answered", s)
	}
}

// TestInterfaceAppearsLater: an address configured on a missing interface is reported,
// served everywhere else meanwhile, and served on the interface once it appears.
func TestInterfaceAppearsLater(t *testing.T) {
	l := newLab(t)
	gw := announcer(t, l.gw1, 100*time.Millisecond)
	owned := map[netip.Addr][]string{}
	for _, f := range families {
		owned[f.addr(140)] = []string{"ga", "gc"}
	}
	err := gw.Set(owned)
	var e *Error
	if !errors.Is(err, ErrNoInterface) || !errors.As(err, &e) || e.Interface != "gc" || !strings.Contains(err.Error(), "on gc") {
		t.Fatalf("Set = %v; want an error naming gc", err)
	}
	for _, f := range families {
		addr := f.addr(140)
		poke(t, l.cliA, addr)
		waitResolved(t, l.cliA, addr, l.gw1.mac(t, "ga"))
		if s := stats(gw, addr); s.Failed["gc"] == "" || !slices.Equal(s.Interfaces, []string{"ga"}) {
			t.Errorf("stats %+v; want served on ga, failing on gc", s)
		}
	}

	l.wire(l.gw1, "gc", l.segB)
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			addr := f.addr(140)
			waitFor(t, "the retry picks gc up", func() (bool, string) {
				s := stats(gw, addr)
				return slices.Equal(s.Interfaces, []string{"ga", "gc"}) && s.Failed == nil, fmt.Sprintf("%+v", s)
			})
			poke(t, l.cliB, addr)
			waitResolved(t, l.cliB, addr, l.gw1.mac(t, "gc"))
		})
	}
}

// TestInterfaceDownUpAndRecreated: an interface that goes down and up is served again
// on the same sockets; one deleted and created anew under the same name (new index, new
// MAC) is reopened by the retry and its addresses announced again.
func TestInterfaceDownUpAndRecreated(t *testing.T) {
	l := newLab(t)
	gw := announcer(t, l.gw1, 100*time.Millisecond)
	owned := map[netip.Addr][]string{}
	for _, f := range families {
		owned[f.addr(150)] = []string{"gb"}
	}
	mustSet(t, gw, owned)
	waitAnnounced(t, gw)

	gb := l.gw1.link(t, "gb")
	if err := l.gw1.nl.LinkSetDown(gb); err != nil {
		t.Fatal(err)
	}
	if err := l.gw1.nl.LinkSetUp(gb); err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		poke(t, l.cliB, f.addr(150))
		waitResolved(t, l.cliB, f.addr(150), l.gw1.mac(t, "gb"))
	}

	oldMAC := l.gw1.mac(t, "gb")
	if err := l.gw1.nl.LinkDel(l.gw1.link(t, "gb")); err != nil {
		t.Fatal(err)
	}
	l.wire(l.gw1, "gb", l.segB)
	newMAC := l.gw1.mac(t, "gb")
	if newMAC.String() == oldMAC.String() {
		t.Fatalf("the new gb kept MAC %s", newMAC)
	}
	for _, f := range families {
		t.Run(f.name, func(t *testing.T) {
			// cliB's entry still says oldMAC; the reopened link's announcements move it.
			waitResolved(t, l.cliB, f.addr(150), newMAC)
		})
	}
	waitFor(t, "three more rounds on the new gb", func() (bool, string) {
		s := stats(gw, families[0].addr(150))
		return s.Announced == 2*uint64(len(defaultSchedule)), fmt.Sprintf("%+v", s)
	})
}

// TestRunAgain: while no Run runs nothing is answered; a new Run (a supervisor's restart)
// opens the sockets again and announces every owned address again.
func TestRunAgain(t *testing.T) {
	l := newLab(t)
	var gw *Announcer
	l.gw1.do(t, func() error {
		var err error
		gw, err = New(slog.New(slog.NewTextHandler(t.Output(), nil)))
		return err
	})
	owned := map[netip.Addr][]string{}
	for _, f := range families {
		owned[f.addr(160)] = []string{"ga"}
	}
	mustSet(t, gw, owned)
	run := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- gw.Run(ctx) }()
		return func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("Run = %v", err)
			}
		}
	}

	stop := run()
	waitAnnounced(t, gw)
	if err := gw.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("a second Run at the same time = %v", err)
	}
	stop()
	for _, f := range families {
		poke(t, l.cliA, f.addr(160))
		waitFailed(t, l.cliA, f.addr(160))
	}

	defer run()()
	waitFor(t, "announced again", func() (bool, string) {
		ss := gw.Stats()
		for _, s := range ss {
			if s.Announced != 2*uint64(len(defaultSchedule)) {
				return false, fmt.Sprintf("%+v", ss)
			}
		}
		return true, ""
	})
	for _, f := range families {
		if err := l.cliA.nl.NeighDel(neigh(t, l.cliA, f.addr(160))); err != nil {
			t.Fatal(err)
		}
		poke(t, l.cliA, f.addr(160))
		waitResolved(t, l.cliA, f.addr(160), l.gw1.mac(t, "ga"))
	}
}
