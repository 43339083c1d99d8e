package member

import (
	"context"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// segment runs fn inside a namespace (kerneltest.InNetns) wired by a veth to a second,
// anonymous namespace: "hb0" 10.99.0.1/24 here, "hb1" 10.99.0.2/24 there. in(B) runs a
// function with the calling (locked) thread switched into the second namespace.
func segment(t *testing.T, fn func(inB func(func()))) {
	kerneltest.InNetns(t, "egmem", func(string) {
		here, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer here.Close()
		other, err := netns.New() // switches this thread into it
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if err := netns.Set(here); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "hb0"}, PeerName: "hb1", PeerNamespace: netlink.NsFd(other)}); err != nil {
			t.Fatal(err)
		}
		up := func(h *netlink.Handle, name, cidr string) {
			l, err := h.LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			a, _ := netlink.ParseAddr(cidr)
			if err := h.AddrAdd(l, a); err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
		}
		hh, err := netlink.NewHandleAt(here)
		if err != nil {
			t.Fatal(err)
		}
		defer hh.Close()
		oh, err := netlink.NewHandleAt(other)
		if err != nil {
			t.Fatal(err)
		}
		defer oh.Close()
		up(hh, "hb0", "10.99.0.1/24")
		up(oh, "hb1", "10.99.0.2/24")
		fn(func(f func()) {
			if err := netns.Set(other); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := netns.Set(here); err != nil {
					t.Fatal(err)
				}
			}()
			f()
		})
	})
}

// running is a Group with its Run goroutine.
type running struct {
	*Group
	stop context.CancelFunc
	done sync.WaitGroup
}

func start(t *testing.T, cfg Config) *running {
	t.Helper()
	g, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Group: g, stop: cancel}
	r.done.Go(func() { _ = g.Run(ctx) })
	t.Cleanup(r.end)
	return r
}

func (r *running) end() { r.stop(); r.done.Wait() }

// waitMembers polls (bounded) until g's members are want.
func waitMembers(t *testing.T, g *running, want ...string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got = g.Members(); slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("members %v, want %v", got, want)
}

// TestGroupOnASegment: two gateways on a veth hear each other's multicast heartbeats and
// agree on the members; one stopping leaves the other alone after the timeout; one
// draining leaves at once; a heartbeat signed with another key is refused.
func TestGroupOnASegment(t *testing.T) {
	segment(t, func(inB func(func())) {
		key := []byte("site-key")
		a := start(t, Config{Name: "gw-a", Interfaces: []string{"hb0"}, Key: key})
		var b *running
		inB(func() { b = start(t, Config{Name: "gw-b", Interfaces: []string{"hb1"}, Key: key}) })
		waitMembers(t, a, "gw-a", "gw-b")
		waitMembers(t, b, "gw-a", "gw-b")

		b.SetDraining(true)
		waitMembers(t, a, "gw-a")
		waitMembers(t, b, "gw-a")
		b.SetDraining(false)
		waitMembers(t, a, "gw-a", "gw-b")

		b.end()
		stopped := time.Now()
		waitMembers(t, a, "gw-a")
		t.Logf("gw-a saw gw-b gone %v after it stopped (timeout %v)", time.Since(stopped).Round(time.Millisecond), DefaultTimeout)

		var c *running
		inB(func() { c = start(t, Config{Name: "gw-c", Interfaces: []string{"hb1"}, Key: []byte("other-key")}) })
		time.Sleep(5 * DefaultInterval)
		if m := a.Members(); slices.Contains(m, "gw-c") {
			t.Errorf("a heartbeat with the wrong key made gw-c a member: %v", m)
		}
		if _, bad := a.Peers(); bad == 0 {
			t.Error("no heartbeat refused for its key")
		}
		c.end()
	})
}

