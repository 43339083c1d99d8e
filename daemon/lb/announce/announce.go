// Package announce makes the local L2 segment send the traffic for the LoadBalancer IPs
// this gateway owns to this gateway. It answers ARP requests (IPv4) and Neighbor
// Solicitations (IPv6) for owned addresses with the receiving interface's own MAC, only
// on the interfaces each address is configured for, and announces an address when it
// becomes owned (gratuitous ARP, unsolicited Neighbor Advertisements with the Override
// flag, three rounds at 0, 200 and 500 ms) so that clients and switches move to this
// gateway at once on failover.
//
// The kernel is not asked to do any of it: the LB IPs are not addresses of the gateway's
// interfaces (nftables and iptables modes DNAT them in prerouting), and proxy_arp or
// proxy_ndp would answer for far more than the owned set. Everything goes through
// AF_PACKET sockets, one per family per interface, whose BPF filters pass only ARP
// requests and Neighbor Solicitations up to user space; package daemon/kernel/l2 opens
// them and speaks the wire formats, this package decides what to answer and when.
//
// IPv6 uses a packet socket too, not an ICMPv6 one: the kernel hands an ICMPv6 socket only
// what it delivers locally, and the unicast solicitations of neighbour unreachability
// detection are addressed to the LB IP itself, which is not local here, so they would be
// forwarded or dropped before any ICMPv6 socket saw them, and clients would lose the
// address every time their entry went stale. Sending through the packet socket also needs
// no route or neighbour entry towards the solicitor. The solicited-node groups of owned
// addresses are still joined at the IP layer (l2.NDPConn.Join), for the NIC filter and MLD.
//
// # Network namespaces
//
// Sockets belong to the network namespace of the thread that opens them, and interface
// names are looked up there. An Announcer serves the namespace of the thread that called
// New: it keeps a handle on it, and every later socket and interface lookup (from Set or
// from a retry in Run) runs on a thread inside it. The daemon has one namespace and
// creates it anywhere; a test must call New from a thread locked inside the namespace
// under test (kerneltest.InNetns, lab.Host.Do).
//
// # Interfaces that come and go
//
// A configured interface that is missing, has no Ethernet address or whose sockets
// cannot be opened is reported by Set and retried by Run every few seconds (and on the
// next Set), so a NIC that appears after start is picked up within that interval. The
// retry also notices an interface that was deleted or re-created under the same name, or
// whose MAC changed, and reopens its sockets (and announces its addresses again).
package announce

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegate/edgegate/daemon/internal/fault"
	"github.com/edgegate/edgegate/daemon/kernel/l2"
)

// Sentinel errors, found with errors.Is in what Set returns.
var (
	ErrNoInterface = errors.New("no such interface")
	ErrNoMAC       = errors.New("interface has no Ethernet address")
)

// Error is why one address is not answered on one interface, or (Interface empty) at all.
type Error struct {
	Addr      netip.Addr
	Interface string
	Err       error
}

