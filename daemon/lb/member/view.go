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
	// Incarnation is the sender's start time (Unix nanoseconds): a restarted peer is new.
	Incarnation int64  `json:"inc"`
	Seq         uint64 `json:"seq"`
	// Draining: the sender is handing its addresses over and must not be given any.
	Draining bool `json:"draining,omitempty"`
	// Listening: the sender has just started and listens for its peers before it claims
	// anything; it is given addresses only once it says it is done, the moment it starts
	// answering for them, so that a restarted gateway takes its addresses back without a
	// gap and without two gateways answering.
	Listening bool `json:"listening,omitempty"`
}

// LeaseView reports when this gateway last saw a peer's node Lease renewed, on its own
// clock (the time the change arrived, not the peer's renewTime: clocks of two gateways
// need not agree). ok is false for a peer without a Lease.
type LeaseView func(name string) (observed time.Time, ok bool)

// View is the membership one gateway derives from the heartbeats it hears and the Leases
// it sees. It is not safe for concurrent use; Group serialises it.
type View struct {
	Self string
	// Timeout: a peer not heard for longer is gone (unless its Lease says otherwise).
	Timeout time.Duration
	// LeaseFresh: a Lease seen renewed within it counts as a live peer's.
	LeaseFresh time.Duration
	// Handover is how long this gateway waits, after telling its peers it is ready (at
	// the end of its listening, or of a drain), before it claims anything: the peer that
	// holds its addresses meanwhile lets them go as soon as it hears, so that no address
	// is ever answered by both. Addresses of a dead peer are not delayed: its silence,
	// not this gateway's readiness, moves them.
	Handover time.Duration

	started  time.Time
	claimAt  time.Time // not before this (Handover after the last readiness)
	isolated bool      // every heartbeat interface is down
	draining bool
	peers    map[string]*peerState
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
// new peer, a restarted one, one heard again after a silence, or one starting or ending to
// drain. A heartbeat of this gateway's own name (its own multicast looped back) is ignored.
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
	changed := h.Incarnation != p.hb.Incarnation || h.Draining != p.hb.Draining || h.Listening != p.hb.Listening || at.Sub(p.heard) > v.Timeout
	p.hb, p.heard = h, at
	return changed
}

// SetDraining marks this gateway as handing its addresses over (it owns nothing from
// now), or as serving again at now (it claims again Handover later).
func (v *View) SetDraining(d bool, now time.Time) {
	if v.draining && !d {
		v.claimAt = now.Add(v.Handover)
	}
	v.draining = d
}

// Draining reports whether this gateway drains.
func (v *View) Draining() bool { return v.draining }

// SetIsolated records whether every interface heartbeats go out on is down: an isolated
// gateway claims nothing (it could not answer anyway), and when a link comes back it
// listens again before it claims (Relisten), so that a healed segment never has two
// gateways answering for one address.
func (v *View) SetIsolated(isolated bool) { v.isolated = isolated }

// Relisten starts the listening anew at now: a link of this gateway came back, and the
// peers that served its addresses meanwhile keep them until it is ready.
func (v *View) Relisten(now time.Time) { v.started = now }

// Listening reports whether this gateway still listens for its peers at now.
func (v *View) Listening(now time.Time) bool { return now.Sub(v.started) < v.Timeout }

// Members returns the gateways that own addresses now, sorted: this one (unless it drains
// or is still listening after its start), every peer heard within Timeout that does not
// drain, and every silent peer whose Lease was seen renewed after it fell silent and
// recently: such a peer is alive on the other side of a partition, and keeping it a member
// keeps both sides computing the same owners. leases may be nil (no cluster).
func (v *View) Members(now time.Time, leases LeaseView) []string {
	var out []string
	if !v.draining && !v.isolated && !v.Listening(now) && !now.Before(v.started.Add(v.Timeout+v.Handover)) && !now.Before(v.claimAt) {
		out = append(out, v.Self)
	}
	for _, name := range slices.Sorted(maps.Keys(v.peers)) {
		p := v.peers[name]
		if p.hb.Draining || p.hb.Listening {
			continue
		}
		if now.Sub(p.heard) <= v.Timeout || v.partitioned(name, p, now, leases) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func (v *View) partitioned(name string, p *peerState, now time.Time, leases LeaseView) bool {
	if leases == nil {
		return false
	}
	// The renewal must arrive well after the silence began: a dead peer's last renewal,
	// made just before it died, may reach this gateway a little late through the API.
	seen, ok := leases(name)
	return ok && seen.After(p.heard.Add(max(v.Timeout, partitionMargin))) && now.Sub(seen) <= v.LeaseFresh
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
