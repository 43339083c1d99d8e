package announce

import (
	"net/netip"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

// arpAnswer decides the reply to a request for an address this interface owns (the caller
// checked req.TargetIP), and the Ethernet destination to send it to. It answers:
//   - an ordinary request, with our MAC, to the requester (RFC 826);
//   - an RFC 5227 probe (sender IP 0.0.0.0) the way Linux answers probes for its own
//     addresses, so a host about to configure one of our LB IPs sees it is taken.
//
// It stays silent for non-requests, for our own frames, and for announcements (sender IP =
// target IP): another host claiming the address is a conflict to count, not a question.
func arpAnswer(req l2.ARP, self l2.MAC) (reply l2.ARP, to l2.MAC, ok bool) {
	if req.Op != l2.ARPRequest || req.SenderMAC == self || req.SenderIP == req.TargetIP {
		return l2.ARP{}, l2.MAC{}, false
	}
	return l2.ARP{
		Op:        l2.ARPReply,
		SenderMAC: self,
		SenderIP:  req.TargetIP,
		TargetMAC: req.SenderMAC,
		TargetIP:  req.SenderIP, // 0.0.0.0 for a probe, as Linux replies
	}, req.SenderMAC, true
}

// garp returns the gratuitous ARP packets that announce ip at self, both broadcast:
//   - a request with sender IP = target IP (the RFC 5227 announcement; target MAC zero);
//   - a reply with sender = target in both IP and MAC, the form Linux's arp_is_garp also
//     takes as gratuitous.
//
// Linux updates an existing neighbour entry from either, overriding its lock time; hosts
// that only honour one of the forms get that one.
func garp(ip netip.Addr, self l2.MAC) []l2.ARP {
	return []l2.ARP{
		{Op: l2.ARPRequest, SenderMAC: self, SenderIP: ip, TargetIP: ip},
		{Op: l2.ARPReply, SenderMAC: self, SenderIP: ip, TargetMAC: self, TargetIP: ip},
	}
}
