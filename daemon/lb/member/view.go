package member

import (
	"maps"
	"slices"
	"time"
)

// partitionMargin: a silent peer's Lease renewal counts as proof of life only when it
// arrives this long after the silence began (node Leases are renewed every 10 s or so, so
// the margin delays nothing).
const partitionMargin = 2 * time.Second

// Heartbeat is what a gateway multicasts on the segment every Interval.
type Heartbeat struct {
	Name string `json:"name"`
	// Incarnation strictly increases across the sender's restarts (a persisted counter, see
	// Marks): a restarted peer is new, and what was captured from its earlier runs is stale.
	Incarnation int64  `json:"inc"`
	Seq         uint64 `json:"seq"`
	// Draining: the sender has handed its addresses over (it answers for none of them any
	// more) and must not be given any.
	Draining bool `json:"draining,omitempty"`
	// Listening: the sender answers for none of its addresses and is not ready to: it has
	// just started, or its link just came back, and it listens for its peers first (or
	// every link of it is down). It is given addresses only once it says it is ready.
	Listening bool `json:"listening,omitempty"`
	// Confirms: the sender reports in Applied what its announcer follows. A sender that
	// does not (a group without a speaker) is waited for View.Handover instead.
	Confirms bool `json:"confirms,omitempty"`
	// Applied names the peers whose addresses the sender's announcer answers for none of,
	// because it counts them as members, each with the last heartbeat of theirs it had
	// heard. A gateway that has said it is ready claims its addresses once every live peer
	// names it here with that heartbeat or a later one: by then no peer answers for them.
	Applied map[string]Mark `json:"applied,omitempty"`
	// Unheard names the peers of Applied that the sender counts as members without hearing
	// them: silent, but alive by their Lease (a partition, perhaps one-way). Such a peer's
	// readiness cannot reach the sender, so no mark of it will ever confirm it; this says
	// instead that the sender answers for none of its addresses whatever it says, for as
	// long as its heartbeats keep naming it here. A gateway named here claims on it: when
	// it hears the sender but the sender does not hear it, one of the two must answer.
	// Older senders leave it out, and are waited for as before.
	Unheard []string `json:"unheard,omitempty"`
	// Renew names the peers whose incarnation the sender refuses, each with it: the sender
	// restarted and sealed every incarnation it had heard (see Marks). A gateway named here
	// with its current incarnation starts a new one.
	Renew map[string]int64 `json:"renew,omitempty"`
}

// Mark names one heartbeat of a gateway.
type Mark struct {
	Incarnation int64  `json:"inc"`
	Seq         uint64 `json:"seq"`
}

// atLeast reports whether m is heartbeat o or a later one of the same incarnation.
func (m Mark) atLeast(o Mark) bool { return m.Incarnation == o.Incarnation && m.Seq >= o.Seq }

func markOf(h Heartbeat) Mark { return Mark{Incarnation: h.Incarnation, Seq: h.Seq} }

// LeaseView reports when this gateway last saw a peer's node Lease renewed, on its own
// clock (the time the change arrived, not the peer's renewTime: clocks of two gateways
// need not agree). ok is false for a peer without a Lease.
type LeaseView func(name string) (observed time.Time, ok bool)

