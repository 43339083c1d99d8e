package l2

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv6"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// TestFilters: the in-kernel filters pass exactly what the readers need. Frames that must
// be dropped are sent first, then one that must pass; frames on a veth arrive in order, so
// reading that last one with nothing before it proves the others were dropped, with no
// timeout.
func TestFilters(t *testing.T) {
	kerneltest.InNetns(t, "l2flt", func(string) {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "x0"}, PeerName: "x1"}); err != nil {
			t.Fatal(err)
		}
		links := map[string]*net.Interface{}
		for _, n := range []string{"x0", "x1"} {
			l, err := netlink.LinkByName(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			if links[n], err = net.InterfaceByName(n); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range filterCases(t, MAC(links["x1"].HardwareAddr)) {
			if err := tc.run(links["x0"], links["x1"], t); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
	})
}

type frame struct {
	b  []byte
	to MAC
}

type filterCase struct {
	name      string
	etherType int
	prime     []byte // passes; proves the link carries frames before the test proper
	own       []byte // sent by the reader's own socket: PACKET_OUTGOING
	drop      []frame
	pass      frame
}

func filterCases(t *testing.T, x1MAC MAC) []filterCase {
	otherMAC := MAC{0x02, 0, 0, 0, 0, 0x77}
	vip := netip.MustParseAddr("10.77.0.100")
	// Every frame differs from the others (the sender's address counts them), so the one
	// read is known.
	arp := func(op uint16, n uint8) []byte {
		return marshalARP(ARP{Op: op, SenderMAC: clientMAC, SenderIP: netip.AddrFrom4([4]byte{10, 77, 0, n}), TargetIP: vip})
	}
	group := SolicitedNode(vip6)
	ndp := func(typ ipv6.ICMPType, hop, n uint8) []byte {
		src := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: n})
		return ipv6Packet(t, typ, src, group, hop, nsBody(vip6, sllOption(clientMAC)...))
	}
	ns := ipv6.ICMPTypeNeighborSolicitation
	udp := ndp(ns, 255, 3)
	udp[6] = 17
	return []filterCase{{
		name: "ARP", etherType: etherTypeARP,
		prime: arp(ARPRequest, 9),
		own:   arp(ARPRequest, 1),
		drop: []frame{
			{arp(ARPReply, 2), x1MAC},
			{arp(3, 3), BroadcastMAC},      // RARP request
			{arp(ARPRequest, 4), otherMAC}, // to another host: PACKET_OTHERHOST
		},
		pass: frame{arp(ARPRequest, 5), BroadcastMAC},
	}, {
		name: "NDP", etherType: etherTypeIPv6,
		prime: ndp(ns, 255, 9),
		own:   ndp(ns, 255, 1),
		drop: []frame{
			{ndp(ns, 254, 2), x1MAC},
			{udp, x1MAC},
			{ndp(ipv6.ICMPTypeNeighborAdvertisement, 255, 4), x1MAC},
			{ndp(ns, 255, 5), otherMAC},
		},
		pass: frame{ndp(ns, 255, 6), x1MAC},
	}}
}

// run sends tc's frames from x0 to a reader on x1; the caller's thread is in their
// namespace.
func (tc filterCase) run(x0, x1 *net.Interface, t *testing.T) error {
	filter := arpFilter
	if tc.etherType == etherTypeIPv6 {
		filter = nsFilter
	}
	in, err := listen(x1, tc.etherType, filter)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := listen(x0, tc.etherType, nil)
	if err != nil {
		return err
	}
	defer out.Close()
	buf := make([]byte, 1500)
	read := func(wait time.Duration) ([]byte, error) {
		if err := in.SetReadDeadline(time.Now().Add(wait)); err != nil {
			return nil, err
		}
		n, _, err := in.ReadFrom(buf)
		if n >= len(tc.pass.b) {
			n = len(tc.pass.b) // past it: Ethernet padding
		}
		return buf[:n], err
	}
	// Until the link watcher activates a new veth's queue, frames sent on it are
	// dropped: send a passing frame until one arrives.
	for try := 0; ; try++ {
		if err := send(out, tc.prime, tc.pass.to); err != nil {
			return err
		}
		if b, err := read(100 * time.Millisecond); err == nil && slices.Equal(b, tc.prime) {
			break
		} else if try == 50 {
			return fmt.Errorf("the link never carried a frame: %x, %v", b, err)
		}
	}
	// Our own outgoing frame on x1 must not come back to the reader either.
	if err := send(in, tc.own, BroadcastMAC); err != nil {
		return err
	}
	for _, f := range append(tc.drop, tc.pass) {
		if err := send(out, f.b, f.to); err != nil {
			return err
		}
	}
	for {
		b, err := read(10 * time.Second)
		switch {
		case err != nil:
			return fmt.Errorf("read: %w", err)
		case slices.Equal(b, tc.prime): // a late copy of the priming frame
		case slices.Equal(b, tc.pass.b):
			return nil
		default:
			t.Errorf("%s: read %x, which the filter should have dropped", tc.name, b)
		}
	}
}
