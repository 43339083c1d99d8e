package pid1

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/insomniacslk/dhcp/dhcpv4"
)

var testLease = Lease{
	Address: netip.MustParsePrefix("10.0.3.20/24"), Router: netip.MustParseAddr("10.0.3.1"),
	Duration: time.Hour, Renew: 10 * time.Millisecond,
}

// TestLeaseIsRenewed: the keeper renews at the lease's renewal time and refreshes the
// address's lifetime each time; EDGEGATE-NET-UP is printed for the first grant only.
func TestLeaseIsRenewed(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.ip=eth0:dhcp"})
	tm.dhcp.set(testLease, nil, nil)
	tm.runUntil(t, "three renewals", func() bool { return tm.j.count("dhcp renew eth0") >= 3 })
	if n := tm.j.count("addr eth0 10.0.3.20/24 valid 1h0m0s"); n < 4 {
		t.Errorf("address set %d times, want the grant and every renewal:\n%s", n, tm.j.dump())
	}
	if n := tm.j.count("dhcp acquire eth0"); n != 1 {
		t.Errorf("%d acquisitions, want 1", n)
	}
	if n := strings.Count(tm.console(), "EDGEGATE-NET-UP eth0 10.0.3.20/24\n"); n != 1 {
		t.Errorf("EDGEGATE-NET-UP printed %d times, want once", n)
	}
}

// TestLeaseRunsOut: renewals that keep failing are retried until the lease runs out; then
// the keeper fails, and the supervisor starts over with a new acquisition.
func TestLeaseRunsOut(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.ip=eth0:dhcp"})
	short := testLease
	short.Duration = 40 * time.Millisecond
	tm.dhcp.set(short, nil, errors.New("no answer"))
	tm.runUntil(t, "a second acquisition", func() bool { return tm.j.count("dhcp acquire eth0") >= 2 })
	if n := tm.j.count("dhcp renew eth0: no answer"); n < 2 {
		t.Errorf("%d failed renewals before the lease ran out, want retries:\n%s", n, tm.j.dump())
	}
	for _, want := range []string{`msg="DHCP renewal failed; retrying" dev=eth0`, "is gone: no answer", "EDGEGATE-NET-UP eth0 10.0.3.20/24"} {
		if !strings.Contains(tm.console(), want) {
			t.Errorf("console lacks %q:\n%s", want, tm.console())
		}
	}
}

// TestLeaseRefused: a NAK on renewal starts over at once, without waiting for the lease to
// run out.
func TestLeaseRefused(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.ip=eth0:dhcp"})
	tm.dhcp.set(testLease, nil, fmt.Errorf("%w: nak from 10.0.3.1", ErrLeaseRefused))
	tm.runUntil(t, "a second acquisition", func() bool { return tm.j.count("dhcp acquire eth0") >= 2 })
	// The lease is valid for an hour: only the refusal explains the new acquisition.
	if got := tm.j.dump(); !strings.Contains(got, "dhcp renew eth0: the server refused the lease: nak from 10.0.3.1\ndhcp acquire eth0\n") {
		t.Errorf("a refused renewal did not lead straight to a new acquisition:\n%s", got)
	}
}

// TestNoLeaseAtBoot: a DHCP server that does not answer during boot delays nothing past the
// first attempt; the keeper gets the lease later.
func TestNoLeaseAtBoot(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.ip=eth0:dhcp edgegate.ip=eth1:10.1.0.1/24"})
	tm.links.nics = []string{"eth0", "eth1"}
	tm.dhcp.set(testLease, errors.New("timeout"), nil)
	m := tm.boot()
	if !strings.Contains(tm.console(), `msg="no DHCP lease yet; still trying in the background" dev=eth0`) {
		t.Errorf("console:\n%s", tm.console())
	}
	if !strings.Contains(tm.markers(), "EDGEGATE-NET-UP eth1 10.1.0.1/24") {
		t.Errorf("the static device waits for DHCP:\n%s", tm.markers())
	}
	wait := run(m)
	waitFor(t, "a retry", func() bool { return tm.j.count("dhcp acquire eth0: timeout") >= 2 })
	tm.dhcp.set(testLease, nil, nil)
	waitFor(t, "the lease", func() bool { return strings.Contains(tm.markers(), "EDGEGATE-NET-UP eth0 10.0.3.20/24") })
	tm.powerOff(m, wait)
}

func TestLeaseFromACK(t *testing.T) {
	ack, err := dhcpv4.New(
		dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
		dhcpv4.WithYourIP(net.IPv4(192, 168, 8, 40)),
		dhcpv4.WithNetmask(net.CIDRMask(22, 32)),
		dhcpv4.WithRouter(net.IPv4(192, 168, 8, 1), net.IPv4(192, 168, 8, 2)),
		dhcpv4.WithDNS(net.IPv4(192, 168, 8, 53), net.IPv4(9, 9, 9, 9)),
		dhcpv4.WithLeaseTime(600),
	)
	if err != nil {
		t.Fatal(err)
	}
	got, err := leaseFromACK(ack)
	if err != nil {
		t.Fatal(err)
	}
	want := Lease{
		Address: netip.MustParsePrefix("192.168.8.40/22"), Router: netip.MustParseAddr("192.168.8.1"),
		DNS:      []netip.Addr{netip.MustParseAddr("192.168.8.53"), netip.MustParseAddr("9.9.9.9")},
		Duration: 10 * time.Minute, Renew: 5 * time.Minute,
	}
	opts := cmpopts.EquateComparable(netip.Prefix{}, netip.Addr{})
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("lease (-want +got):\n%s", diff)
	}

	// A bare ACK: the class's mask, no router, a lease that never ends.
	bare, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeAck), dhcpv4.WithYourIP(net.IPv4(10, 2, 3, 4)), dhcpv4.WithLeaseTime(math.MaxUint32))
	got, err = leaseFromACK(bare)
	if err != nil {
		t.Fatal(err)
	}
	want = Lease{Address: netip.MustParsePrefix("10.2.3.4/8"), Duration: math.MaxUint32 * time.Second, Renew: math.MaxUint32 * time.Second / 2}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Errorf("bare lease (-want +got):\n%s", diff)
	}

	empty, _ := dhcpv4.New(dhcpv4.WithMessageType(dhcpv4.MessageTypeAck))
	if _, err := leaseFromACK(empty); err == nil {
		t.Error("an ACK without an address gave a lease")
	}
}