func (e *Error) Error() string {
	if e.Interface == "" {
		return fmt.Sprintf("announce %s: %v", e.Addr, e.Err)
	}
	return fmt.Sprintf("announce %s on %s: %v", e.Addr, e.Interface, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// DefaultRetry is how often Run retries what failed and checks the interfaces in use.
const DefaultRetry = 5 * time.Second

// defaultSchedule spaces the announcement rounds of a newly owned address: at once, then
// twice more for receivers that missed one (a switch port still coming up, a lost frame).
var defaultSchedule = []time.Duration{0, 200 * time.Millisecond, 500 * time.Millisecond}

// Announcer answers for and announces the LoadBalancer IPs this gateway owns.
type Announcer struct {
	log     *slog.Logger
	sockets l2.Sockets // of the namespace served

	retryEvery time.Duration   // DefaultRetry; tests shorten it
	schedule   []time.Duration // defaultSchedule

	// cfg serialises Set and Run's retries: both open sockets and change links. Fields
	// written only under cfg and mu may be read under either.
	cfg sync.Mutex

	// mu guards what follows. Readers hold it shared from the ownership check to the end of
	// the reply, so an address dropped by Set is not answered once Set has returned.
	mu      sync.RWMutex
	want    map[netip.Addr][]string // the last Set, normalised
	links   map[string]*link        // interfaces in use, by name
	failed  map[pair]error          // configured but not served now; retried
	addrs   map[netip.Addr]*counters
	pending []announcement
	running bool

	readers sync.WaitGroup
	wake    chan struct{} // new pending announcements for Run
	panics  chan error    // a reader's panic, for Run to return
}

// pair is one address on one interface.
type pair struct {
	addr netip.Addr
	name string
}

type counters struct{ answered, announced atomic.Uint64 }

// announcement is one round due for addr on link l. It is skipped if, by then, l no
// longer owns addr (dropped, or the link replaced: a replacement announces afresh).
type announcement struct {
	addr netip.Addr
	l    *link
	at   time.Time
}

// New returns an Announcer for the network namespace of the calling thread (see the
// package doc), which it holds open for as long as it lives (one file descriptor). It
// fails only if that namespace cannot be opened (no /proc). A nil log discards.
func New(log *slog.Logger) (*Announcer, error) {
	sockets, err := l2.Open()
	if err != nil {
		return nil, fmt.Errorf("announce: %w", err)
	}
	return newAnnouncer(log, sockets), nil
}

// newAnnouncer returns an Announcer over sockets (l2.Fake in tests), which it closes
// with Close.
func newAnnouncer(log *slog.Logger, sockets l2.Sockets) *Announcer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Announcer{
		log:        log,
		sockets:    sockets,
		retryEvery: DefaultRetry,
		schedule:   defaultSchedule,
		links:      map[string]*link{},
		failed:     map[pair]error{},
		addrs:      map[netip.Addr]*counters{},
		wake:       make(chan struct{}, 1),
		panics:     make(chan error, 1),
	}
}

// Set replaces the owned addresses, each with the names of the interfaces to announce it
// on. Addresses newly owned on an interface are announced there; addresses dropped from
// an interface stop being answered there before Set returns. Set may be called from any
// goroutine, also while no Run is running: the sockets are then opened, and answering
// and announcing start with Run.
//
// The error joins one *Error per address and interface that is not served (missing
// interface, no MAC, socket failure) and per invalid address. Nothing else is lost: every
// other address is served, and the failed ones are retried by Run.
func (a *Announcer) Set(owned map[netip.Addr][]string) error {
	want, errs := normalise(owned)
	a.cfg.Lock()
	defer a.cfg.Unlock()
	failed := a.reconcile(want)
	for _, p := range sortedPairs(failed) {
		errs = append(errs, &Error{Addr: p.addr, Interface: p.name, Err: failed[p]})
	}
	return errors.Join(errs...)
}

// normalise unmaps IPv4-mapped IPv6 addresses, sorts and dedupes the interface names, and
// rejects addresses no neighbour would ever resolve.
func normalise(owned map[netip.Addr][]string) (map[netip.Addr][]string, []error) {
	want := map[netip.Addr][]string{}
	var errs []error
	for _, addr := range slices.SortedFunc(maps.Keys(owned), netip.Addr.Compare) {
		reject := func(why string) { errs = append(errs, &Error{Addr: addr, Err: errors.New(why)}) }
		switch ip := addr.Unmap(); {
		case !ip.IsValid():
			reject("invalid address")
		case ip.Zone() != "":
			reject("address has a zone")
		case ip.IsUnspecified(), ip.IsMulticast(), ip.IsLoopback():
			reject("not a unicast address")
		case len(owned[addr]) == 0:
			reject("no interface to announce it on")
		default:
			names := want[ip]
			for _, n := range owned[addr] {
				if n == "" {
					reject("empty interface name")
					continue
				}
				names = append(names, n)
			}
			slices.Sort(names)
			if names = slices.Compact(names); len(names) > 0 {
				want[ip] = names
			}
		}
	}
	return want, errs
}

// Run serves until ctx ends: it answers on every link, sends the announcements Set
// scheduled, and retries failed interfaces every DefaultRetry. It returns nil when ctx
// ends, and the error of a reader that panicked; either way every socket is closed and
// nothing is answered until Run is called again, which opens them anew and announces
// every owned address again (a supervisor restarting a failed component does just that).
// Only one Run at a time.
func (a *Announcer) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("announce: Run is already running")
	}
	a.running = true
	for _, l := range a.links {
		a.startReaders(l, l.arp, l.ndp)
	}
	a.mu.Unlock()
	defer a.stop()
	// After an earlier Run the links are closed: open them again.
	a.retry()

	retry := time.NewTicker(a.retryEvery)
	defer retry.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		fault.Point(fault.LBAnnounce)
		if next := a.announceDue(time.Now()); next.IsZero() {
			due.Stop()
		} else {
			due.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-a.panics:
			return err
		case <-a.wake:
		case <-due.C:
		case <-retry.C:
			a.retry()
		}
	}
}

