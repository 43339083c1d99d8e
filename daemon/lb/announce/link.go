package announce

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

// link is one interface the announcer answers on, with its sockets. The sockets of a
// family are opened when the first address of that family is owned there.
type link struct {
	name  string
	index int
	mac   l2.MAC

	arp l2.ARPConn // ARP requests in, replies and gratuitous ARP out; nil without IPv4
	ndp l2.NDPConn // solicitations in, advertisements out, solicited-node groups; nil without IPv6

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
// the NDP socket leaves every solicited-node group it joined.
func (l *link) close() {
	l.owned = nil
	l.closed.Store(true)
	if l.arp != nil {
		l.arp.Close()
	}
	if l.ndp != nil {
		l.ndp.Close()
	}
}

// serves reports whether l has the socket that serves addr's family.
func (l *link) serves(addr netip.Addr) bool {
	if addr.Is4() {
		return l.arp != nil
	}
	return l.ndp != nil
}

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
func (a *Announcer) serveARP(l *link, c l2.ARPConn) {
	for {
		req, err := c.Read()
		if err != nil {
			if a.readError(l, "ARP", err) {
				return
			}
			continue
		}
		a.answerARP(l, c, req)
	}
}

// answerARP replies to req if its target is owned on l. The lock is held across the
// check and the write, so once Set has dropped an address no reply for it leaves.
func (a *Announcer) answerARP(l *link, c l2.ARPConn, req l2.ARP) {
	answer(a, l, req.TargetIP, "ARP reply", c.Write, func() (l2.ARP, l2.MAC, bool) { return arpAnswer(req, l.mac) })
}

// serveNDP answers the Neighbor Solicitations that reach l's IPv6 socket until it is
// closed.
func (a *Announcer) serveNDP(l *link, c l2.NDPConn) {
	for {
		s, from, err := c.Read()
		if err != nil {
			if a.readError(l, "NDP", err) {
				return
			}
			continue
		}
		a.answerNDP(l, c, s, from)
	}
}

// answerNDP advertises s's target if it is owned on l, under the same lock as answerARP.
func (a *Announcer) answerNDP(l *link, c l2.NDPConn, s l2.Solicitation, from l2.MAC) {
	answer(a, l, s.Target, "neighbor advertisement", c.Write, func() (l2.Advertisement, l2.MAC, bool) { return ndpAnswer(s, from, l.mac) })
}

// answer writes the answer that build makes (when it makes one) to a request for target,
// if target is owned on l, and counts it; what names the answer in the log. It holds a.mu
// for reading across the check and the write.
func answer[P any](a *Announcer, l *link, target netip.Addr, what string, write func(P, l2.MAC) error, build func() (P, l2.MAC, bool)) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if !l.owned[target] {
		return
	}
	reply, to, ok := build()
	if !ok {
		return
	}
	if err := write(reply, to); err != nil {
		a.log.Warn(what+" failed", "addr", target, "interface", l.name, "to", to, "err", err)
		return
	}
	a.addrs[target].answered.Add(1)
}

// announce sends one round of announcements of addr on l: gratuitous ARP (both forms)
// or an unsolicited Neighbor Advertisement. The caller holds Announcer.mu.
func (a *Announcer) announce(l *link, addr netip.Addr) {
	var errs []error
	if addr.Is4() {
		for _, p := range garp(addr, l.mac) {
			errs = append(errs, l.arp.Write(p, l2.BroadcastMAC))
		}
	} else {
		errs = append(errs, l.ndp.Write(unsolicitedNA(addr, l.mac), l2.AllNodesMAC))
	}
	if err := errors.Join(errs...); err != nil {
		a.log.Warn("announcement failed", "addr", addr, "interface", l.name, "err", err)
		return
	}
	a.addrs[addr].announced.Add(1)
}
