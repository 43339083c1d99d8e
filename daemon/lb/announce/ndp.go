package announce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"
)

// etherTypeIPv6 is the ethertype the IPv6 packet socket binds to.
const etherTypeIPv6 = 0x86dd

const (
	ipv6HeaderLen  = 40
	protoICMPv6    = 58
	icmpTypeNS     = 135
	icmpTypeNA     = 136
	nsLen          = 24 // ICMPv6 header, reserved word, target
	optSourceLL    = 1
	optTargetLL    = 2
	ndpHopLimit    = 255
	naFlagSolicit  = 0x40
	naFlagOverride = 0x20
)

var (
	allNodes    = netip.MustParseAddr("ff02::1")
	allNodesMAC = mac{0x33, 0x33, 0, 0, 0, 1}
)

// solicitation is a Neighbor Solicitation that passed RFC 4861 section 7.1.1 validation.
type solicitation struct {
	Src, Dst netip.Addr
	Target   netip.Addr
	SourceLL mac // the source link-layer address option, when HasLL
	HasLL    bool
}

var errNS = errors.New("not a valid neighbor solicitation")

// parseNS decodes an IPv6 packet (from its IPv6 header on: a SOCK_DGRAM packet socket
// strips the Ethernet header) carrying a Neighbor Solicitation, and applies the receiver
// checks of RFC 4861 7.1.1: hop limit 255 (so it was not forwarded from another link),
// a correct checksum, code 0, at least 24 bytes, a unicast target, options of non-zero
// length, and for duplicate address detection probes (unspecified source) a
// solicited-node destination and no source link-layer option. Extension headers are not
// walked: solicitations never carry them in practice, and one that does is dropped.
func parseNS(b []byte) (solicitation, error) {
	if len(b) < ipv6HeaderLen {
		return solicitation{}, fmt.Errorf("ns: %d bytes, shorter than an IPv6 header: %w", len(b), errNS)
	}
	if v := b[0] >> 4; v != 6 {
		return solicitation{}, fmt.Errorf("ns: IP version %d: %w", v, errNS)
	}
	plen := int(binary.BigEndian.Uint16(b[4:6]))
	if plen > len(b)-ipv6HeaderLen {
		return solicitation{}, fmt.Errorf("ns: payload length %d, %d bytes present: %w", plen, len(b)-ipv6HeaderLen, errNS)
	}
	if b[6] != protoICMPv6 {
		return solicitation{}, fmt.Errorf("ns: next header %d: %w", b[6], errNS)
	}
	if b[7] != ndpHopLimit {
		return solicitation{}, fmt.Errorf("ns: hop limit %d, want 255: %w", b[7], errNS)
	}
	s := solicitation{
		Src: netip.AddrFrom16([16]byte(b[8:24])),
		Dst: netip.AddrFrom16([16]byte(b[24:40])),
	}
	m := b[ipv6HeaderLen : ipv6HeaderLen+plen]
	if len(m) < nsLen {
		return solicitation{}, fmt.Errorf("ns: ICMPv6 length %d, want at least %d: %w", len(m), nsLen, errNS)
	}
	if m[0] != icmpTypeNS || m[1] != 0 {
		return solicitation{}, fmt.Errorf("ns: ICMPv6 type %d code %d: %w", m[0], m[1], errNS)
	}
	if icmpv6Checksum(s.Src, s.Dst, m) != 0 {
		return solicitation{}, fmt.Errorf("ns: bad checksum: %w", errNS)
	}
	s.Target = netip.AddrFrom16([16]byte(m[8:24]))
	if s.Target.IsMulticast() {
		return solicitation{}, fmt.Errorf("ns: multicast target %s: %w", s.Target, errNS)
	}
	for opts := m[nsLen:]; len(opts) > 0; {
		if len(opts) < 2 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			return solicitation{}, fmt.Errorf("ns: malformed option: %w", errNS)
		}
		n := int(opts[1]) * 8
		if opts[0] == optSourceLL && n == 8 {
			copy(s.SourceLL[:], opts[2:8])
			s.HasLL = true
		}
		opts = opts[n:]
	}
	if s.Src.IsUnspecified() {
		if s.Dst != solicitedNode(s.Target) {
			return solicitation{}, fmt.Errorf("ns: DAD probe for %s sent to %s: %w", s.Target, s.Dst, errNS)
		}
		if s.HasLL {
			return solicitation{}, fmt.Errorf("ns: DAD probe with a source link-layer address: %w", errNS)
		}
	}
	return s, nil
}

