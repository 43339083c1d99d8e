package announce

import (
	"net/netip"
	"testing"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

var (
	selfMAC   = l2.MAC{0x02, 0, 0, 0, 0, 0x01}
	clientMAC = l2.MAC{0x02, 0, 0, 0, 0, 0x10}
)

func TestARPAnswer(t *testing.T) {
	vip := netip.MustParseAddr("10.77.0.100")
	client := netip.MustParseAddr("10.77.0.10")
	zero := netip.IPv4Unspecified()
	for _, tc := range []struct {
		name  string
		req   l2.ARP
		reply l2.ARP // zero: no answer
	}{{
		name:  "request",
		req:   l2.ARP{Op: l2.ARPRequest, SenderMAC: clientMAC, SenderIP: client, TargetIP: vip},
		reply: l2.ARP{Op: l2.ARPReply, SenderMAC: selfMAC, SenderIP: vip, TargetMAC: clientMAC, TargetIP: client},
	}, {
		name:  "unicast probe (target MAC set)",
		req:   l2.ARP{Op: l2.ARPRequest, SenderMAC: clientMAC, SenderIP: client, TargetMAC: selfMAC, TargetIP: vip},
		reply: l2.ARP{Op: l2.ARPReply, SenderMAC: selfMAC, SenderIP: vip, TargetMAC: clientMAC, TargetIP: client},
	}, {
		name:  "RFC 5227 probe",
		req:   l2.ARP{Op: l2.ARPRequest, SenderMAC: clientMAC, SenderIP: zero, TargetIP: vip},
		reply: l2.ARP{Op: l2.ARPReply, SenderMAC: selfMAC, SenderIP: vip, TargetMAC: clientMAC, TargetIP: zero},
	}, {
		name: "another host announcing the address",
		req:  l2.ARP{Op: l2.ARPRequest, SenderMAC: clientMAC, SenderIP: vip, TargetIP: vip},
	}, {
		name: "our own request",
		req:  l2.ARP{Op: l2.ARPRequest, SenderMAC: selfMAC, SenderIP: client, TargetIP: vip},
	}, {
		name: "a reply",
		req:  l2.ARP{Op: l2.ARPReply, SenderMAC: clientMAC, SenderIP: client, TargetIP: vip},
	}} {
		reply, to, ok := arpAnswer(tc.req, selfMAC)
		if want := tc.reply != (l2.ARP{}); ok != want || reply != tc.reply {
			t.Errorf("%s: arpAnswer = %+v, %v; want %+v, %v", tc.name, reply, ok, tc.reply, want)
			continue
		}
		if ok && to != clientMAC {
			t.Errorf("%s: sent to %s, want the requester %s", tc.name, to, clientMAC)
		}
	}
}

func TestGARP(t *testing.T) {
	vip := netip.MustParseAddr("10.77.0.100")
	frames := garp(vip, selfMAC)
	if len(frames) != 2 {
		t.Fatalf("%d frames, want a request and a reply", len(frames))
	}
	want := []l2.ARP{
		{Op: l2.ARPRequest, SenderMAC: selfMAC, SenderIP: vip, TargetIP: vip},
		{Op: l2.ARPReply, SenderMAC: selfMAC, SenderIP: vip, TargetMAC: selfMAC, TargetIP: vip},
	}
	for i, p := range frames {
		if p != want[i] {
			t.Errorf("frame %d = %+v; want %+v", i, p, want[i])
		}
	}
}
