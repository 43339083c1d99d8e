package lb

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/lb/member"
)

type fakeMembers struct {
	mu      sync.Mutex
	members []string
	ch      chan struct{}
	events  []string // "applying gw-a,gw-b", "set", "applied gw-a,gw-b" (see fakeAnnouncer.m)
}

func newFakeMembers(m ...string) *fakeMembers {
	return &fakeMembers{members: m, ch: make(chan struct{}, 1)}
}

func (f *fakeMembers) Members() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members)
}

func (f *fakeMembers) Changed() <-chan struct{} { return f.ch }

func (f *fakeMembers) Applying(m []string) { f.event("applying " + strings.Join(m, ",")) }

func (f *fakeMembers) Applied(m []string) { f.event("applied " + strings.Join(m, ",")) }

func (f *fakeMembers) event(e string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, e)
}

func (f *fakeMembers) set(m ...string) {
	f.mu.Lock()
	f.members = m
	f.mu.Unlock()
	f.ch <- struct{}{}
}

type fakeAnnouncer struct {
	mu    sync.Mutex
	sets  []map[netip.Addr][]string
	fail  error
	calls chan struct{}
	m     *fakeMembers // if set, every Set is logged in its events
}

func (f *fakeAnnouncer) Set(owned map[netip.Addr][]string) error {
	if f.m != nil {
		f.m.event("set")
	}
	f.mu.Lock()
	f.sets = append(f.sets, maps.Clone(owned))
	err := f.fail
	f.mu.Unlock()
	select {
	case f.calls <- struct{}{}:
	default:
	}
	return err
}

func (f *fakeAnnouncer) last() map[netip.Addr][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sets) == 0 {
		return nil
	}
	return f.sets[len(f.sets)-1]
}

// waitOwned polls (bounded) until the announcer was last given exactly want.
func waitOwned(t *testing.T, a *fakeAnnouncer, want map[netip.Addr][]string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if maps.EqualFunc(a.last(), want, slices.Equal[[]string]) {
			return
		}
	}
	t.Fatalf("announcer given %v, want %v", a.last(), want)
}

// TestSpeakerFollowsMembersAndAddresses: the speaker announces exactly the addresses
// rendezvous hashing gives this gateway, with their interfaces; all of them when its peer
// goes; none after it stops.
func TestSpeakerFollowsMembersAndAddresses(t *testing.T) {
	all := map[netip.Addr][]string{}
	for i := range 20 {
		all[netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)})] = []string{"eth0"}
	}
	all[netip.MustParseAddr("2001:db8::10")] = []string{"eth0", "eth1"}
	m := newFakeMembers("gw-a", "gw-b")
	a := &fakeAnnouncer{calls: make(chan struct{}, 1)}
	s := NewSpeaker("gw-a", m, a, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })

	s.SetAddresses(all)
	mine := map[netip.Addr][]string{}
	for _, o := range member.Owned(slices.Collect(maps.Keys(all)), []string{"gw-a", "gw-b"}, "gw-a") {
		mine[o] = all[o]
	}
	if len(mine) == 0 || len(mine) == len(all) {
		t.Fatalf("gw-a owns %d of %d addresses with gw-b alive: the test needs a split", len(mine), len(all))
	}
	waitOwned(t, a, mine)
	st := s.Status()
	if len(st.Owned)+len(st.Others) != len(all) || !slices.Equal(st.Members, []string{"gw-a", "gw-b"}) {
		t.Errorf("status %+v", st)
	}

	m.set("gw-a")
	waitOwned(t, a, all)
	m.set()
	waitOwned(t, a, map[netip.Addr][]string{})

	m.set("gw-a", "gw-b")
	waitOwned(t, a, mine)
	cancel()
	wg.Wait()
	if got := a.last(); len(got) != 0 {
		t.Errorf("after Run ended the announcer still has %v", got)
	}
}

// TestSpeakerRetriesAFailingAnnouncer: an announcer error is reported in the status and
// the same addresses are given again until it succeeds.
func TestSpeakerRetriesAFailingAnnouncer(t *testing.T) {
	m := newFakeMembers("gw-a")
	a := &fakeAnnouncer{fail: errors.New("interface eth9: no such interface"), calls: make(chan struct{}, 1)}
	s := NewSpeaker("gw-a", m, a, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.Run(ctx) })
	want := map[netip.Addr][]string{netip.MustParseAddr("192.0.2.1"): {"eth9"}}
	s.SetAddresses(want)
	waitOwned(t, a, want)
	for deadline := time.Now().Add(5 * time.Second); s.Status().Error == ""; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the announcer's error is not in the status")
		}
	}
	a.mu.Lock()
	n := len(a.sets)
	a.fail = nil
	a.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); s.Status().Error != ""; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not retried after %d calls", n)
		}
	}
	cancel()
}

// TestSpeakerReportsWhatItApplies: every change given to the announcer is bracketed by
// Applying and Applied with the members it came from, so that the membership tells the
// peers only what the announcer really does.
func TestSpeakerReportsWhatItApplies(t *testing.T) {
	m := newFakeMembers("gw-a", "gw-b")
	a := &fakeAnnouncer{calls: make(chan struct{}, 1), m: m}
	s := NewSpeaker("gw-a", m, a, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(ctx) })
	s.SetAddresses(map[netip.Addr][]string{netip.MustParseAddr("192.0.2.1"): {"eth0"}, netip.MustParseAddr("192.0.2.2"): {"eth0"}})
	m.set("gw-b")
	want := []string{"applying gw-b", "set", "applied gw-b"}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		m.mu.Lock()
		ev := slices.Clone(m.events)
		m.mu.Unlock()
		if len(ev) >= 3 && slices.Equal(ev[len(ev)-3:], want) {
			if len(ev)%3 != 0 {
				t.Errorf("events %q: a Set not bracketed by Applying and Applied", ev)
			}
			for i := 0; i+2 < len(ev); i += 3 {
				if !strings.HasPrefix(ev[i], "applying ") || ev[i+1] != "set" || ev[i+2] != "applied "+strings.TrimPrefix(ev[i], "applying ") {
					t.Errorf("events %q: %q, %q, %q is not Applying, Set, Applied of the same members", ev, ev[i], ev[i+1], ev[i+2])
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events %q, want them to end with %q", ev, want)
		}
	}
	cancel()
	wg.Wait()
}
