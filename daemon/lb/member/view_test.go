package member

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestViewListensBeforeItClaims(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	if m := v.Members(t0.Add(ms(100)), nil); len(m) != 0 {
		t.Errorf("members while still listening: %v, want none", m)
	}
	// A peer still listening is not given anything either, until it says it is done.
	v.Heard(Heartbeat{Name: "gw-c", Incarnation: 1, Seq: 1, Listening: true}, t0.Add(ms(120)))
	if m := v.Members(t0.Add(ms(400)), nil); slices.Contains(m, "gw-c") {
		t.Errorf("a listening peer is a member: %v", m)
	}
	if !v.Heard(Heartbeat{Name: "gw-c", Incarnation: 1, Seq: 2}, t0.Add(ms(420))) {
		t.Error("a peer done listening did not change the view")
	}
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
	v.Heard(Heartbeat{Name: "gw-b", Incarnation: 1, Seq: 1}, t0.Add(ms(450)))
	if !v.Heard(Heartbeat{Name: "gw-b", Incarnation: 1, Seq: 2, Draining: true}, t0.Add(ms(500))) {
		t.Error("a peer starting to drain did not change the view")
	}
	if m := v.Members(t0.Add(ms(500)), nil); !slices.Equal(m, []string{"gw-a"}) {
		t.Errorf("members %v, want gw-a alone while gw-b drains", m)
	}
	v.SetDraining(true, t0.Add(ms(500)))
	if m := v.Members(t0.Add(ms(500)), nil); len(m) != 0 {
		t.Errorf("members %v while both drain, want none", m)
	}
}

// TestViewPartition: a silent peer whose Lease is seen renewed after it fell silent is
// alive across a partition and stays a member while that renewal is fresh; a killed peer
// (its Lease last renewed before its last heartbeat) leaves at Timeout.
func TestViewPartition(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
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

// TestViewHandover: with a handover delay, a gateway says it is ready (done listening, or
// done draining) at once but claims only after the delay, so that the peer holding its
// addresses lets them go first.
func TestViewHandover(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	v.Handover = ms(200)
	if v.Listening(t0.Add(ms(400))) {
		t.Error("still listening after the timeout")
	}
	if m := v.Members(t0.Add(ms(599)), nil); slices.Contains(m, "gw-a") {
		t.Errorf("claims before the handover delay: %v", m)
	}
	if m := v.Members(t0.Add(ms(600)), nil); !slices.Contains(m, "gw-a") {
		t.Errorf("does not claim after the handover delay: %v", m)
	}
	v.SetDraining(true, t0.Add(ms(1000)))
	v.SetDraining(false, t0.Add(ms(2000)))
	if m := v.Members(t0.Add(ms(2100)), nil); slices.Contains(m, "gw-a") {
		t.Errorf("claims again before the handover delay after a drain: %v", m)
	}
	if m := v.Members(t0.Add(ms(2200)), nil); !slices.Contains(m, "gw-a") {
		t.Errorf("does not claim again after a drain: %v", m)
	}
}

// TestViewIsolatedAndRelisten: an isolated gateway claims nothing; after Relisten it
// listens (and says so) for Timeout, then waits Handover, before it claims again.
func TestViewIsolatedAndRelisten(t *testing.T) {
	v := NewView("gw-a", ms(400), 30*time.Second, t0)
	v.Handover = ms(200)
	now := t0.Add(time.Second)
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
	if m := v.Members(now.Add(ms(599)), nil); slices.Contains(m, "gw-a") {
		t.Errorf("claims %v after a relisten, before Timeout+Handover", m)
	}
	if m := v.Members(now.Add(ms(600)), nil); !slices.Contains(m, "gw-a") {
		t.Errorf("does not claim after Timeout+Handover: %v", m)
	}
}
