package l2

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"golang.org/x/net/bpf"
)

// etherTypeARP is the ARP ethertype the IPv4 packet socket binds to.
const etherTypeARP = 0x0806

// arpLen is the size of an ARP payload for IPv4 over Ethernet: 8 bytes of header, two
// 6-byte hardware and two 4-byte protocol addresses.
const arpLen = 28

var errARP = errors.New("not an Ethernet/IPv4 ARP packet")

// parseARP decodes the payload of an ARP frame with mdlayher/arp's codec and keeps only
// Ethernet/IPv4 packets. Bytes past the 28 it needs are the Ethernet minimum-frame
// padding and are ignored.
func parseARP(b []byte) (ARP, error) {
	var p arp.Packet
	if err := p.UnmarshalBinary(b); err != nil {
		return ARP{}, fmt.Errorf("arp: %w: %w", err, errARP)
	}
	if p.HardwareType != 1 || p.ProtocolType != 0x0800 {
		return ARP{}, fmt.Errorf("arp: hardware type %d, protocol type %#04x: %w", p.HardwareType, p.ProtocolType, errARP)
	}
	if p.HardwareAddrLength != 6 || p.IPLength != 4 {
		return ARP{}, fmt.Errorf("arp: address lengths %d/%d: %w", p.HardwareAddrLength, p.IPLength, errARP)
	}
	return ARP{
		Op:        uint16(p.Operation),
		SenderMAC: MAC(p.SenderHardwareAddr),
		SenderIP:  p.SenderIP,
		TargetMAC: MAC(p.TargetHardwareAddr),
		TargetIP:  p.TargetIP,
	}, nil
}

// marshalARP encodes p as a 28-byte ARP payload. Addresses that are not IPv4 encode as
// 0.0.0.0 (mdlayher/arp would panic on them).
func marshalARP(p ARP) []byte {
	b, _ := (&arp.Packet{ // never fails
		HardwareType:       1,
		ProtocolType:       0x0800,
		HardwareAddrLength: 6,
		IPLength:           4,
		Operation:          arp.Operation(p.Op),
		SenderHardwareAddr: net.HardwareAddr(p.SenderMAC[:]),
		SenderIP:           ipv4OrZero(p.SenderIP),
		TargetHardwareAddr: net.HardwareAddr(p.TargetMAC[:]),
		TargetIP:           ipv4OrZero(p.TargetIP),
	}).MarshalBinary()
	return b
}

func ipv4OrZero(a netip.Addr) netip.Addr {
	if !a.Is4() {
		return netip.IPv4Unspecified()
	}
	return a
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
	bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: ARPRequest, SkipTrue: 1},
	bpf.RetConstant{Val: 256},
	bpf.RetConstant{Val: 0},
})

func mustAssemble(prog []bpf.Instruction) []bpf.RawInstruction {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		panic(fmt.Sprintf("l2: bpf program: %v", err))
	}
	return raw
}
