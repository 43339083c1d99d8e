package member

import (
	"maps"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// announce has v send heartbeat seq of incarnation 1 at at, as Group does every Interval,
// with its announcer answering for nothing of its own, and returns what it says.
func announce(v *View, seq uint64, at time.Time) Heartbeat {
	h := Heartbeat{Name: v.Self, Incarnation: 1, Seq: seq}
	v.Announce(&h, false, at)
	return h
}

func TestViewListensBeforeItClaims(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	if h := announce(v, 1, t0.Add(ms(100))); !h.Listening || h.Draining {
		t.Errorf("heartbeat while listening: %+v", h)
	}
	if m := v.Members(t0.Add(ms(100)), nil); len(m) != 0 {
		t.Errorf("members while still listening: %v, want none", m)
	}
	// A peer still listening is not given anything either, until it says it is done.
	v.Heard(Heartbeat{Name: "gw-c", Incarnation: 1, Seq: 1, Listening: true}, t0.Add(ms(120)))
	if m := v.Members(t0.Add(ms(400)), nil); len(m) != 0 {
		t.Errorf("members %v: a listening peer, or a gateway that has not said it is ready", m)
	}
	if !v.Unannounced(t0.Add(ms(400))) {
		t.Error("done listening, and not said so, but not Unannounced")
	}
	if h := announce(v, 2, t0.Add(ms(400))); h.Listening || h.Draining {
		t.Errorf("heartbeat once done listening: %+v", h)
	}
	if !v.Heard(Heartbeat{Name: "gw-c", Incarnation: 1, Seq: 2}, t0.Add(ms(420))) {
		t.Error("a peer done listening did not change the view")
	}
	// gw-c does not confirm (no speaker) and Handover is zero: gw-a claims at once.
	if m := v.Members(t0.Add(ms(420)), nil); !slices.Equal(m, []string{"gw-a", "gw-c"}) {
		t.Errorf("members %v, want gw-a and gw-c", m)
	}
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 1, Seq: 1}, t0.Add(ms(150)))
	if m := v.Members(t0.Add(ms(420)), nil); !slices.Equal(m, []string{"gw-a", "gw-b", "gw-c"}) {
		t.Errorf("members %v, want gw-a, gw-b and gw-c", m)
	}
}

// TestViewPeerDiesAndReturns: a peer silent for longer than Timeout leaves at once; heard
// again (a restart: a new incarnation) it is back; replayed heartbeats change nothing.
func TestViewPeerDiesAndReturns(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	for i := range 10 {
		v.Heard(Heartbeat{Name: "gw-b", Incarnation: 1, Seq: uint64(i + 1)}, t0.Add(ms(100*i)))
	}
	last := t0.Add(ms(900))
	if m := v.Members(last.Add(ms(400)), nil); !slices.Contains(m, "gw-b") {
		t.Errorf("gw-b gone %v after its last heartbeat: %v", ms(400), m)
	}
	if m := v.Members(last.Add(ms(401)), nil); slices.Contains(m, "gw-b") {
		t.Errorf("gw-b still a member after %v of silence: %v", ms(401), m)
	}
	if v.Heard(Heartbeat{Name: "gw-b", Incarnation: 1, Seq: 3}, last.Add(ms(500))) {
		t.Error("a replayed heartbeat changed the view")
	}
	if m := v.Members(last.Add(ms(500)), nil); slices.Contains(m, "gw-b") {
		t.Errorf("a replayed heartbeat brought gw-b back: %v", m)
	}
	if !v.Heard(Heartbeat{Name: "gw-b", Incarnation: 2, Seq: 1}, last.Add(ms(2000))) {
		t.Error("a restarted peer did not change the view")
	}
	if m := v.Members(last.Add(ms(2000)), nil); !slices.Contains(m, "gw-b") {
		t.Errorf("restarted gw-b not a member: %v", m)
	}
	if v.Heard(Heartbeat{Name: "gw-a", Incarnation: 9, Seq: 1}, last) {
		t.Error("its own looped-back heartbeat changed the view")
	}
}

