package announce

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

// reconcile makes the links serve want: it opens what is missing (in the pinned
// namespace, without mu), then under mu installs the new sockets, drops and adds owned
// addresses, joins and leaves solicited-node groups, closes links nothing uses any more
// and schedules the announcements of newly owned pairs. It returns the pairs it could not
// serve. The caller holds cfg.
func (a *Announcer) reconcile(want map[netip.Addr][]string) map[pair]error {
	need := map[string]map[netip.Addr]bool{}
	for addr, names := range want {
		for _, n := range names {
			if need[n] == nil {
				need[n] = map[netip.Addr]bool{}
			}
			need[n][addr] = true
		}
	}
	failed := map[pair]error{}
	opened := a.open(need, failed)

	a.mu.Lock()
	defer a.mu.Unlock()
	a.want = want
	for name, o := range opened {
		a.install(name, o)
	}
	now := time.Now()
	for name, l := range a.links {
		a.own(l, need[name], failed, now)
		if len(l.owned) == 0 {
			l.close()
			delete(a.links, name)
		}
	}
	for addr := range a.addrs {
		if want[addr] == nil {
			delete(a.addrs, addr)
		}
	}
	for addr := range want {
		if a.addrs[addr] == nil {
			a.addrs[addr] = &counters{}
		}
	}
	a.failed = failed
	select {
	case a.wake <- struct{}{}:
	default:
	}
	return failed
}

// opening is what open made for one interface: sockets to add to its link or, when
// fresh, to a new link that replaces it.
type opening struct {
	ifi   net.Interface
	fresh bool // no link yet, or it is broken, or the interface was re-created or got a new MAC
	arp   l2.ARPConn
	ndp   l2.NDPConn
}

func (o *opening) close() {
	if o.arp != nil {
		o.arp.Close()
	}
	if o.ndp != nil {
		o.ndp.Close()
	}
}

// open opens, in the pinned namespace, the sockets the interfaces in need lack, and
// records in failed the pairs it cannot serve. It reads links and their owned sets
// without mu: only holders of cfg change them.
func (a *Announcer) open(need map[string]map[netip.Addr]bool, failed map[pair]error) map[string]*opening {
	if len(need) == 0 {
		return nil
	}
	byName, err := a.sockets.Interfaces()
	if err != nil {
		// Nothing new could be looked at: what is served now stays served, the rest
		// waits for the next retry.
		for name, addrs := range need {
			l := a.links[name]
			for addr := range addrs {
				if l == nil || l.broken.Load() || !l.owned[addr] {
					failed[pair{addr, name}] = err
				}
			}
		}
		return nil
	}
	opened := map[string]*opening{}
	for name, addrs := range need {
		if o := a.openLink(name, byName[name], addrs, failed); o != nil {
			opened[name] = o
		}
	}
	return opened
}

// openLink opens what interface ifi (zero if there is none by that name) lacks for addrs.
func (a *Announcer) openLink(name string, ifi net.Interface, addrs map[netip.Addr]bool, failed map[pair]error) *opening {
	fail := func(family func(netip.Addr) bool, err error) {
		for addr := range addrs {
			if family(addr) {
				failed[pair{addr, name}] = err
			}
		}
	}
	all := func(netip.Addr) bool { return true }
	if ifi.Index == 0 {
		fail(all, ErrNoInterface)
		return nil
	}
	if len(ifi.HardwareAddr) != len(l2.MAC{}) {
		fail(all, fmt.Errorf("%w (hardware address %q)", ErrNoMAC, ifi.HardwareAddr.String()))
		return nil
	}
	old := a.links[name]
	o := &opening{ifi: ifi}
	o.fresh = old == nil || old.broken.Load() || old.index != ifi.Index || old.mac != l2.MAC(ifi.HardwareAddr)
	var v4, v6 bool
	for addr := range addrs {
		v4, v6 = v4 || addr.Is4(), v6 || addr.Is6()
	}
	if v4 && (o.fresh || old.arp == nil) {
		if c, err := a.sockets.ListenARP(ifi); err != nil {
			fail(netip.Addr.Is4, fmt.Errorf("ARP socket: %w", err))
		} else {
			o.arp = c
		}
	}
	if v6 && (o.fresh || old.ndp == nil) {
		if c, err := a.sockets.ListenNDP(ifi); err != nil {
			fail(netip.Addr.Is6, fmt.Errorf("NDP socket: %w", err))
		} else {
			o.ndp = c
		}
	}
	if !o.fresh && o.arp == nil && o.ndp == nil {
		return nil
	}
	return o
}

// install puts o's sockets to use: on a new link that replaces the old one when o is
// fresh, else on the existing link. The caller holds mu.
func (a *Announcer) install(name string, o *opening) {
	l := a.links[name]
	if o.fresh {
		if l != nil {
			a.log.Info("reopening interface", "interface", name, "index", o.ifi.Index, "mac", o.ifi.HardwareAddr)
			l.close()
			delete(a.links, name)
		}
		if o.arp == nil && o.ndp == nil {
			return
		}
		l = &link{name: name, index: o.ifi.Index, mac: l2.MAC(o.ifi.HardwareAddr), owned: map[netip.Addr]bool{}}
		a.links[name] = l
	}
	if o.arp != nil {
		l.arp = o.arp
	}
	if o.ndp != nil {
		l.ndp = o.ndp
	}
	if a.running {
		a.startReaders(l, o.arp, o.ndp)
	}
}

// own makes l answer exactly for the addresses of addrs that did not fail: dropped ones
// first (and their solicited-node groups), then the new ones, each joined and scheduled
// for announcement. The caller holds mu.
func (a *Announcer) own(l *link, addrs map[netip.Addr]bool, failed map[pair]error, now time.Time) {
	for addr := range l.owned {
		if addrs[addr] && failed[pair{addr, l.name}] == nil {
			continue
		}
		delete(l.owned, addr)
		if addr.Is6() {
			if err := l.ndp.Leave(addr); err != nil {
				a.log.Warn("leaving solicited-node group", "addr", addr, "interface", l.name, "err", err)
			}
		}
		a.log.Info("stopped answering", "addr", addr, "interface", l.name)
	}
	for addr := range addrs {
		p := pair{addr, l.name}
		if l.owned[addr] || failed[p] != nil {
			continue
		}
		if !l.serves(addr) {
			// open records a failure for every family it cannot open; this keeps a broken
			// invariant from turning into a nil socket on the hot path.
			failed[p] = errors.New("no socket for its address family")
			continue
		}
		if addr.Is6() {
			if err := l.ndp.Join(addr); err != nil {
				failed[p] = err
				continue
			}
		}
		l.owned[addr] = true
		for _, after := range a.schedule {
			a.pending = append(a.pending, announcement{addr: addr, l: l, at: now.Add(after)})
		}
		a.log.Info("answering and announcing", "addr", addr, "interface", l.name, "mac", l.mac)
	}
}
