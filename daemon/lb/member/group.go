package member

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/internal/fault"
	"github.com/edgegate/edgegate/daemon/kernel/link"
)

// Defaults of Config.
const (
	DefaultPort     = 7480
	DefaultInterval = 100 * time.Millisecond
	// DefaultTimeout is four missed heartbeats: a lost datagram or two never moves an
	// address, a dead gateway's addresses move in under half a second.
	DefaultTimeout = 400 * time.Millisecond
)

// DefaultGroup is the organisation-local multicast group heartbeats go to (TTL 1: they
// never leave the segment).
var DefaultGroup = netip.MustParseAddr("239.255.74.80")

// Config is one gateway's membership on its segment.
type Config struct {
	Name       string   // this gateway's node name
	Interfaces []string // where heartbeats are sent and heard: the pools' interfaces
	Port       int
	Group      netip.Addr
	Interval   time.Duration
	Timeout    time.Duration
	// LeaseFresh is how recently a silent peer's Lease must have been seen renewed for it
	// to count as alive across a partition (a few of its renew intervals).
	LeaseFresh time.Duration
	// Key signs heartbeats (HMAC-SHA256) so that a host on the segment cannot join, or
	// make a gateway give up its addresses, without it. Empty: unsigned (see AwaitKey).
	Key []byte
	// Accept are further keys whose heartbeats are taken: a key rotation in progress.
	Accept [][]byte
	// AwaitKey: the key comes later (SetKeys, from the cluster); until then the group
	// neither sends nor hears, and so this gateway owns no address.
	AwaitKey bool
	// MarksFile keeps the replay protection's marks across restarts (see Marks); empty:
	// in memory only.
	MarksFile string
	// Rejected counts a refused heartbeat by its reason (RejectReasons); nil: not counted.
	Rejected func(reason string)
	Leases   LeaseView // nil without a cluster
	// Links finds the interfaces by name; nil: the kernel's, in the network namespace
	// Open is called in. The group closes it.
	Links link.Links
	Log   *slog.Logger
	Now   func() time.Time
}

// Group sends this gateway's heartbeats and hears its peers'. Open it in the network
// namespace it serves: the socket and the interfaces are that namespace's.
type Group struct {
	cfg  Config
	conn *net.UDPConn
	pc   *ipv4.PacketConn
	// links finds interfaces in the namespace the group was opened in, whatever thread asks.
	links     link.Links
	dst       *net.UDPAddr
	wake      chan struct{} // a heartbeat to send now (draining changed)
	closeOnce sync.Once
	notif     chan struct{}
	keyed     chan struct{} // closed once there is a key, or none is awaited
	keyOnce   sync.Once

	mu      sync.Mutex
	key     []byte
	accept  [][]byte
	marks   *Marks
	refused refusalLog
	view    *View
	seq     uint64
	joined  map[string]*net.Interface
	linkUp  map[string]bool // the joined interfaces' carrier at the last check
	members []string
	bad     int // datagrams refused (RejectReasons)
	// What the announcer follows, as the speaker reports it (Applying, Applied): the peers
	// whose addresses it answers for none of, and whether it may still answer for some of
	// this gateway's own. reporting: the speaker has reported at least once.
	applied   []string
	answering bool
	reporting bool
}

