package member

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// simGateway is one gateway of a simulated segment: its View, and what its announcer
// follows. The speaker is modelled as applying the members at once (Applying and Applied
// in one step) unless frozen, when it keeps following the members it had.
type simGateway struct {
	v       *View
	inc     int64
	seq     uint64
	applied []string // the members the announcer follows
	frozen  bool
	last    Heartbeat
}

// simSegment runs gateways in steps of one heartbeat interval. hears[to][from] says whether
// to hears from's heartbeats; leases is every gateway's LeaseView (a shared API server).
type simSegment struct {
	t      *testing.T
	now    time.Time
	gws    map[string]*simGateway
	hears  map[string]map[string]bool
	leases LeaseView
	addrs  []netip.Addr
	// both records every address answered by two gateways at a step, and when.
	both []string
}

func newSimSegment(t *testing.T, now time.Time) *simSegment {
	s := &simSegment{t: t, now: now, gws: map[string]*simGateway{}, hears: map[string]map[string]bool{}}
	for i := range 64 {
		s.addrs = append(s.addrs, netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}))
	}
	return s
}

// start (re)starts gateway name at s.now with a new incarnation.
func (s *simSegment) start(name string, inc int64) {
	v := NewView(name, ms(400), 30*time.Second, s.now)
	v.Handover = ms(200)
	s.gws[name] = &simGateway{v: v, inc: inc}
	if s.hears[name] == nil {
		s.hears[name] = map[string]bool{}
	}
}

func (s *simSegment) link(to, from string, up bool) { s.hears[to][from] = up }

// owned is what gateway name's announcer answers for.
func (s *simSegment) owned(name string) []netip.Addr {
	return Owned(s.addrs, s.gws[name].applied, name)
}

// step advances by one heartbeat interval: each gateway computes its members, applies them
// (unless frozen), sends its heartbeat as Group does, and the heartbeats are delivered
// where the links let them. Every address answered by two gateways is recorded.
func (s *simSegment) step() {
	s.now = s.now.Add(ms(100))
	names := slices.Sorted(maps.Keys(s.gws))
	for _, n := range names {
		g := s.gws[n]
		m := g.v.Members(s.now, s.leases)
		if !g.frozen {
			g.applied = m
		}
		g.seq++
		hb := Heartbeat{Name: n, Incarnation: g.inc, Seq: g.seq}
		g.v.Announce(&hb, slices.Contains(g.applied, n), s.now)
		hb.Confirms = true
		peers := slices.DeleteFunc(slices.Clone(g.applied), func(p string) bool { return p == n })
		hb.Applied, hb.Unheard = g.v.Confirm(peers, s.now, s.leases)
		g.last = hb
	}
	for _, to := range names {
		for _, from := range names {
			if to != from && s.hears[to][from] {
				s.gws[to].v.Heard(s.gws[from].last, s.now.Add(ms(1)))
			}
		}
	}
	answered := map[netip.Addr][]string{}
	for _, n := range names {
		for _, a := range s.owned(n) {
			answered[a] = append(answered[a], n)
		}
	}
	for a, by := range answered {
		if len(by) > 1 {
			s.both = append(s.both, fmt.Sprintf("%s by %s at %v", a, strings.Join(by, ","), s.now.Sub(t0)))
		}
	}
}

func (s *simSegment) run(d time.Duration) {
	for end := s.now.Add(d); s.now.Before(end); {
		s.step()
	}
}

// answeredOnce checks that every address is answered by exactly one gateway now, and by
// no two at any step so far.
func (s *simSegment) answeredOnce(when string) {
	s.t.Helper()
	if len(s.both) > 0 {
		s.t.Errorf("%s: answered by two gateways (%d): %s", when, len(s.both), strings.Join(s.both[:min(len(s.both), 5)], "; "))
		s.both = nil
	}
	var none []string
	for _, a := range s.addrs {
		n := 0
		for name := range s.gws {
			if slices.Contains(s.owned(name), a) {
				n++
			}
		}
		if n == 0 {
			none = append(none, a.String())
		}
	}
	if len(none) > 0 {
		s.t.Errorf("%s: %d of %d addresses answered by no gateway (%s...)", when, len(none), len(s.addrs), none[0])
	}
}

// renewing is a LeaseView of a site where each listed gateway's Lease is seen renewed every
// 10 s (on the watcher's clock) while renew[name] is true.
type renewing struct {
	seen  map[string]time.Time
	renew map[string]bool
}

func (r *renewing) tick(now time.Time) {
	for name, on := range r.renew {
		if on && now.Sub(r.seen[name]) >= 10*time.Second {
			r.seen[name] = now
		}
	}
}

// run steps the segment n times, each after a tick of the Leases.
func (r *renewing) run(s *simSegment, n int) {
	for range n {
		r.tick(s.now)
		s.step()
	}
}

func (r *renewing) view(name string) (time.Time, bool) { t, ok := r.seen[name]; return t, ok }

// oneWaySegment: gw-a and gw-p share the addresses; then gw-a restarts while gw-p no longer
// hears it (gw-a still hears gw-p). renewA says whether gw-a's Lease keeps being renewed.
func oneWaySegment(t *testing.T, renewA bool) (*simSegment, *renewing) {
	s := newSimSegment(t, t0)
	r := &renewing{seen: map[string]time.Time{}, renew: map[string]bool{"gw-a": true, "gw-p": true}}
	s.leases = r.view
	s.start("gw-a", 1)
	s.start("gw-p", 1)
	s.link("gw-a", "gw-p", true)
	s.link("gw-p", "gw-a", true)
	r.run(s, 20)
	s.answeredOnce("two-way, settled")
	if len(s.owned("gw-a")) == 0 || len(s.owned("gw-p")) == 0 {
		t.Fatalf("two-way: gw-a answers %d, gw-p %d addresses, want both some", len(s.owned("gw-a")), len(s.owned("gw-p")))
	}
	// gw-p stops hearing gw-a, which restarts (its announcer answering nothing).
	s.link("gw-p", "gw-a", false)
	s.start("gw-a", 2)
	r.renew["gw-a"] = renewA
	return s, r
}

