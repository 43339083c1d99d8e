// Package l2 is the announcer's access to the link layer: AF_PACKET sockets that hear ARP
// requests and Neighbor Solicitations on one interface and send replies, advertisements
// and gratuitous ARP, and the solicited-node multicast memberships that make the NIC and
// MLD-snooping switches deliver the solicitations. The wire formats are
// github.com/mdlayher/arp's and github.com/mdlayher/ndp's; what announce sees are the
// types below, so its logic runs against Fake without root.
//
// IPv6 uses a packet socket too, not ndp's ICMPv6 Conn: the kernel hands an ICMPv6 socket
// only what it delivers locally, and the unicast solicitations of neighbour unreachability
// detection are addressed to the LB IP itself, which is not local here.
package l2

import (
	"fmt"
	"net"
	"net/netip"
)

// MAC is an Ethernet address; an array so packets carry it without allocating.
type MAC [6]byte

// BroadcastMAC is where ARP requests and gratuitous ARP go.
var BroadcastMAC = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func (m MAC) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// ARP operations (RFC 826).
const (
	ARPRequest = 1
	ARPReply   = 2
)

// ARP is an Ethernet/IPv4 ARP payload (hardware type 1, protocol type 0x0800).
type ARP struct {
	Op        uint16
	SenderMAC MAC
	SenderIP  netip.Addr
	TargetMAC MAC
	TargetIP  netip.Addr
}

// Solicitation is a Neighbor Solicitation that passed RFC 4861 section 7.1.1 validation.
type Solicitation struct {
	Src, Dst netip.Addr
	Target   netip.Addr
	SourceLL MAC // the source link-layer address option, when HasLL
	HasLL    bool
}

// Advertisement is a Neighbor Advertisement to send: hop limit 255, with the target
// link-layer address option. It never has the router flag: an LB IP is no router.
type Advertisement struct {
	Src, Dst  netip.Addr
	Target    netip.Addr
	Solicited bool
	Override  bool
	TargetLL  MAC
}

var (
	// AllNodes is where unsolicited advertisements and answers to DAD probes go.
	AllNodes    = netip.MustParseAddr("ff02::1")
	AllNodesMAC = MAC{0x33, 0x33, 0, 0, 0, 1}
)

// SolicitedNode is the solicited-node multicast group of ip (RFC 4291 2.7.1):
// ff02::1:ff00:0/104 with the low 24 bits of ip.
func SolicitedNode(ip netip.Addr) netip.Addr {
	a := ip.As16()
	return netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: a[13], 14: a[14], 15: a[15]})
}

// Sockets opens the link-layer sockets of one network namespace: Namespace, or Fake.
type Sockets interface {
	// Interfaces lists the namespace's interfaces by name.
	Interfaces() (map[string]net.Interface, error)
	// ListenARP opens a socket that reads the ARP requests reaching ifi.
	ListenARP(ifi net.Interface) (ARPConn, error)
	// ListenNDP opens a socket that reads the Neighbor Solicitations reaching ifi, with
	// the interface's solicited-node memberships.
	ListenNDP(ifi net.Interface) (NDPConn, error)
	// Close releases the namespace; the sockets opened stay open until closed.
	Close()
}

// ARPConn is an ARP socket on one interface.
type ARPConn interface {
	// Read returns the next ARP request; frames that do not parse are skipped.
	Read() (ARP, error)
	// Write sends p to the Ethernet address to.
	Write(p ARP, to MAC) error
	Close() error
}

// NDPConn is an IPv6 neighbour discovery socket on one interface.
type NDPConn interface {
	// Read returns the next valid Neighbor Solicitation and the Ethernet source of its
	// frame; packets that do not pass validation are skipped.
	Read() (Solicitation, MAC, error)
	// Write sends a to the Ethernet address to.
	Write(a Advertisement, to MAC) error
	// Join joins addr's solicited-node group; addresses that share their low 24 bits
	// share it, and Leave leaves it once no joined address needs it.
	Join(addr netip.Addr) error
	Leave(addr netip.Addr) error
	// Close closes the socket and leaves every group joined.
	Close() error
}