// Open binds the heartbeat socket and joins the group on every interface there is; the
// others are joined when they appear. An interface that does not exist is not an error
// (a NIC may come later), a socket that cannot be opened is.
func Open(cfg Config) (*Group, error) {
	if cfg.Name == "" {
		return nil, errors.New("member: Config.Name (the node name) is empty")
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if !cfg.Group.IsValid() {
		cfg.Group = DefaultGroup
	}
	if !cfg.Group.Is4() || !cfg.Group.IsMulticast() {
		return nil, fmt.Errorf("member: group %s is not an IPv4 multicast address", cfg.Group)
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Timeout < 2*cfg.Interval {
		return nil, fmt.Errorf("member: timeout %v is less than two heartbeat intervals (%v)", cfg.Timeout, cfg.Interval)
	}
	if cfg.LeaseFresh <= 0 {
		cfg.LeaseFresh = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
		return errors.Join(err, serr)
	}}
	pconn, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", cfg.Port))
	if err != nil {
		return nil, fmt.Errorf("member: heartbeat socket on port %d: %w", cfg.Port, err)
	}
	conn := pconn.(*net.UDPConn)
	pc := ipv4.NewPacketConn(conn)
	if err := errors.Join(pc.SetMulticastTTL(1), pc.SetMulticastLoopback(false)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("member: heartbeat socket: %w", err)
	}
	now := cfg.Now()
	marks, err := OpenMarks(cfg.MarksFile, now)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("member: %w", err)
	}
	links := cfg.Links
	if links == nil {
		if links, err = link.Open(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("member: %w", err)
		}
	}
	g := &Group{
		cfg: cfg, conn: conn, pc: pc, links: links, marks: marks,
		dst:  &net.UDPAddr{IP: cfg.Group.AsSlice(), Port: cfg.Port},
		wake: make(chan struct{}, 1), notif: make(chan struct{}, 1), keyed: make(chan struct{}),
		view:   NewView(cfg.Name, cfg.Timeout, cfg.LeaseFresh, now),
		joined: map[string]*net.Interface{}, linkUp: map[string]bool{},
	}
	g.refused.log = cfg.Log
	g.view.Handover = 2 * cfg.Interval
	if len(cfg.Key) > 0 || !cfg.AwaitKey {
		g.SetKeys(cfg.Key, cfg.Accept)
	}
	g.join()
	return g, nil
}

// join joins the group on the configured interfaces not joined yet.
func (g *Group) join() {
	for _, name := range g.cfg.Interfaces {
		if _, ok := g.joined[name]; ok {
			continue
		}
		l, err := g.links.ByName(name)
		if err != nil {
			continue // not there (yet)
		}
		ifi := &l.Interface
		// EADDRINUSE: joined before, dropped by SetInterfaces, wanted again.
		if err := g.pc.JoinGroup(ifi, &net.UDPAddr{IP: g.cfg.Group.AsSlice()}); err != nil && !errors.Is(err, unix.EADDRINUSE) {
			g.cfg.Log.Warn("heartbeats: cannot join the group on the interface", "interface", name, "group", g.cfg.Group, "err", err)
			continue
		}
		g.joined[name] = ifi
		g.cfg.Log.Info("heartbeats: listening", "interface", name, "group", g.cfg.Group, "port", g.cfg.Port)
	}
}

// SetInterfaces replaces the interfaces heartbeats go out on (the pools changed). New ones
// are joined at once; on dropped ones nothing is sent any more (the socket stays in the
// group there, which only means peers there are still heard).
func (g *Group) SetInterfaces(names []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cfg.Interfaces = slices.Clone(names)
	for name := range g.joined {
		if !slices.Contains(names, name) {
			delete(g.joined, name)
		}
	}
	g.join()
}

// Close releases the socket and the interface lookup. Run does so itself when it returns;
// Close is for a Group that never ran (a daemon whose start failed), and is safe after Run.
func (g *Group) Close() {
	g.closeOnce.Do(func() {
		g.conn.Close()
		g.links.Close()
	})
}

// SetKeys sets the key heartbeats are signed with and the further keys taken from peers
// (Config.Key, Config.Accept): the first call lets a group that awaits its key run.
func (g *Group) SetKeys(key []byte, accept [][]byte) {
	g.mu.Lock()
	g.key, g.accept = slices.Clone(key), slices.Clone(accept)
	g.mu.Unlock()
	g.keyOnce.Do(func() { close(g.keyed) })
}

