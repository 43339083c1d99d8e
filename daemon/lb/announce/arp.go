package announce

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"
)

// etherTypeARP is the ARP ethertype the IPv4 packet socket binds to.
const etherTypeARP = 0x0806

// ARP operations (RFC 826).
const (
	arpRequest = 1
	arpReply   = 2
)

// arpLen is the size of an ARP payload for IPv4 over Ethernet: 8 bytes of header, two
// 6-byte hardware and two 4-byte protocol addresses.
const arpLen = 28

// mac is an Ethernet address; an array so packets carry it without allocating.
type mac [6]byte

var broadcastMAC = mac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func (m mac) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// arpPacket is an Ethernet/IPv4 ARP payload (hardware type 1, protocol type 0x0800).
type arpPacket struct {
	Op        uint16
	SenderMAC mac
	SenderIP  netip.Addr
	TargetMAC mac
	TargetIP  netip.Addr
}

var errARP = errors.New("not an Ethernet/IPv4 ARP packet")

// parseARP decodes the payload of an ARP frame. Bytes past the 28 it needs are the
// Ethernet minimum-frame padding and are ignored.
func parseARP(b []byte) (arpPacket, error) {
	if len(b) < arpLen {
		return arpPacket{}, fmt.Errorf("arp: %d bytes, want at least %d: %w", len(b), arpLen, errARP)
	}
	if htype, ptype := binary.BigEndian.Uint16(b[0:2]), binary.BigEndian.Uint16(b[2:4]); htype != 1 || ptype != 0x0800 {
		return arpPacket{}, fmt.Errorf("arp: hardware type %d, protocol type %#04x: %w", htype, ptype, errARP)
	}
	if hlen, plen := b[4], b[5]; hlen != 6 || plen != 4 {
		return arpPacket{}, fmt.Errorf("arp: address lengths %d/%d: %w", hlen, plen, errARP)
	}
	p := arpPacket{Op: binary.BigEndian.Uint16(b[6:8])}
	copy(p.SenderMAC[:], b[8:14])
	p.SenderIP = netip.AddrFrom4([4]byte(b[14:18]))
	copy(p.TargetMAC[:], b[18:24])
	p.TargetIP = netip.AddrFrom4([4]byte(b[24:28]))
	return p, nil
}

// marshal encodes p as a 28-byte ARP payload. Addresses that are not IPv4 encode as
// 0.0.0.0.
func (p arpPacket) marshal() []byte {
	b := make([]byte, arpLen)
	binary.BigEndian.PutUint16(b[0:2], 1)
	binary.BigEndian.PutUint16(b[2:4], 0x0800)
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:8], p.Op)
	copy(b[8:14], p.SenderMAC[:])
	copy(b[14:18], as4(p.SenderIP))
	copy(b[18:24], p.TargetMAC[:])
	copy(b[24:28], as4(p.TargetIP))
	return b
}

func as4(a netip.Addr) []byte {
	if !a.Is4() {
		return make([]byte, 4)
	}
	b := a.As4()
	return b[:]
}

// arpAnswer decides the reply to a request for an address this interface owns (the caller
// checked req.TargetIP), and the Ethernet destination to send it to. It answers:
//   - an ordinary request, with our MAC, to the requester (RFC 826);
//   - an RFC 5227 probe (sender IP 0.0.0.0) the way Linux answers probes for its own
//     addresses, so a host about to configure one of our LB IPs sees it is taken.
//
// It stays silent for non-requests, for our own frames, and for announcements (sender IP =
// target IP): another host claiming the address is a conflict to count, not a question.
func arpAnswer(req arpPacket, self mac) (reply arpPacket, to mac, ok bool) {
	if req.Op != arpRequest || req.SenderMAC == self || req.SenderIP == req.TargetIP {
		return arpPacket{}, mac{}, false
	}
	return arpPacket{
		Op:        arpReply,
		SenderMAC: self,
		SenderIP:  req.TargetIP,
		TargetMAC: req.SenderMAC,
		TargetIP:  req.SenderIP, // 0.0.0.0 for a probe, as Linux replies
	}, req.SenderMAC, true
}

// garp returns the gratuitous ARP frames that announce ip at self, both broadcast:
//   - a request with sender IP = target IP (the RFC 5227 announcement; target MAC zero);
//   - a reply with sender = target in both IP and MAC, the form Linux's arp_is_garp also
//     takes as gratuitous.
//
// Linux updates an existing neighbour entry from either, overriding its lock time; hosts
// that only honour one of the forms get that one.
func garp(ip netip.Addr, self mac) [][]byte {
	return [][]byte{
		arpPacket{Op: arpRequest, SenderMAC: self, SenderIP: ip, TargetIP: ip}.marshal(),
		arpPacket{Op: arpReply, SenderMAC: self, SenderIP: ip, TargetMAC: self, TargetIP: ip}.marshal(),
	}
}

// Packet types of sll_pkttype (linux/if_packet.h) the filters keep: frames addressed to
// this host, broadcast or multicast. Frames to other hosts (a promiscuous NIC) and our
// own outgoing ones are dropped in the kernel.
const maxKeptPktType = 2 // PACKET_MULTICAST

// arpFilter passes ARP requests that reached this host to user space, nothing else.
// Offsets are from the ARP header: on a SOCK_DGRAM packet socket the filter sees the
// frame without its Ethernet header.
var arpFilter = mustAssemble([]bpf.Instruction{
	bpf.LoadExtension{Num: bpf.ExtType},
	bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: maxKeptPktType, SkipTrue: 3},
	bpf.LoadAbsolute{Off: 6, Size: 2},
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: arpRequest, SkipTrue: 1},
	bpf.RetConstant{Val: 256},
	bpf.RetConstant{Val: 0},
})

func mustAssemble(prog []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic(fmt.Sprintf("announce: bpf program: %v", err))
	}
	return raw
}
