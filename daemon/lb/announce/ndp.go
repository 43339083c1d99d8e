package announce

import (
	"net/netip"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

// ndpAnswer decides the advertisement that answers s for an address this interface owns
// (the caller checked s.Target), and the Ethernet destination to send it to:
//   - address resolution and unreachability detection: a solicited advertisement (S and O)
//     to the soliciting address, at its source link-layer option or, for unicast probes
//     that omit it, at the frame's Ethernet source (from);
//   - duplicate address detection (unspecified source): an advertisement without S to
//     all-nodes (RFC 4861 7.2.4), so the prober finds the LB IP taken and does not
//     configure it.
//
// Our own frames never get an answer. The source address is the target itself, as Linux
// does for its own addresses: the LB IP is not configured here, but nothing checks an
// advertisement's source, and it needs no link-local address on the interface.
func ndpAnswer(s l2.Solicitation, from, self l2.MAC) (na l2.Advertisement, to l2.MAC, ok bool) {
	if from == self {
		return l2.Advertisement{}, l2.MAC{}, false
	}
	na = l2.Advertisement{Src: s.Target, Target: s.Target, Override: true, TargetLL: self}
	if s.Src.IsUnspecified() {
		na.Dst = l2.AllNodes
		return na, l2.AllNodesMAC, true
	}
	na.Dst, na.Solicited = s.Src, true
	to = from
	if s.HasLL {
		to = s.SourceLL
	}
	return na, to, true
}

// unsolicitedNA is the advertisement that announces ip at self to all nodes: no S flag
// (it answers no one), O flag so neighbours replace the link-layer address they have.
func unsolicitedNA(ip netip.Addr, self l2.MAC) l2.Advertisement {
	return l2.Advertisement{Src: ip, Dst: l2.AllNodes, Target: ip, Override: true, TargetLL: self}
}
