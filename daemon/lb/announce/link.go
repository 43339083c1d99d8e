package announce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// link is one interface the announcer answers on, with its sockets. The sockets of a
// family are opened when the first address of that family is owned there.
type link struct {
	name  string
	index int
	mac   mac

	arp    *packet.Conn // ARP requests in, replies and gratuitous ARP out; nil without IPv4
	ndp    *packet.Conn // solicitations in, advertisements out; nil without IPv6
	groups *groups      // solicited-node memberships; set with ndp

	// owned is what this interface answers for; nil once the link is closed, so a reader
	// or a pending announcement holding a closed link finds nothing to answer. Written
	// under Announcer.cfg and Announcer.mu, read under either.
	owned map[netip.Addr]bool

	// broken is set by a reader whose socket failed: the next retry opens the link anew.
	broken atomic.Bool
	// closed is set before the sockets are closed, so their readers know the read error
	// that follows is the end (a closed packet socket reports poll's unexported
	// ErrFileClosing, neither net.ErrClosed nor os.ErrClosed).
	closed atomic.Bool
}

// close stops the link for good: the readers end on their closed sockets, and closing
// the membership socket leaves every solicited-node group it joined.
func (l *link) close() {
	l.owned = nil
	l.closed.Store(true)
	if l.arp != nil {
		l.arp.Close()
	}
	if l.ndp != nil {
		l.ndp.Close()
	}
	if l.groups != nil {
		l.groups.close()
	}
}

// conn is the socket that serves addr's family here, nil when there is none.
func (l *link) conn(addr netip.Addr) *packet.Conn {
	if addr.Is4() {
		return l.arp
	}
	return l.ndp
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
func send(c *packet.Conn, b []byte, to mac) error {
	if err := c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	_, err := c.WriteTo(b, &packet.Addr{HardwareAddr: net.HardwareAddr(to[:])})
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

// join adds addr's solicited-node group; addresses that share their low 24 bits share it.
func (g *groups) join(addr netip.Addr) error {
	group := solicitedNode(addr)
	if g.refs[group] == 0 {
		if err := g.membership(unix.IPV6_JOIN_GROUP, group); err != nil {
			return fmt.Errorf("join %s: %w", group, err)
		}
	}
	g.refs[group]++
	return nil
}

// leave drops addr's solicited-node group once no owned address needs it.
func (g *groups) leave(addr netip.Addr) error {
	group := solicitedNode(addr)
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

// readError decides what a reader does after a failed read: end (true) or read on. A
// closed link or socket means the link was closed on purpose. ENETDOWN is reported once
// when the interface goes down; the socket serves again when it comes back up. Anything
// else marks the link broken for the next retry to reopen.
func (a *Announcer) readError(l *link, family string, err error) bool {
	switch {
	case l.closed.Load(), errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrClosed):
		return true
	case errors.Is(err, syscall.ENETDOWN):
		a.log.Info("interface down; answering again once it is up", "interface", l.name, "family", family)
		return false
	}
	a.log.Warn("socket failed; reopening it at the next retry", "interface", l.name, "family", family, "err", err)
	l.broken.Store(true)
	return true
}

// serveARP answers the ARP requests that reach l's ARP socket until it is closed.
func (a *Announcer) serveARP(l *link, c *packet.Conn) {
	buf := make([]byte, 256)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			if a.readError(l, "ARP", err) {
				return
			}
			continue
		}
		if req, err := parseARP(buf[:n]); err == nil {
			a.answerARP(l, c, req)
		}
	}
}

// answerARP replies to req if its target is owned on l. The lock is held across the
// check and the write, so once Set has dropped an address no reply for it leaves.
func (a *Announcer) answerARP(l *link, c *packet.Conn, req arpPacket) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if !l.owned[req.TargetIP] {
		return
	}
	reply, to, ok := arpAnswer(req, l.mac)
	if !ok {
		return
	}
	if err := send(c, reply.marshal(), to); err != nil {
		a.log.Warn("ARP reply failed", "addr", req.TargetIP, "interface", l.name, "to", to, "err", err)
		return
	}
	a.addrs[req.TargetIP].answered.Add(1)
}

// serveNDP answers the Neighbor Solicitations that reach l's IPv6 socket until it is
// closed.
func (a *Announcer) serveNDP(l *link, c *packet.Conn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if a.readError(l, "NDP", err) {
				return
			}
			continue
		}
		s, err := parseNS(buf[:n])
		if err != nil {
			continue
		}
		var src mac
		if pa, ok := from.(*packet.Addr); ok && len(pa.HardwareAddr) == len(src) {
			copy(src[:], pa.HardwareAddr)
		}
		a.answerNDP(l, c, s, src)
	}
}

// answerNDP advertises s's target if it is owned on l, under the same lock as answerARP.
func (a *Announcer) answerNDP(l *link, c *packet.Conn, s solicitation, from mac) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if !l.owned[s.Target] {
		return
	}
	na, to, ok := ndpAnswer(s, from, l.mac)
	if !ok {
		return
	}
	if err := send(c, na.marshal(), to); err != nil {
		a.log.Warn("neighbor advertisement failed", "addr", s.Target, "interface", l.name, "to", to, "err", err)
		return
	}
	a.addrs[s.Target].answered.Add(1)
}

// announce sends one round of announcements of addr on l: gratuitous ARP (both forms)
// or an unsolicited Neighbor Advertisement. The caller holds Announcer.mu.
func (a *Announcer) announce(l *link, addr netip.Addr) {
	c := l.conn(addr)
	var frames [][]byte
	to := broadcastMAC
	if addr.Is4() {
		frames = garp(addr, l.mac)
	} else {
		frames, to = [][]byte{unsolicitedNA(addr, l.mac)}, allNodesMAC
	}
	var errs []error
	for _, b := range frames {
		errs = append(errs, send(c, b, to))
	}
	if err := errors.Join(errs...); err != nil {
		a.log.Warn("announcement failed", "addr", addr, "interface", l.name, "err", err)
		return
	}
	a.addrs[addr].announced.Add(1)
}
