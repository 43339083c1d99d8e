package l2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
	"golang.org/x/net/ipv6"
)

// etherTypeIPv6 is the ethertype the IPv6 packet socket binds to.
const etherTypeIPv6 = 0x86dd

const (
	ipv6HeaderLen = ipv6.HeaderLen
	protoICMPv6   = 58
	icmpHeaderLen = 4
	ndpHopLimit   = 255
)

var errNS = errors.New("not a valid neighbor solicitation")

// parseNS decodes an IPv6 packet (from its IPv6 header on: a SOCK_DGRAM packet socket
// strips the Ethernet header) carrying a Neighbor Solicitation, and applies the receiver
// checks of RFC 4861 7.1.1: hop limit 255 (so it was not forwarded from another link),
// a correct checksum, code 0, at least 24 bytes, a unicast target, well-formed options,
// and for duplicate address detection probes (unspecified source) a solicited-node
// destination and no source link-layer option. Extension headers are not walked:
// solicitations never carry them in practice, and one that does is dropped.
//
// The message is mdlayher/ndp's; the IPv6 header and the checksum are checked here, because
// ndp is made for an ICMPv6 socket, where the kernel has done both (its ParseMessage does
// not verify the checksum, and it has no IPv6 header codec). ndp is stricter about options
// than RFC 4861 asks: a malformed option of a type it knows (a link-layer address option
// longer than 8 bytes, say) or any option of 256 bytes or more (its length arithmetic is
// a byte wide) drops the solicitation, where the hand-written parser skipped it. No
// Ethernet host sends either.
func parseNS(b []byte) (Solicitation, error) {
	h, err := ipv6.ParseHeader(b)
	if err != nil {
		return Solicitation{}, fmt.Errorf("ns: %d bytes, shorter than an IPv6 header: %w", len(b), errNS)
	}
	if h.Version != 6 {
		return Solicitation{}, fmt.Errorf("ns: IP version %d: %w", h.Version, errNS)
	}
	if h.PayloadLen > len(b)-ipv6HeaderLen {
		return Solicitation{}, fmt.Errorf("ns: payload length %d, %d bytes present: %w", h.PayloadLen, len(b)-ipv6HeaderLen, errNS)
	}
	if h.NextHeader != protoICMPv6 {
		return Solicitation{}, fmt.Errorf("ns: next header %d: %w", h.NextHeader, errNS)
	}
	if h.HopLimit != ndpHopLimit {
		return Solicitation{}, fmt.Errorf("ns: hop limit %d, want 255: %w", h.HopLimit, errNS)
	}
	s := Solicitation{Src: netip.AddrFrom16([16]byte(h.Src)), Dst: netip.AddrFrom16([16]byte(h.Dst))}
	m := b[ipv6HeaderLen : ipv6HeaderLen+h.PayloadLen]
	if len(m) < icmpHeaderLen {
		return Solicitation{}, fmt.Errorf("ns: ICMPv6 length %d: %w", len(m), errNS)
	}
	if typ := ipv6.ICMPType(m[0]); typ != ipv6.ICMPTypeNeighborSolicitation || m[1] != 0 {
		return Solicitation{}, fmt.Errorf("ns: ICMPv6 type %d code %d: %w", m[0], m[1], errNS)
	}
	if icmpv6Checksum(s.Src, s.Dst, m) != 0 {
		return Solicitation{}, fmt.Errorf("ns: bad checksum: %w", errNS)
	}
	msg, err := ndp.ParseMessage(m)
	if err != nil {
		return Solicitation{}, fmt.Errorf("ns: %w: %w", err, errNS)
	}
	ns, ok := msg.(*ndp.NeighborSolicitation)
	if !ok {
		return Solicitation{}, fmt.Errorf("ns: parsed as %T: %w", msg, errNS)
	}
	s.Target = ns.TargetAddress
	if s.Target.IsMulticast() {
		return Solicitation{}, fmt.Errorf("ns: multicast target %s: %w", s.Target, errNS)
	}
	for _, o := range ns.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Source && len(lla.Addr) == len(s.SourceLL) {
			s.SourceLL, s.HasLL = MAC(lla.Addr), true
		}
	}
	if s.Src.IsUnspecified() {
		if s.Dst != SolicitedNode(s.Target) {
			return Solicitation{}, fmt.Errorf("ns: DAD probe for %s sent to %s: %w", s.Target, s.Dst, errNS)
		}
		if s.HasLL {
			return Solicitation{}, fmt.Errorf("ns: DAD probe with a source link-layer address: %w", errNS)
		}
	}
	return s, nil
}

// marshalNA encodes a as an IPv6 packet with hop limit 255 and the target link-layer
// address option, checksum included. The ICMPv6 message is mdlayher/ndp's; the IPv6
// header is written here, since neither ndp nor golang.org/x/net/ipv6 encodes one (on
// their sockets the kernel does).
func marshalNA(a Advertisement) ([]byte, error) {
	m, err := ndp.MarshalMessageChecksum(&ndp.NeighborAdvertisement{
		Solicited:     a.Solicited,
		Override:      a.Override,
		TargetAddress: a.Target,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: net.HardwareAddr(a.TargetLL[:])}},
	}, a.Src, a.Dst)
	if err != nil {
		return nil, fmt.Errorf("neighbor advertisement: %w", err)
	}
	b := make([]byte, ipv6HeaderLen, ipv6HeaderLen+len(m))
	b[0] = 6 << 4
	binary.BigEndian.PutUint16(b[4:6], uint16(len(m)))
	b[6] = protoICMPv6
	b[7] = ndpHopLimit
	src, dst := a.Src.As16(), a.Dst.As16()
	copy(b[8:24], src[:])
	copy(b[24:40], dst[:])
	return append(b, m...), nil
}

// icmpv6Checksum is the Internet checksum of an ICMPv6 message m with the IPv6
// pseudo-header (RFC 8200 8.1); over a message whose checksum field is filled in it is 0
// when the checksum is right. Written here because no library at hand verifies one:
// ndp leaves it to the kernel, and golang.org/x/net/icmp only computes it while
// marshalling.
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
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(ipv6.ICMPTypeNeighborSolicitation), SkipTrue: 1},
	bpf.RetConstant{Val: 1500},
	bpf.RetConstant{Val: 0},
})