// TestViewDraining: a draining peer leaves as soon as its heartbeat says so; a draining
// gateway owns nothing itself.
func TestViewDraining(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	announce(v, 1, t0.Add(ms(400)))
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 1, Seq: 1}, t0.Add(ms(450)))
	if !v.Heard(Heartbeat{Name: "gw-b", Incarnation: 1, Seq: 2, Draining: true}, t0.Add(ms(500))) {
		t.Error("a peer starting to drain did not change the view")
	}
	if m := v.Members(t0.Add(ms(500)), nil); !slices.Equal(m, []string{"gw-a"}) {
		t.Errorf("members %v, want gw-a alone while gw-b drains", m)
	}
	v.SetDraining(true)
	if m := v.Members(t0.Add(ms(500)), nil); len(m) != 0 {
		t.Errorf("members %v while both drain, want none", m)
	}
}

// TestViewPartition: a silent peer whose Lease is seen renewed after it fell silent is
// alive across a partition and stays a member while that renewal is fresh; a killed peer
// (its Lease last renewed before its last heartbeat) leaves at Timeout.
func TestViewPartition(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	announce(v, 1, t0.Add(ms(400)))
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 1, Seq: 1}, t0.Add(ms(500)))
	v.Heard(Heartbeat{Name: "gw-c", Incarnation: 1, Seq: 1}, t0.Add(ms(500)))
	leases := map[string]time.Time{
		"gw-b": t0.Add(10 * time.Second), // renewed 9.5s after its last heartbeat: alive
		"gw-c": t0.Add(ms(450)),          // renewed just before it died
	}
	view := func(name string) (time.Time, bool) { l, ok := leases[name]; return l, ok }
	now := t0.Add(11 * time.Second)
	if m := v.Members(now, view); !slices.Equal(m, []string{"gw-a", "gw-b"}) {
		t.Errorf("members %v, want gw-a and the partitioned gw-b", m)
	}
	st := v.Peers(now, view)
	if len(st) != 2 || st[0].State != "partitioned" || st[1].State != "gone" {
		t.Errorf("peers %+v", st)
	}
	if m := v.Members(t0.Add(41*time.Second), view); !slices.Equal(m, []string{"gw-a"}) {
		t.Errorf("members %v once gw-b's Lease is stale too, want gw-a", m)
	}
	v.Forget(t0.Add(41*time.Second), 20*time.Second, view)
	if st := v.Peers(t0.Add(41*time.Second), view); len(st) != 0 {
		t.Errorf("peers kept after Forget: %+v", st)
	}
}

// TestLeaseWatchSeesRenewals: a renewal counts when its renewTime changes, on the
// watcher's clock; the same Lease sent again (a resync) is not a renewal.
func TestLeaseWatchSeesRenewals(t *testing.T) {
	now := t0
	w := NewLeaseWatch(func() time.Time { return now })
	lease := func(rt time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gw-b"}, Spec: coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: rt}}}
	}
	w.Observe(lease(t0.Add(-time.Hour))) // the peer's clock is an hour behind: no matter
	now = t0.Add(5 * time.Second)
	w.Observe(lease(t0.Add(-time.Hour)))
	if seen, ok := w.View("gw-b"); !ok || !seen.Equal(t0) {
		t.Errorf("seen %v %v, want the first sighting %v", seen, ok, t0)
	}
	w.Observe(lease(t0.Add(-time.Hour + 10*time.Second)))
	if seen, _ := w.View("gw-b"); !seen.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("renewal seen at %v, want %v", seen, t0.Add(5*time.Second))
	}
	w.Forget("gw-b")
	if _, ok := w.View("gw-b"); ok {
		t.Error("a deleted Lease is still seen")
	}
}

