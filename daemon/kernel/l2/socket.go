package l2

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Namespace opens packet sockets in one network namespace, whichever thread asks (see
// netnsPin).
type Namespace struct{ ns *netnsPin }

var _ Sockets = (*Namespace)(nil)

// Open returns the Sockets of the network namespace of the calling thread, which it holds
// open until Close (one file descriptor). It fails only if that namespace cannot be
// opened (no /proc).
func Open() (*Namespace, error) {
	ns, err := pinNetns()
	if err != nil {
		return nil, err
	}
	return &Namespace{ns: ns}, nil
}

// Close releases the pinned namespace.
func (n *Namespace) Close() { n.ns.close() }

// Interfaces lists the interfaces of the namespace.
func (n *Namespace) Interfaces() (map[string]net.Interface, error) {
	var byName map[string]net.Interface
	err := n.ns.do(func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return fmt.Errorf("list interfaces: %w", err)
		}
		byName = make(map[string]net.Interface, len(ifs))
		for _, ifi := range ifs {
			byName[ifi.Name] = ifi
		}
		return nil
	})
	return byName, err
}

// ListenARP opens ifi's ARP socket in the namespace.
func (n *Namespace) ListenARP(ifi net.Interface) (ARPConn, error) {
	var c *packet.Conn
	err := n.ns.do(func() (err error) {
		c, err = listen(&ifi, etherTypeARP, arpFilter)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &arpConn{c: c, buf: make([]byte, 256)}, nil
}

// ListenNDP opens ifi's IPv6 packet socket and its membership socket in the namespace.
func (n *Namespace) ListenNDP(ifi net.Interface) (NDPConn, error) {
	var nc *ndpConn
	err := n.ns.do(func() error {
		c, err := listen(&ifi, etherTypeIPv6, nsFilter)
		if err != nil {
			return err
		}
		g, err := openGroups(ifi.Index)
		if err != nil {
			c.Close()
			return err
		}
		nc = &ndpConn{c: c, groups: g, buf: make([]byte, 1500)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return nc, nil
}

// listen opens a SOCK_DGRAM packet socket for one ethertype on ifi, its filter attached
// before it is bound so nothing unfiltered is ever queued. SOCK_DGRAM because the kernel
// then writes the Ethernet header (our MAC as source) and hands us the frame's source
// MAC, and the filter offsets start at the ARP or IPv6 header.
func listen(ifi *net.Interface, etherType int, filter []bpf.RawInstruction) (*packet.Conn, error) {
	return packet.Listen(ifi, packet.Datagram, etherType, &packet.Config{Filter: filter})
}

// send writes one frame to the Ethernet address to. The deadline keeps a wedged device
// queue from holding the announcer's lock for long.
func send(c *packet.Conn, b []byte, to MAC) error {
	if err := c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	_, err := c.WriteTo(b, &packet.Addr{HardwareAddr: net.HardwareAddr(to[:])})
	return err
}

// arpConn reads and writes ARP payloads. Read errors come back as the socket reports
// them: a closed socket reports poll's unexported ErrFileClosing, neither net.ErrClosed
// nor os.ErrClosed, so the caller tells a close from a failure itself.
type arpConn struct {
	c   *packet.Conn
	buf []byte // Read's; one reader per socket
}

func (a *arpConn) Read() (ARP, error) {
	for {
		n, _, err := a.c.ReadFrom(a.buf)
		if err != nil {
			return ARP{}, err
		}
		if p, err := parseARP(a.buf[:n]); err == nil {
			return p, nil
		}
	}
}

func (a *arpConn) Write(p ARP, to MAC) error { return send(a.c, marshalARP(p), to) }

func (a *arpConn) Close() error { return a.c.Close() }

// ndpConn reads solicitations and writes advertisements on the packet socket, and holds
// the solicited-node memberships on a socket of its own.
type ndpConn struct {
	c      *packet.Conn
	groups *groups
	buf    []byte
}

func (d *ndpConn) Read() (Solicitation, MAC, error) {
	for {
		n, from, err := d.c.ReadFrom(d.buf)
		if err != nil {
			return Solicitation{}, MAC{}, err
		}
		s, err := parseNS(d.buf[:n])
		if err != nil {
			continue
		}
		var src MAC
		if pa, ok := from.(*packet.Addr); ok && len(pa.HardwareAddr) == len(src) {
			src = MAC(pa.HardwareAddr)
		}
		return s, src, nil
	}
}

func (d *ndpConn) Write(a Advertisement, to MAC) error {
	b, err := marshalNA(a)
	if err != nil {
		return err
	}
	return send(d.c, b, to)
}

func (d *ndpConn) Join(addr netip.Addr) error  { return d.groups.join(addr) }
func (d *ndpConn) Leave(addr netip.Addr) error { return d.groups.leave(addr) }

func (d *ndpConn) Close() error {
	err := d.c.Close()
	d.groups.close()
	return err
}

// groups holds an interface's solicited-node multicast memberships on an IPv6 socket of
// their own. Joining at the IP layer, rather than adding a link-layer multicast address
// to the packet socket, programs the NIC's multicast filter and also sends the MLD
// reports that snooping switches need to forward the solicitations to this port. The
// socket is UDP and never bound, so it receives nothing itself.
type groups struct {
	fd    int
	index int
	refs  map[netip.Addr]int // joined groups, by how many owned addresses map to each
}

func openGroups(index int) (*groups, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("IPv6 membership socket: %w", err)
	}
	return &groups{fd: fd, index: index, refs: map[netip.Addr]int{}}, nil
}

func (g *groups) join(addr netip.Addr) error {
	group := SolicitedNode(addr)
	if g.refs[group] == 0 {
		if err := g.membership(unix.IPV6_JOIN_GROUP, group); err != nil {
			return fmt.Errorf("join %s: %w", group, err)
		}
	}
	g.refs[group]++
	return nil
}

func (g *groups) leave(addr netip.Addr) error {
	group := SolicitedNode(addr)
	g.refs[group]--
	if g.refs[group] > 0 {
		return nil
	}
	delete(g.refs, group)
	if err := g.membership(unix.IPV6_LEAVE_GROUP, group); err != nil {
		return fmt.Errorf("leave %s: %w", group, err)
	}
	return nil
}

func (g *groups) membership(opt int, group netip.Addr) error {
	return unix.SetsockoptIPv6Mreq(g.fd, unix.IPPROTO_IPV6, opt,
		&unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(g.index)})
}

func (g *groups) close() { unix.Close(g.fd) }