// TestGroupInterfaceLater: an interface that does not exist at Open is joined when it
// appears.
func TestGroupInterfaceLater(t *testing.T) {
	segment(t, func(inB func(func())) {
		a := start(t, Config{Name: "gw-a", Interfaces: []string{"hb0", "late0"}})
		var b *running
		inB(func() { b = start(t, Config{Name: "gw-b", Interfaces: []string{"hb1"}}) })
		waitMembers(t, a, "gw-a", "gw-b")
		if err := netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "late0"}}); err != nil {
			// The development hosts' kernels lack the dummy type: a bridge will do.
			if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "late0"}}); err != nil {
				t.Fatal(err)
			}
		}
		l, _ := netlink.LinkByName("late0")
		_ = netlink.LinkSetUp(l)
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			a.mu.Lock()
			_, ok := a.joined["late0"]
			a.mu.Unlock()
			if ok {
				break
			}
			if time.Now().After(deadline) {
				ifs, _ := net.Interfaces()
				t.Fatalf("late0 not joined; interfaces %v", ifs)
			}
		}
		joined := func() []string {
			a.mu.Lock()
			defer a.mu.Unlock()
			return slices.Sorted(maps.Keys(a.joined))
		}
		a.SetInterfaces([]string{"hb0"})
		if j := joined(); !slices.Equal(j, []string{"hb0"}) {
			t.Errorf("after dropping late0: sending on %v", j)
		}
		a.SetInterfaces([]string{"hb0", "late0"}) // the socket is still in the group there
		if j := joined(); !slices.Equal(j, []string{"hb0", "late0"}) {
			t.Errorf("after taking late0 back: sending on %v", j)
		}
		waitMembers(t, b, "gw-a", "gw-b")
	})
}

// TestGroupCloseWithoutRun: a Group that never ran releases its socket, and a Group that
// ran may be closed again.
func TestGroupCloseWithoutRun(t *testing.T) {
	segment(t, func(func(func())) {
		g, err := Open(Config{Name: "gw-a", Interfaces: []string{"hb0"}, Port: 7481})
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		g.Close()
		r := start(t, Config{Name: "gw-a", Interfaces: []string{"hb0"}, Port: 7481})
		r.end()
		r.Close()
	})
}

// applier stands in for the speaker of a group: it reports every change of the members as
// applied (Applying, then Applied), each only once held is false, as an announcer that
// takes its time would.
type applier struct {
	held atomic.Bool
	stop context.CancelFunc
	done sync.WaitGroup
}

func follow(t *testing.T, g *running) *applier {
	ctx, cancel := context.WithCancel(context.Background())
	a := &applier{stop: cancel}
	apply := func() {
		m := g.Members()
		g.Applying(m)
		for a.held.Load() && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		g.Applied(m)
	}
	a.done.Go(func() {
		apply()
		for {
			select {
			case <-ctx.Done():
				return
			case <-g.Changed():
				apply()
			}
		}
	})
	t.Cleanup(func() { a.stop(); a.done.Wait() })
	return a
}

// stays checks, for a while, that g's members do not become other than want: what a
// gateway must not do before its peer lets go.
func stays(t *testing.T, g *running, what string, want ...string) {
	t.Helper()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if got := g.Members(); !slices.Equal(got, want) {
			t.Fatalf("%s: members %v, want %v until the peer has let go", what, got, want)
		}
	}
}

// TestGroupHandsOverOnlyOnceLetGo: with speakers that report what they applied, a gateway
// coming back (done draining) claims only once its peer's announcer has let its addresses
// go, and a draining gateway's peer takes them only once the drainer's has, however long
// either announcer takes (here: held for a second, five times the timed Handover).
func TestGroupHandsOverOnlyOnceLetGo(t *testing.T) {
	segment(t, func(inB func(func())) {
		a := start(t, Config{Name: "gw-a", Interfaces: []string{"hb0"}})
		var b *running
		inB(func() { b = start(t, Config{Name: "gw-b", Interfaces: []string{"hb1"}}) })
		sa, sb := follow(t, a), follow(t, b)
		waitMembers(t, a, "gw-a", "gw-b")
		waitMembers(t, b, "gw-a", "gw-b")

		// gw-a drains while its announcer is slow to let go: gw-b keeps gw-a a member.
		sa.held.Store(true)
		a.SetDraining(true)
		stays(t, b, "gw-a drains, its announcer still answering", "gw-a", "gw-b")
		sa.held.Store(false)
		waitMembers(t, b, "gw-b")

		// gw-a serves again while gw-b's announcer is slow to let gw-a's share go: gw-a
		// waits for it.
		sb.held.Store(true)
		a.SetDraining(false)
		waitMembers(t, b, "gw-a", "gw-b")
		stays(t, a, "gw-a serves again, gw-b's announcer still answering", "gw-b")
		sb.held.Store(false)
		waitMembers(t, a, "gw-a", "gw-b")
	})
}