// TestViewHandover: a gateway that becomes ready (done listening, done draining) says so
// at once and claims once every live peer has confirmed that heartbeat (or a later one of
// the same incarnation) as applied, however long that takes; a peer that does not confirm
// (no speaker) is waited for Handover. A partitioned peer, which cannot hear, is not asked.
func TestViewHandover(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	v.Handover = ms(200)
	hb := func(seq uint64, applied map[string]Mark) Heartbeat {
		return Heartbeat{Name: "gw-b", Incarnation: 7, Seq: seq, Confirms: true, Applied: applied}
	}
	v.Heard(hb(1, map[string]Mark{}), t0.Add(ms(100)))
	announce(v, 3, t0.Add(ms(380))) // still listening: not the ready heartbeat
	ready := announce(v, 4, t0.Add(ms(400)))
	announce(v, 5, t0.Add(ms(500))) // a later heartbeat changes nothing: 4 said it
	at := t0.Add(ms(400))
	for i, applied := range []map[string]Mark{
		{},                           // gw-b has not applied gw-a yet
		{"gw-a": {1, 3}},             // an earlier heartbeat: gw-b may not have heard gw-a is ready
		{"gw-a": {2, 9}},             // another incarnation of gw-a
		{"gw-c": {1, 4}},             // someone else
		{"gw-a": {1, 3}, "gw-c": {}}, // still too early
	} {
		at = at.Add(ms(100))
		v.Heard(hb(uint64(2+i), applied), at)
		if m := v.Members(at, nil); slices.Contains(m, "gw-a") { // past Handover, too
			t.Errorf("claims %v with gw-b's applied %v (gw-a said ready in %+v)", m, applied, ready)
		}
	}
	at = at.Add(ms(100))
	if !v.Heard(hb(10, map[string]Mark{"gw-a": {1, 4}}), at) {
		t.Error("gw-b's confirmation did not change the view")
	}
	if m := v.Members(at, nil); !slices.Equal(m, []string{"gw-a", "gw-b"}) {
		t.Errorf("members %v once gw-b confirmed, want gw-a and gw-b", m)
	}
	v.Heard(hb(11, map[string]Mark{"gw-a": {1, 5}}), at.Add(ms(100)))
	if m := v.Members(at.Add(ms(100)), nil); !slices.Equal(m, []string{"gw-a", "gw-b"}) {
		t.Errorf("members %v with a later heartbeat confirmed, want gw-a and gw-b", m)
	}

	// Draining: nothing owned at once; serving again: claimed once confirmed again.
	at = at.Add(time.Second)
	v.SetDraining(true)
	if m := v.Members(at, nil); slices.Contains(m, "gw-a") {
		t.Errorf("a draining gateway claims: %v", m)
	}
	if h := announce(v, 20, at); !h.Draining || h.Listening {
		t.Errorf("heartbeat while draining, nothing answered: %+v", h)
	}
	v.Heard(hb(12, map[string]Mark{}), at.Add(ms(50)))
	v.SetDraining(false)
	again := announce(v, 21, at.Add(ms(100)))
	if again.Draining || again.Listening {
		t.Errorf("heartbeat serving again: %+v", again)
	}
	v.Heard(hb(13, map[string]Mark{"gw-a": {1, 5}}), at.Add(ms(150))) // a stale confirmation
	if m := v.Members(at.Add(ms(500)), nil); slices.Contains(m, "gw-a") {
		t.Errorf("claims %v again on a confirmation from before its drain", m)
	}
	v.Heard(hb(14, map[string]Mark{"gw-a": {1, 21}}), at.Add(ms(200)))
	if m := v.Members(at.Add(ms(200)), nil); !slices.Contains(m, "gw-a") {
		t.Errorf("does not claim again once confirmed after a drain: %v", m)
	}

	// A peer without a speaker does not confirm: it is waited for Handover.
	w := NewView("gw-a", ms(400), 30*time.Second, t0)
	w.Handover = ms(200)
	w.Heard(Heartbeat{Name: "gw-b", Incarnation: 7, Seq: 1}, t0.Add(ms(350)))
	announce(w, 1, t0.Add(ms(450)))
	w.Heard(Heartbeat{Name: "gw-b", Incarnation: 7, Seq: 2}, t0.Add(ms(550)))
	if m := w.Members(t0.Add(ms(649)), nil); slices.Contains(m, "gw-a") {
		t.Errorf("claims before Handover with a peer that does not confirm: %v", m)
	}
	if m := w.Members(t0.Add(ms(650)), nil); !slices.Contains(m, "gw-a") {
		t.Errorf("does not claim after Handover with a peer that does not confirm: %v", m)
	}

	// A silent peer alive by its Lease (partitioned) is a member, but is not asked.
	p := NewView("gw-a", ms(400), 30*time.Second, t0)
	p.Heard(hb(1, map[string]Mark{}), t0.Add(ms(100)))
	announce(p, 1, t0.Add(10*time.Second))
	leases := func(string) (time.Time, bool) { return t0.Add(9 * time.Second), true }
	if m := p.Members(t0.Add(10*time.Second), leases); !slices.Equal(m, []string{"gw-a", "gw-b"}) {
		t.Errorf("members %v with gw-b partitioned, want gw-a and gw-b", m)
	}
}