// View is the membership one gateway derives from the heartbeats it hears and the Leases
// it sees. It is not safe for concurrent use; Group serialises it.
//
// Handing an address over is causal, not timed: a gateway says it no longer answers for
// its addresses (Draining, Listening) only once its announcer has let them go, so a peer
// that takes them on hearing it never answers alongside; and a gateway that becomes ready
// (done listening, or done draining) says so first and claims only once each live peer
// has confirmed, in its own heartbeat, that its announcer has let them go. Between gateways
// that confirm, no handover depends on how fast either hears, computes or applies.
//
// When the heartbeats go one way only (this gateway hears a peer, the peer does not hear
// it), the peer says in its heartbeat what it makes of the silence: taking this gateway
// for gone, it answers its addresses and confirms nothing, so this gateway does not claim;
// taking it for alive by its Lease, it answers none of them and says so (Unheard), so this
// gateway claims without waiting for a confirmation that cannot come.
type View struct {
	Self string
	// Timeout: a peer not heard for longer is gone (unless its Lease says otherwise).
	Timeout time.Duration
	// LeaseFresh: a Lease seen renewed within it counts as a live peer's.
	LeaseFresh time.Duration
	// Handover is how long this gateway waits, after saying it is ready, for a live peer
	// that does not confirm (Heartbeat.Confirms false: a group without a speaker) before it
	// claims. Peers that confirm are waited for instead, however long they take. Addresses
	// of a dead peer are not delayed: its silence, not this gateway's readiness, moves them.
	Handover time.Duration

	started  time.Time
	extended bool // Listening lasts longer: see AwaitRenewal
	isolated bool // every heartbeat interface is down
	draining bool
	// ready is the heartbeat that told the peers this gateway is ready, sent at readyAt;
	// readyAt is zero while it is not ready or has not said so yet.
	ready   Mark
	readyAt time.Time
	// renewed are the incarnations this gateway started since ready without restarting
	// (a peer asked, see Heartbeat.Renew): a peer confirming any of their heartbeats heard
	// this gateway after it said it is ready.
	renewed []int64
	peers   map[string]*peerState
}

// maxRenewed bounds View.renewed: peers restarting while this gateway stays ready.
const maxRenewed = 16

// Renewed records that this gateway's heartbeats carry incarnation inc from now.
func (v *View) Renewed(inc int64) {
	if v.readyAt.IsZero() {
		return // the next ready heartbeat carries it
	}
	v.renewed = append(v.renewed, inc)
	if len(v.renewed) > maxRenewed {
		v.renewed = v.renewed[1:]
	}
}

type peerState struct {
	hb    Heartbeat
	heard time.Time
}

// NewView starts a view at now. Nothing is owned for the first Timeout: a gateway listens
// for its peers before it claims anything.
func NewView(self string, timeout, leaseFresh time.Duration, now time.Time) *View {
	return &View{Self: self, Timeout: timeout, LeaseFresh: leaseFresh, started: now, peers: map[string]*peerState{}}
}

// Heard records a heartbeat and reports whether it changed what Members can return: a
// new peer, a restarted one, one heard again after a silence, one starting or ending to
// drain or to listen, or one now confirming this gateway's readiness (or no longer). A
// heartbeat of this gateway's own name (its own multicast looped back) is ignored.
func (v *View) Heard(h Heartbeat, at time.Time) bool {
	if h.Name == v.Self || h.Name == "" {
		return false
	}
	p, ok := v.peers[h.Name]
	if !ok {
		v.peers[h.Name] = &peerState{hb: h, heard: at}
		return true
	}
	if h.Incarnation < p.hb.Incarnation || h.Incarnation == p.hb.Incarnation && h.Seq <= p.hb.Seq {
		return false // late or replayed
	}
	changed := h.Incarnation != p.hb.Incarnation || h.Draining != p.hb.Draining || h.Listening != p.hb.Listening ||
		h.Confirms != p.hb.Confirms || v.yields(h) != v.yields(p.hb) || at.Sub(p.heard) > v.Timeout
	p.hb, p.heard = h, at
	return changed
}

// yields reports whether h lets this gateway, ready and having said so, claim: its
// sender's announcer answers for none of this gateway's addresses, as of the heartbeat
// that said it is ready or a later one, or whatever this gateway says because the sender
// does not hear it (Heartbeat.Unheard).
func (v *View) yields(h Heartbeat) bool {
	m, ok := h.Applied[v.Self]
	if !ok || v.readyAt.IsZero() {
		return false
	}
	return m.atLeast(v.ready) || slices.Contains(v.renewed, m.Incarnation) || slices.Contains(h.Unheard, v.Self)
}

// SetDraining marks this gateway as handing its addresses over (it owns nothing from
// now), or as serving again (it says so, and claims once its peers confirm).
func (v *View) SetDraining(d bool) { v.draining = d }