// Run sends heartbeats every Interval, hears the peers' and recomputes the members every
// half Interval, until ctx ends; a group that awaits its key (Config.AwaitKey) does so once
// it has it. It closes the socket when it returns.
func (g *Group) Run(ctx context.Context) error {
	select {
	case <-g.keyed:
	case <-ctx.Done():
		g.Close()
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { g.receive() })
	defer func() {
		g.conn.Close() // ends receive
		wg.Wait()
		g.Close()
	}()
	send := time.NewTicker(g.cfg.Interval)
	defer send.Stop()
	check := time.NewTicker(g.cfg.Interval / 2)
	defer check.Stop()
	rejoin := time.NewTicker(time.Second)
	defer rejoin.Stop()
	g.send()
	for {
		fault.Point(fault.LBHeartbeat)
		select {
		case <-ctx.Done():
			return nil
		case <-send.C:
			g.send()
		case <-g.wake:
			g.send()
		case <-check.C:
			g.checkLinks()
			g.recompute()
		case <-rejoin.C:
			g.mu.Lock()
			g.join()
			g.view.Forget(g.cfg.Now(), time.Hour, g.cfg.Leases)
			g.mu.Unlock()
		}
	}
}

func (g *Group) send() {
	b, unannounced := g.next()
	g.mu.Lock()
	ifaces := make([]*net.Interface, 0, len(g.joined))
	for _, name := range slices.Sorted(maps.Keys(g.joined)) {
		ifaces = append(ifaces, g.joined[name])
	}
	g.mu.Unlock()
	for _, ifi := range ifaces {
		if err := g.pc.SetMulticastInterface(ifi); err != nil {
			continue
		}
		// A send that fails (the link is down) is tried again at the next interval.
		_, _ = g.pc.WriteTo(b, nil, g.dst)
	}
	if unannounced {
		// Said ready just now: with no live peer to confirm it, this gateway claims at once.
		g.recompute()
	}
}

// next is the next heartbeat, signed; unannounced: it is the first to say this gateway is
// ready.
func (g *Group) next() (b []byte, unannounced bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	now := g.cfg.Now()
	hb := Heartbeat{Name: g.cfg.Name, Incarnation: g.marks.Incarnation(), Seq: g.seq, Renew: g.marks.Renewing()}
	unannounced = g.view.Unannounced(now)
	g.view.Announce(&hb, g.answering, now)
	if g.reporting {
		hb.Confirms = true
		hb.Applied, hb.Unheard = g.view.Confirm(g.applied, now, g.cfg.Leases)
	}
	return Encode(hb, g.key), unannounced
}

func (g *Group) receive() {
	// A heartbeat confirms every peer it applies: on a segment of many gateways it outgrows
	// an Ethernet frame and arrives in fragments.
	buf := make([]byte, 1<<16)
	for {
		n, from, err := g.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		changed, wake := g.heard(buf[:n], from)
		if wake {
			g.wakeSend()
		}
		if changed {
			g.recompute()
		}
	}
}

// heard takes in one datagram from a peer: refused unless it is a heartbeat signed with a
// key of the site's and fresh (Marks). changed: what Members can return changed; wake: a
// heartbeat should go now, because this gateway started a new incarnation as the sender
// asked (Heartbeat.Renew), or asks the sender for one.
func (g *Group) heard(b []byte, from netip.AddrPort) (changed, wake bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Now()
	hb, reject := decode(b, g.key, g.accept)
	if reject == "" && hb.Name == g.cfg.Name {
		return false, false // its own, looped back
	}
	if reject == "" {
		asked := g.marks.Renewing()[hb.Name]
		var err error
		if reject, err = g.marks.Admit(hb); err != nil {
			g.cfg.Log.Error("heartbeats: the replay protection's marks cannot be written; after a restart replays of this peer may be taken", "peer", hb.Name, "err", err)
		}
		renewing := g.marks.Renewing()
		// At most once per incarnation of a peer: replays cannot make it send more.
		wake = renewing[hb.Name] != asked
		g.view.AwaitRenewal(len(renewing) > 0, now)
	}
	if reject != "" {
		g.bad++
		if g.cfg.Rejected != nil {
			g.cfg.Rejected(reject)
		}
		g.refused.refuse(from, hb.Name, reject, now)
		return false, wake
	}
	if inc := g.marks.Incarnation(); hb.Renew[g.cfg.Name] == inc {
		if inc, err := g.marks.Renew(now); err != nil {
			g.cfg.Log.Error("heartbeats: cannot start a new incarnation a peer asks for; it refuses this gateway until then", "peer", hb.Name, "err", err)
		} else {
			wake = true
			g.view.Renewed(inc)
			g.cfg.Log.Info("heartbeats: new incarnation, the peer restarted and refuses the old one", "peer", hb.Name, "from", from.Addr())
		}
	}
	return g.view.Heard(hb, now), wake
}