// TestOneWayPartitionTakenForAlive: gw-a hears gw-p, gw-p does not hear gw-a but sees its
// Lease renewed, so it keeps gw-a a member and answers none of gw-a's addresses. gw-a,
// ready, must claim them although gw-p can never confirm its readiness: gw-p says it
// yields without hearing it (Heartbeat.Unheard). No address is ever answered twice.
func TestOneWayPartitionTakenForAlive(t *testing.T) {
	s, r := oneWaySegment(t, true)
	r.run(s, 150) // 15 s: gw-a's Lease is seen renewed after it fell silent
	s.answeredOnce("one-way, gw-a alive by its Lease")
	if st := s.gws["gw-p"].v.Peers(s.now, s.leases); len(st) != 1 || st[0].State != "partitioned" {
		t.Errorf("gw-p sees %+v, want gw-a partitioned", st)
	}
	if !slices.Equal(s.gws["gw-a"].applied, []string{"gw-a", "gw-p"}) {
		t.Errorf("gw-a follows members %v, want gw-a and gw-p", s.gws["gw-a"].applied)
	}
	if hb := s.gws["gw-p"].last; !slices.Equal(hb.Unheard, []string{"gw-a"}) {
		t.Errorf("gw-p's heartbeat %+v does not say it yields to gw-a unheard", hb)
	}

	// gw-a's Lease stops being renewed (it lost the API): gw-p takes gw-a's addresses
	// back, and gw-a, hearing gw-p no longer yield, lets them go first.
	r.renew["gw-a"] = false
	r.run(s, 400)
	s.answeredOnce("one-way, gw-a's Lease stale")
	if len(s.owned("gw-a")) != 0 {
		t.Errorf("gw-a answers %d addresses after gw-p took it for gone", len(s.owned("gw-a")))
	}

	// Renewed again: gw-p yields again, gw-a claims again.
	r.renew["gw-a"] = true
	r.run(s, 150)
	s.answeredOnce("one-way, gw-a's Lease renewed again")
	if len(s.owned("gw-a")) == 0 {
		t.Error("gw-a answers nothing once gw-p yields to it again")
	}

	// The segment heals: gw-p hears gw-a again and confirms it as any live peer.
	s.link("gw-p", "gw-a", true)
	r.run(s, 20)
	s.answeredOnce("healed")
	if len(s.owned("gw-a")) == 0 || len(s.gws["gw-p"].last.Unheard) != 0 {
		t.Errorf("healed: gw-a answers %d addresses, gw-p says unheard %v", len(s.owned("gw-a")), s.gws["gw-p"].last.Unheard)
	}
}

// TestOneWayPartitionTakenForDead: gw-a hears gw-p, gw-p does not hear gw-a and sees no
// renewal of its Lease (or has no cluster), so it answers every address itself; gw-a,
// though ready, must not claim any.
func TestOneWayPartitionTakenForDead(t *testing.T) {
	for _, cluster := range []bool{true, false} {
		t.Run(fmt.Sprintf("cluster=%v", cluster), func(t *testing.T) {
			s, r := oneWaySegment(t, false)
			if !cluster {
				s.leases = nil
			}
			r.run(s, 400)
			s.answeredOnce("one-way, gw-a taken for dead")
			if n := len(s.owned("gw-a")); n != 0 {
				t.Errorf("gw-a answers %d addresses while gw-p answers them all", n)
			}
			if !s.gws["gw-a"].v.wantsReady(s.now) {
				t.Error("gw-a is not ready: the test does not test the claim")
			}
		})
	}
}

// TestTwoWayHandoverWaitsForConfirmation: a gateway returning on a segment where the peer
// hears it claims only once the peer confirmed it let the addresses go, however long the
// peer's announcer takes (far past Handover), and the peer, hearing it, never says it
// yields unheard.
func TestTwoWayHandoverWaitsForConfirmation(t *testing.T) {
	s := newSimSegment(t, t0)
	r := &renewing{seen: map[string]time.Time{}, renew: map[string]bool{"gw-a": true, "gw-p": true}}
	s.leases = r.view
	s.start("gw-p", 1)
	s.link("gw-p", "gw-a", true)
	r.run(s, 10)
	s.start("gw-a", 1)
	s.link("gw-a", "gw-p", true)
	s.gws["gw-p"].frozen = true // its announcer keeps answering everything
	for range 50 {
		r.tick(s.now)
		s.step()
		if len(s.gws["gw-p"].last.Unheard) != 0 {
			t.Fatalf("gw-p hears gw-a but says %+v", s.gws["gw-p"].last)
		}
	}
	s.answeredOnce("gw-p's announcer stuck")
	if !s.gws["gw-a"].v.wantsReady(s.now) || s.gws["gw-a"].v.readyAt.IsZero() {
		t.Fatal("gw-a has not said it is ready: the test does not test the wait")
	}
	if n := len(s.owned("gw-a")); n != 0 {
		t.Errorf("gw-a answers %d addresses before gw-p confirmed", n)
	}
	s.gws["gw-p"].frozen = false
	r.run(s, 5)
	s.answeredOnce("gw-p applied")
	if len(s.owned("gw-a")) == 0 {
		t.Error("gw-a answers nothing once gw-p confirmed")
	}
}