// SetIsolated records whether every interface heartbeats go out on is down: an isolated
// gateway claims nothing (it could not answer anyway), and when a link comes back it
// listens again before it claims (Relisten), so that a healed segment never has two
// gateways answering for one address.
func (v *View) SetIsolated(isolated bool) { v.isolated = isolated }

// Relisten starts the listening anew at now: a link of this gateway came back, and the
// peers that served its addresses meanwhile keep them until it is ready.
func (v *View) Relisten(now time.Time) { v.started = now }

// renewalListen is how many Timeouts a gateway listens at most while a peer it refuses
// has not started a new incarnation yet (see AwaitRenewal): a restarted gateway hears
// its peers anew before it claims, and a replay of a dead peer's heartbeats (also
// refused) delays its claims by no more than this.
const renewalListen = 3

// Listening reports whether this gateway still listens for its peers at now.
func (v *View) Listening(now time.Time) bool {
	d := now.Sub(v.started)
	return d < v.Timeout || v.extended && d < renewalListen*v.Timeout
}

// AwaitRenewal says whether a peer this gateway refuses (an incarnation from before its
// restart, see Marks) was asked for a new one and has not started it yet. Said while this
// gateway listens, it listens until the peer has, or for renewalListen Timeouts: a peer it
// does not hear yet must not be taken for gone. Said later, it changes nothing (this
// gateway claims already; the peer is heard again within a heartbeat).
func (v *View) AwaitRenewal(awaiting bool, now time.Time) {
	v.extended = awaiting && (v.extended || v.Listening(now))
}

// wantsReady reports whether this gateway would own addresses at now, once its peers let
// them go.
func (v *View) wantsReady(now time.Time) bool {
	return !v.draining && !v.isolated && !v.Listening(now)
}

// Announce fills in what heartbeat h, sent at now, tells the peers about this gateway, and
// records it. answering: this gateway's announcer may still answer for some of its own
// addresses (see Group.Applying). A gateway that wants to be ready says so at once, and the
// first such heartbeat is the one its peers must confirm; one that is not says so
// (Draining, or Listening) only once it no longer answers, and until then says it is
// ready, which it still is to the segment: no peer takes over an address still answered.
func (v *View) Announce(h *Heartbeat, answering bool, now time.Time) {
	if v.wantsReady(now) {
		if v.readyAt.IsZero() {
			v.ready, v.readyAt, v.renewed = markOf(*h), now, nil
		}
		return
	}
	v.ready, v.readyAt, v.renewed = Mark{}, time.Time{}, nil
	if !answering {
		h.Draining, h.Listening = v.draining, !v.draining
	}
}

// Unannounced reports whether this gateway is ready at now but has not said so yet.
func (v *View) Unannounced(now time.Time) bool { return v.wantsReady(now) && v.readyAt.IsZero() }

// Members returns the gateways that own addresses now, sorted:
//   - this one once it is ready (not draining, isolated or still listening), has said so,
//     and every live peer that is a member has confirmed it (Heartbeat.Applied; Handover
//     for a peer that does not confirm) or, not hearing this gateway, yields to it anyway
//     (Heartbeat.Unheard), and for as long as they do: a peer that stops yielding to it
//     (it took this gateway for gone) makes it let go too;
//   - every peer heard within Timeout that does not drain or listen;
//   - every silent peer whose Lease was seen renewed after it fell silent and recently:
//     such a peer is alive on the other side of a partition, and keeping it a member keeps
//     both sides computing the same owners (it cannot hear this gateway, so it is not
//     asked to confirm).
//
// leases may be nil (no cluster).
func (v *View) Members(now time.Time, leases LeaseView) []string {
	var out []string
	confirmed := v.wantsReady(now) && !v.readyAt.IsZero()
	for _, name := range slices.Sorted(maps.Keys(v.peers)) {
		p := v.peers[name]
		if !v.member(name, p, now, leases) {
			continue
		}
		out = append(out, name)
		if now.Sub(p.heard) <= v.Timeout && !v.confirmedBy(p, now) {
			confirmed = false
		}
	}
	if confirmed {
		out = append(out, v.Self)
	}
	slices.Sort(out)
	return out
}