// TestViewSaysNotReadyOnlyOnceLetGo: a gateway that stops being ready (drains, is
// isolated, listens again) keeps saying it is ready while its announcer may still answer
// for its addresses, so that no peer takes one over before it is let go.
func TestViewSaysNotReadyOnlyOnceLetGo(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	now := t0.Add(time.Second)
	ready := announce(v, 1, now)
	v.SetDraining(true)
	h := Heartbeat{Name: "gw-a", Incarnation: 1, Seq: 2}
	if v.Announce(&h, true, now); h.Draining || h.Listening {
		t.Errorf("says %+v while its announcer may still answer", h)
	}
	if h := announce(v, 3, now); !h.Draining {
		t.Errorf("does not say it drains once let go: %+v", h)
	}
	v.SetDraining(false)
	if h := announce(v, 4, now); h.Draining || h.Listening {
		t.Errorf("heartbeat serving again: %+v", h)
	}
	if v.ready == markOf(ready) {
		t.Error("the readiness before the drain still counts")
	}
	v.SetIsolated(true)
	h = Heartbeat{Name: "gw-a", Incarnation: 1, Seq: 5}
	if v.Announce(&h, true, now); h.Listening {
		t.Errorf("isolated, says %+v while its announcer may still answer", h)
	}
	// Its link back before it noticed: it says it is not ready, so the peer that took its
	// addresses over keeps them.
	if h := announce(v, 6, now); !h.Listening || h.Draining {
		t.Errorf("isolated and let go, says %+v", h)
	}
}

// TestViewConfirm: a heartbeat confirms the peers applied that are members now, each with
// the last heartbeat heard from it.
func TestViewConfirm(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	now := t0.Add(time.Second)
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 3, Seq: 8}, now)
	v.Heard(Heartbeat{Name: "gw-c", Incarnation: 4, Seq: 2, Draining: true}, now)
	v.Heard(Heartbeat{Name: "gw-d", Incarnation: 5, Seq: 1}, now)
	got, unheard := v.Confirm([]string{"gw-b", "gw-c", "gw-e"}, now, nil)
	if want := map[string]Mark{"gw-b": {3, 8}}; !maps.Equal(got, want) || len(unheard) != 0 {
		t.Errorf("confirms %v unheard %v, want %v and none", got, unheard, want)
	}
	// gw-d falls silent and its Lease is seen renewed later: partitioned, it is confirmed
	// with the last heartbeat heard, and named as unheard. gw-b, silent with no renewal,
	// is gone.
	later := now.Add(5 * time.Second)
	leases := func(name string) (time.Time, bool) { return later, name == "gw-d" }
	got, unheard = v.Confirm([]string{"gw-b", "gw-d"}, later, leases)
	if want := map[string]Mark{"gw-d": {5, 1}}; !maps.Equal(got, want) || !slices.Equal(unheard, []string{"gw-d"}) {
		t.Errorf("confirms %v unheard %v, want %v and gw-d", got, unheard, want)
	}
	// Its Lease stale: no longer yielded to, though a member for Handover more.
	v.Handover = ms(200)
	stale := later.Add(v.LeaseFresh + ms(100))
	if got, unheard = v.Confirm([]string{"gw-d"}, stale, leases); len(got) != 0 || len(unheard) != 0 {
		t.Errorf("confirms %v unheard %v with gw-d's Lease stale, want none", got, unheard)
	}
	if m := v.Members(stale, leases); !slices.Contains(m, "gw-d") {
		t.Errorf("members %v: gw-d left before Handover passed after its Lease turned stale", m)
	}
	if m := v.Members(stale.Add(ms(101)), leases); slices.Contains(m, "gw-d") {
		t.Errorf("members %v: gw-d still a member Handover after its Lease turned stale", m)
	}
}