// checkLinks follows the carrier of the heartbeat interfaces: with every one down this
// gateway is isolated; a link coming back makes it listen again before it claims.
func (g *Group) checkLinks() {
	g.mu.Lock()
	defer g.mu.Unlock()
	anyUp, cameBack := len(g.joined) == 0, false
	for name := range g.joined {
		l, err := g.links.ByName(name)
		up := err == nil && l.Up
		if was, known := g.linkUp[name]; known && !was && up {
			cameBack = true
			g.cfg.Log.Info("heartbeats: link back; listening before claiming", "interface", name)
		}
		g.linkUp[name] = up
		anyUp = anyUp || up
	}
	g.view.SetIsolated(!anyUp)
	if cameBack {
		g.view.Relisten(g.cfg.Now())
	}
}

// recompute derives the members and signals Changed when they differ.
func (g *Group) recompute() {
	g.mu.Lock()
	now := g.cfg.Now()
	m := g.view.Members(now, g.cfg.Leases)
	same := slices.Equal(m, g.members)
	selfChanged := slices.Contains(m, g.cfg.Name) != slices.Contains(g.members, g.cfg.Name)
	g.members = m
	// Ready (done listening) but not said yet: say it now, not at the next tick.
	unannounced := g.view.Unannounced(now)
	g.mu.Unlock()
	if selfChanged || unannounced {
		// This gateway starts (or stops) claiming: tell the peers now, not at the next tick.
		g.wakeSend()
	}
	if !same {
		g.cfg.Log.Info("gateways on the segment", "members", strings.Join(m, ","))
		select {
		case g.notif <- struct{}{}:
		default:
		}
	}
}

func (g *Group) wakeSend() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Members returns the gateways that own addresses now, sorted.
func (g *Group) Members() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.members)
}

// Changed signals (coalesced) that Members changed.
func (g *Group) Changed() <-chan struct{} { return g.notif }

// SetDraining hands this gateway's addresses over (or takes its share again): it owns
// nothing from now, and its heartbeats say it drains once the speaker reports the
// addresses let go (Applied), so that the peers take them only then. Serving again, it
// says so at once and claims once the peers confirm they let its share go.
func (g *Group) SetDraining(d bool) {
	g.mu.Lock()
	g.view.SetDraining(d)
	g.mu.Unlock()
	g.wakeSend()
	g.recompute()
}

// Applying tells the group that the speaker is about to make the announcer follow
// members: until Applied, the announcer may answer for what either the members it
// followed or these give this gateway, and for the addresses of no peer absent from
// either. The heartbeats say so (Heartbeat.Applied, and this gateway's own readiness).
func (g *Group) Applying(members []string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reporting = true
	g.applied = slices.DeleteFunc(slices.Clone(g.applied), func(p string) bool { return !slices.Contains(members, p) })
	g.answering = g.answering || slices.Contains(members, g.cfg.Name)
}

// Applied tells the group that the announcer follows members now (Applying went before),
// and sends a heartbeat at once: a peer waiting for this gateway to let its addresses go,
// or to stop answering before it takes this gateway's, hears it without delay.
func (g *Group) Applied(members []string) {
	g.mu.Lock()
	g.reporting = true
	g.applied = slices.DeleteFunc(slices.Clone(members), func(p string) bool { return p == g.cfg.Name })
	g.answering = slices.Contains(members, g.cfg.Name)
	g.mu.Unlock()
	g.wakeSend()
}

// Peers describes the peers heard, and the datagrams refused.
func (g *Group) Peers() ([]PeerStatus, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.view.Peers(g.cfg.Now(), g.cfg.Leases), g.bad
}