// confirmedBy reports whether live peer p lets this gateway claim at now: it confirmed its
// readiness (or yields without hearing it) or, not confirming at all, Handover has passed
// since this gateway said it.
func (v *View) confirmedBy(p *peerState, now time.Time) bool {
	if p.hb.Confirms {
		return v.yields(p.hb)
	}
	return !now.Before(v.readyAt.Add(v.Handover))
}

// member reports whether peer name owns addresses at now. A partitioned peer stays one
// for Handover after its Lease turned stale: Confirm stops yielding to it at once, and
// this gateway takes its addresses only after that, so that a peer which hears this one
// but is not heard (and may still answer) lets them go first. It cannot confirm that it
// did (it is not heard), so this is a margin, not a handover.
func (v *View) member(name string, p *peerState, now time.Time, leases LeaseView) bool {
	if p.hb.Draining || p.hb.Listening {
		return false
	}
	return now.Sub(p.heard) <= v.Timeout || v.leaseAlive(name, p, now, leases, v.LeaseFresh+v.Handover)
}

// Confirm returns what this gateway's heartbeat confirms (Heartbeat.Applied): of the
// peers applied (those its announcer answers for none of the addresses of), each that is
// a member now, with the last heartbeat heard from it; and, of those, the ones it counts
// as members without hearing them (Heartbeat.Unheard: partitioned). A partitioned peer
// whose Lease just turned stale is in neither, though still a member for Handover.
func (v *View) Confirm(applied []string, now time.Time, leases LeaseView) (map[string]Mark, []string) {
	out, unheard := map[string]Mark{}, []string(nil)
	for _, name := range applied {
		p := v.peers[name]
		switch {
		case p == nil || !v.member(name, p, now, leases):
		case now.Sub(p.heard) <= v.Timeout:
			out[name] = markOf(p.hb)
		case v.partitioned(name, p, now, leases):
			out[name] = markOf(p.hb)
			unheard = append(unheard, name)
		}
	}
	slices.Sort(unheard)
	return out, unheard
}

func (v *View) partitioned(name string, p *peerState, now time.Time, leases LeaseView) bool {
	return v.leaseAlive(name, p, now, leases, v.LeaseFresh)
}

// leaseAlive reports whether silent peer p's Lease was seen renewed after it fell silent,
// at most fresh before now.
func (v *View) leaseAlive(name string, p *peerState, now time.Time, leases LeaseView, fresh time.Duration) bool {
	if leases == nil {
		return false
	}
	// The renewal must arrive well after the silence began: a dead peer's last renewal,
	// made just before it died, may reach this gateway a little late through the API.
	seen, ok := leases(name)
	return ok && seen.After(p.heard.Add(max(v.Timeout, partitionMargin))) && now.Sub(seen) <= fresh
}

// Peers describes every peer heard, for the dashboard and logs.
func (v *View) Peers(now time.Time, leases LeaseView) []PeerStatus {
	var out []PeerStatus
	for _, name := range slices.Sorted(maps.Keys(v.peers)) {
		p := v.peers[name]
		st := PeerStatus{Name: name, LastHeard: p.heard, Draining: p.hb.Draining}
		switch {
		case now.Sub(p.heard) <= v.Timeout:
			st.State = "live"
		case v.partitioned(name, p, now, leases):
			st.State = "partitioned"
		default:
			st.State = "gone"
		}
		out = append(out, st)
	}
	return out
}

// Forget drops peers silent for longer than keep (and not partitioned), so that a
// gateway removed from the site does not stay listed forever.
func (v *View) Forget(now time.Time, keep time.Duration, leases LeaseView) {
	for name, p := range v.peers {
		if now.Sub(p.heard) > keep && !v.partitioned(name, p, now, leases) {
			delete(v.peers, name)
		}
	}
}

// PeerStatus is one peer as this gateway sees it.
type PeerStatus struct {
	Name      string    `json:"name"`
	State     string    `json:"state"` // live, partitioned, gone
	Draining  bool      `json:"draining,omitempty"`
	LastHeard time.Time `json:"lastHeard"`
}