// TestViewIsolatedAndRelisten: an isolated gateway claims nothing; after Relisten it
// listens (and says so) for Timeout, then says it is ready, and claims once its peers
// confirm.
func TestViewIsolatedAndRelisten(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	v.Handover = ms(200)
	now := t0.Add(time.Second)
	announce(v, 1, now)
	if m := v.Members(now, nil); !slices.Contains(m, "gw-a") {
		t.Fatalf("members %v", m)
	}
	v.SetIsolated(true)
	if m := v.Members(now, nil); slices.Contains(m, "gw-a") {
		t.Errorf("an isolated gateway claims: %v", m)
	}
	v.SetIsolated(false)
	v.Relisten(now)
	if !v.Listening(now.Add(ms(399))) || v.Listening(now.Add(ms(400))) {
		t.Error("Relisten does not listen for Timeout")
	}
	if h := announce(v, 2, now.Add(ms(100))); !h.Listening {
		t.Errorf("heartbeat while listening again: %+v", h)
	}
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 2, Seq: 1, Confirms: true}, now.Add(ms(150)))
	if m := v.Members(now.Add(ms(400)), nil); slices.Contains(m, "gw-a") {
		t.Errorf("claims %v after a relisten before saying it is ready", m)
	}
	announce(v, 3, now.Add(ms(400)))
	if m := v.Members(now.Add(ms(540)), nil); slices.Contains(m, "gw-a") {
		t.Errorf("claims %v before gw-b confirms", m)
	}
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 2, Seq: 2, Confirms: true, Applied: map[string]Mark{"gw-a": {1, 3}}}, now.Add(ms(450)))
	if m := v.Members(now.Add(ms(450)), nil); !slices.Equal(m, []string{"gw-a", "gw-b"}) {
		t.Errorf("members %v once gw-b confirmed, want gw-a and gw-b", m)
	}
}

// TestViewRenewedKeepsConfirmation: a ready gateway that starts a new incarnation (a
// restarted peer asked) stays confirmed by a peer that confirms a heartbeat of the new one;
// a mark of an incarnation it never had still confirms nothing.
func TestViewRenewedKeepsConfirmation(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 7, Seq: 1, Confirms: true}, t0.Add(ms(100)))
	announce(v, 4, t0.Add(ms(400)))
	at := t0.Add(ms(500))
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 7, Seq: 2, Confirms: true, Applied: map[string]Mark{"gw-a": {1, 4}}}, at)
	if m := v.Members(at, nil); !slices.Equal(m, []string{"gw-a", "gw-b"}) {
		t.Fatalf("members %v once confirmed, want gw-a and gw-b", m)
	}
	v.Renewed(3)
	for _, c := range []struct {
		mark Mark
		want []string
	}{{Mark{3, 5}, []string{"gw-a", "gw-b"}}, {Mark{2, 9}, []string{"gw-b"}}} {
		at = at.Add(ms(100))
		v.Heard(Heartbeat{Name: "gw-b", Incarnation: 7, Seq: uint64(at.Sub(t0) / ms(100)), Confirms: true, Applied: map[string]Mark{"gw-a": c.mark}}, at)
		if m := v.Members(at, nil); !slices.Equal(m, c.want) {
			t.Errorf("gw-b confirms %v after gw-a renewed to 3: members %v, want %v", c.mark, m, c.want)
		}
	}
}
