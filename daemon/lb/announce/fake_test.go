package announce

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

// TestAnswersThroughTheSockets runs the announcer over l2.Fake, without root: what it
// announces, answers and ignores, and the solicited-node groups it holds, as the sockets
// see them.
func TestAnswersThroughTheSockets(t *testing.T) {
	k := l2.NewFake()
	k.SetInterface(net.Interface{Index: 2, Name: "ga", HardwareAddr: net.HardwareAddr(selfMAC[:])})
	a := newAnnouncer(slog.New(slog.NewTextHandler(t.Output(), nil)), k)
	a.schedule = []time.Duration{0}
	vip, vip6b := netip.MustParseAddr("10.77.0.100"), netip.MustParseAddr("2001:db8:77::2:2345:6789")
	if err := a.Set(map[netip.Addr][]string{vip: {"ga"}, vip6: {"ga"}, vip6b: {"ga"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()

	arp, ndp := k.ARP("ga"), k.NDP("ga")
	var arpSent, ndpSent []string
	// sent waits until the sockets wrote n frames in all, and returns them.
	sent := func(n int) {
		t.Helper()
		waitFor(t, "frames written", func() (bool, string) {
			arpSent, ndpSent = append(arpSent, arp.Sent()...), append(ndpSent, ndp.Sent()...)
			return len(arpSent)+len(ndpSent) >= n, strings.Join(append(arpSent, ndpSent...), "\n")
		})
	}
	expect := func(what string, got []string, want ...string) {
		t.Helper()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s:\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	// Each owned address is announced once per round: two gratuitous ARPs, one
	// unsolicited advertisement per IPv6 address.
	sent(4)
	expect("announcements (ARP)", arpSent,
		"request ff:ff:ff:ff:ff:ff: 02:00:00:00:00:01 10.77.0.100 00:00:00:00:00:00 10.77.0.100",
		"reply ff:ff:ff:ff:ff:ff: 02:00:00:00:00:01 10.77.0.100 02:00:00:00:00:01 10.77.0.100")
	expect("announcements (NDP)", ndpSent,
		"na 33:33:00:00:00:01: 2001:db8:77::1:2345:6789 > ff02::1 2001:db8:77::1:2345:6789 [O] 02:00:00:00:00:01",
		"na 33:33:00:00:00:01: 2001:db8:77::2:2345:6789 > ff02::1 2001:db8:77::2:2345:6789 [O] 02:00:00:00:00:01")
	// Both IPv6 addresses share a solicited-node group: joined once.
	if got, want := ndp.Groups(), "ff02::1:ff45:6789"; got != want {
		t.Errorf("groups %q, want %q", got, want)
	}

	// A request for an address not owned gets nothing; frames are read in order, so the
	// reply to the owned one coming alone proves it.
	arpSent, ndpSent = nil, nil
	client := netip.MustParseAddr("10.77.0.10")
	arp.Receive(l2.ARP{Op: l2.ARPRequest, SenderMAC: clientMAC, SenderIP: client, TargetIP: netip.MustParseAddr("10.77.0.101")})
	arp.Receive(l2.ARP{Op: l2.ARPRequest, SenderMAC: clientMAC, SenderIP: client, TargetIP: vip})
	ndp.Receive(l2.Solicitation{Src: client6, Dst: vip6, Target: netip.MustParseAddr("2001:db8:77::3")}, clientMAC)
	ndp.Receive(l2.Solicitation{Src: client6, Dst: vip6, Target: vip6}, clientMAC)
	sent(2)
	expect("answers (ARP)", arpSent, "reply 02:00:00:00:00:10: 02:00:00:00:00:01 10.77.0.100 02:00:00:00:00:10 10.77.0.10")
	expect("answers (NDP)", ndpSent, "na 02:00:00:00:00:10: 2001:db8:77::1:2345:6789 > 2001:db8:77::10 2001:db8:77::1:2345:6789 [SO] 02:00:00:00:00:01")
	for _, s := range a.Stats() {
		if want := uint64(map[netip.Addr]int{vip: 1, vip6: 1}[s.Addr]); s.Answered != want {
			t.Errorf("%s answered %d times, want %d", s.Addr, s.Answered, want)
		}
	}

	// Dropping one IPv6 address keeps the shared group; dropping both leaves it (the
	// socket stays while the link serves IPv4), and dropping everything closes the
	// sockets.
	if err := a.Set(map[netip.Addr][]string{vip: {"ga"}, vip6: {"ga"}}); err != nil {
		t.Fatal(err)
	}
	if got, want := ndp.Groups(), "ff02::1:ff45:6789"; got != want {
		t.Errorf("after dropping %s, groups %q, want %q", vip6b, got, want)
	}
	if err := a.Set(map[netip.Addr][]string{vip: {"ga"}}); err != nil {
		t.Fatal(err)
	}
	if got := ndp.Groups(); got != "" {
		t.Errorf("after dropping every IPv6 address: groups %q, want none", got)
	}
	if err := a.Set(nil); err != nil {
		t.Fatal(err)
	}
	if !arp.Closed() || !ndp.Closed() {
		t.Errorf("after dropping everything: ARP socket closed %v, NDP socket closed %v", arp.Closed(), ndp.Closed())
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run = %v", err)
	}
	a.Close()
}