// advertisement is a Neighbor Advertisement this gateway sends.
type advertisement struct {
	Src, Dst netip.Addr
	Target   netip.Addr
	Flags    byte // naFlagSolicit, naFlagOverride; never the router flag: an LB IP is no router
	TargetLL mac
}

// marshal encodes a as an IPv6 packet with hop limit 255 and the target link-layer
// address option, checksum included.
func (a advertisement) marshal() []byte {
	const icmpLen = nsLen + 8
	b := make([]byte, ipv6HeaderLen+icmpLen)
	b[0] = 6 << 4
	binary.BigEndian.PutUint16(b[4:6], icmpLen)
	b[6] = protoICMPv6
	b[7] = ndpHopLimit
	src, dst, target := a.Src.As16(), a.Dst.As16(), a.Target.As16()
	copy(b[8:24], src[:])
	copy(b[24:40], dst[:])
	m := b[ipv6HeaderLen:]
	m[0] = icmpTypeNA
	m[4] = a.Flags
	copy(m[8:24], target[:])
	m[24], m[25] = optTargetLL, 1
	copy(m[26:32], a.TargetLL[:])
	binary.BigEndian.PutUint16(m[2:4], icmpv6Checksum(a.Src, a.Dst, m))
	return b
}

// icmpv6Checksum is the Internet checksum of an ICMPv6 message m with the IPv6
// pseudo-header (RFC 8200 8.1). Over a message whose checksum field is filled in it is 0
// when the checksum is right; over one whose field is zero it is the value to fill in.
func icmpv6Checksum(src, dst netip.Addr, m []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for len(b) >= 2 {
			sum += uint32(b[0])<<8 | uint32(b[1])
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	var lenNext [8]byte
	binary.BigEndian.PutUint32(lenNext[0:4], uint32(len(m)))
	lenNext[7] = protoICMPv6
	add(lenNext[:])
	add(m)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

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
func ndpAnswer(s solicitation, from, self mac) (na advertisement, to mac, ok bool) {
	if from == self {
		return advertisement{}, mac{}, false
	}
	na = advertisement{Src: s.Target, Target: s.Target, TargetLL: self}
	if s.Src.IsUnspecified() {
		na.Dst, na.Flags = allNodes, naFlagOverride
		return na, allNodesMAC, true
	}
	na.Dst, na.Flags = s.Src, naFlagSolicit|naFlagOverride
	to = from
	if s.HasLL {
		to = s.SourceLL
	}
	return na, to, true
}

// unsolicitedNA is the advertisement that announces ip at self to all nodes: no S flag
// (it answers no one), O flag so neighbours replace the link-layer address they have.
func unsolicitedNA(ip netip.Addr, self mac) []byte {
	return advertisement{Src: ip, Dst: allNodes, Target: ip, Flags: naFlagOverride, TargetLL: self}.marshal()
}

// solicitedNode is the solicited-node multicast group of ip (RFC 4291 2.7.1):
// ff02::1:ff00:0/104 with the low 24 bits of ip.
func solicitedNode(ip netip.Addr) netip.Addr {
	a := ip.As16()
	return netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
}

// nsFilter passes Neighbor Solicitations that reached this host with hop limit 255 and no
// extension header to user space, nothing else; the offsets are from the IPv6 header.
// parseNS checks all of it again: the filter is what keeps the rest of the IPv6 traffic
// of a busy interface from being copied to us.
var nsFilter = mustAssemble([]bpf.Instruction{
	bpf.LoadExtension{Num: bpf.ExtType},
	bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: maxKeptPktType, SkipTrue: 7},
	bpf.LoadAbsolute{Off: 6, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: protoICMPv6, SkipTrue: 5},
	bpf.LoadAbsolute{Off: 7, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ndpHopLimit, SkipTrue: 3},
	bpf.LoadAbsolute{Off: ipv6HeaderLen, Size: 1},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: icmpTypeNS, SkipTrue: 1},
	bpf.RetConstant{Val: 1500},
	bpf.RetConstant{Val: 0},
})