// startReaders starts a reader on each socket given. A reader's panic is handed to Run,
// which returns it, rather than taking the daemon (PID 1) down with it. The caller holds
// mu with running set.
func (a *Announcer) startReaders(l *link, arp l2.ARPConn, ndp l2.NDPConn) {
	guard := func(serve func()) func() {
		return func() {
			defer func() {
				if v := recover(); v != nil {
					l.broken.Store(true)
					select {
					case a.panics <- fmt.Errorf("announce: reader on %s panicked: %v\n%s", l.name, v, debug.Stack()):
					default:
					}
				}
			}()
			serve()
		}
	}
	if arp != nil {
		a.readers.Go(guard(func() { a.serveARP(l, arp) }))
	}
	if ndp != nil {
		a.readers.Go(guard(func() { a.serveNDP(l, ndp) }))
	}
}

// Close releases everything: the links and the pinned namespace. The Announcer is not
// used afterwards (a daemon whose start failed before Run drops it this way).
func (a *Announcer) Close() {
	a.stop()
	a.cfg.Lock()
	defer a.cfg.Unlock()
	a.sockets.Close()
}

// stop closes every link once no Set is in progress, and waits for the readers. What
// was Set stays wanted, for the next Run.
func (a *Announcer) stop() {
	a.cfg.Lock()
	a.mu.Lock()
	a.running = false
	for name, l := range a.links {
		l.close()
		delete(a.links, name)
	}
	a.pending = nil
	a.mu.Unlock()
	a.cfg.Unlock()
	a.readers.Wait()
	select {
	case <-a.panics: // a second reader's, after Run stopped listening
	default:
	}
}

// retry reconciles the last Set again, and logs what changed: a pair that started or
// stopped failing. Unchanged failures stay quiet.
func (a *Announcer) retry() {
	a.cfg.Lock()
	defer a.cfg.Unlock()
	before := a.failed
	after := a.reconcile(a.want)
	for _, p := range sortedPairs(after) {
		if old := before[p]; old == nil || old.Error() != after[p].Error() {
			a.log.Warn("not announcing", "addr", p.addr, "interface", p.name, "err", after[p])
		}
	}
	for _, p := range sortedPairs(before) {
		if after[p] == nil && slices.Contains(a.want[p.addr], p.name) {
			a.log.Info("retry succeeded", "addr", p.addr, "interface", p.name)
		}
	}
}

// announceDue sends the announcement rounds due at now and returns when the next one is.
func (a *Announcer) announceDue(now time.Time) time.Time {
	a.mu.Lock()
	var due []announcement
	var next time.Time
	keep := a.pending[:0]
	for _, p := range a.pending {
		switch {
		case !p.at.After(now):
			due = append(due, p)
		default:
			keep = append(keep, p)
			if next.IsZero() || p.at.Before(next) {
				next = p.at
			}
		}
	}
	a.pending = keep
	a.mu.Unlock()

	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, p := range due {
		if p.l.owned[p.addr] {
			a.announce(p.l, p.addr)
		}
	}
	return next
}

// AddrStats is what the dashboard and metrics show for one owned address.
type AddrStats struct {
	Addr       netip.Addr
	Interfaces []string          // where it is answered now
	Failed     map[string]string // configured interfaces where it is not, and why (retried)
	Answered   uint64            // ARP requests and Neighbor Solicitations answered
	Announced  uint64            // announcement rounds sent, one per interface per round
}

// Stats reports every owned address (the last Set), sorted. Counters start when an
// address becomes owned and are forgotten when it is dropped.
func (a *Announcer) Stats() []AddrStats {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]AddrStats, 0, len(a.want))
	for addr, names := range a.want {
		s := AddrStats{Addr: addr}
		if c := a.addrs[addr]; c != nil {
			s.Answered, s.Announced = c.answered.Load(), c.announced.Load()
		}
		for _, n := range names {
			if l := a.links[n]; l != nil && l.owned[addr] {
				s.Interfaces = append(s.Interfaces, n)
			} else if err := a.failed[pair{addr, n}]; err != nil {
				if s.Failed == nil {
					s.Failed = map[string]string{}
				}
				s.Failed[n] = err.Error()
			}
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y AddrStats) int { return x.Addr.Compare(y.Addr) })
	return out
}

func sortedPairs(m map[pair]error) []pair {
	return slices.SortedFunc(maps.Keys(m), func(x, y pair) int {
		return cmp.Or(x.addr.Compare(y.addr), cmp.Compare(x.name, y.name))
	})
}
