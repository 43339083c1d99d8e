package labtest

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/lb/member"

	"github.com/edgegate/edgegate/lab"
)

// TestForgedPeers: a host on the segment (the client's namespace) hears the gateways'
// heartbeats and multicasts forged ones: a peer that would own the LoadBalancer IP,
// unsigned and signed with another key; the owner's heartbeats captured while it drained,
// replayed while both run, while the other gateway restarts and after the owner itself
// restarted; and, signed with the site's key, a draining heartbeat of the owner's earlier
// incarnation (stale). Accepted, any of them would move the IP (to the forged peer, or to
// the other gateway). It never moves: every ARP reply comes from the owner's MAC and new
// connections go through it; the gateways log each refusal naming the client's address,
// and count it by reason. Last, the owner dies and the other gateway restarts while the
// owner's captured heartbeats are replayed in order, which would keep the dead owner
// alive (and its IP unanswered) for ten seconds: the IP moves to the other gateway as if
// nobody replayed anything.
func TestForgedPeers(t *testing.T) {
	s := NewLBSite(t, "nftables")
	owner := s.Owner(t)
	other := 1 - owner
	ownerName, ownerIP := fmt.Sprintf("gw-%d", owner+1), s.Gateways[owner].IPv4
	tap, err := s.Client.TapHeartbeats()
	if err != nil {
		t.Fatal(err)
	}
	defer tap.Close()

	// The owner drains and serves again: the tap keeps its draining heartbeats.
	if code, err := postDrain(s.Gateways[owner], "1"); err != nil || code != http.StatusOK {
		t.Fatalf("drain gateway-%d: %d %v", owner+1, code, err)
	}
	s.ThroughGateway(t, other, 10*time.Second)
	// It drains until the tap holds three of its draining heartbeats: the IP can move in
	// less than two heartbeat intervals.
	isDraining := func(h member.Heartbeat) bool { return h.Draining }
	var draining []lab.CapturedHeartbeat
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if draining = tap.Captured(ownerIP, isDraining); len(draining) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("captured %d draining heartbeats of gateway-%d in 10s, want 3 or more", len(draining), owner+1)
		}
	}
	if code, err := postDrain(s.Gateways[owner], "0"); err != nil || code != http.StatusOK {
		t.Fatalf("serve gateway-%d again: %d %v", owner+1, code, err)
	}
	s.ThroughGateway(t, owner, 10*time.Second)
	draining = tap.Captured(ownerIP, isDraining)
	t.Logf("captured %d draining heartbeats of %s (incarnation %d)", len(draining), ownerName, draining[0].Incarnation)

	watch, err := s.Client.WatchARP(lbIP, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	// The IP stays with the owner: new connections through it, every ARP reply since from
	// its MAC (and some replies at all).
	stays := func(what string, since time.Time) {
		t.Helper()
		s.ThroughGateway(t, owner, 5*time.Second)
		macs := watch.MACsSince(since)
		if len(macs) != 1 || macs[s.MACs[owner]] == 0 {
			t.Fatalf("%s: ARP replies for %s since by %v, want only gateway-%d's %s", what, lbIP, macs, owner+1, s.MACs[owner])
		}
		t.Logf("%s: %s still answered by gateway-%d only (%d ARP replies)", what, lbIP, owner+1, macs[s.MACs[owner]])
	}
	// send multicasts each datagram in turn every 20 ms for about a second.
	send := func(datagrams ...[]byte) {
		t.Helper()
		for i := range 50 {
			if err := tap.Send(datagrams[i%len(datagrams)]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// A peer whose name wins the IP: forged without the site's key.
	evil := ""
	for i := 0; evil == ""; i++ {
		name := fmt.Sprintf("gw-evil-%d", i)
		if member.Owners([]netip.Addr{lbIP}, []string{"gw-1", "gw-2", name})[lbIP] == name {
			evil = name
		}
	}
	forged := member.Heartbeat{Name: evil, Incarnation: time.Now().UnixNano(), Seq: 1}
	forgedDrain := member.Heartbeat{Name: ownerName, Incarnation: draining[0].Incarnation, Seq: draining[0].Seq + 1<<20, Draining: true}
	start := time.Now()
	send(member.Encode(forged, nil), member.Encode(forged, []byte("not-the-site-key-0123456789")),
		member.Encode(forgedDrain, nil), member.Encode(forgedDrain, []byte("not-the-site-key-0123456789")))
	time.Sleep(time.Second)
	stays("forged peer and forged drain (unsigned, another key)", start)

	var replays [][]byte
	for _, c := range draining {
		replays = append(replays, c.Data)
	}
	start = time.Now()
	send(replays...)
	stays("the owner's draining heartbeats replayed", start)
	otherDaemons := []*Daemon{s.Daemons[other]}

	// The other gateway restarts (its state directory kept) while the replays go on: what
	// it heard before the restart is sealed, and the owner starts a new incarnation.
	start = time.Now()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; i < 1000; i++ { // at most 20 s
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				_ = tap.Send(replays[i%len(replays)])
			}
		}
	})
	s.Daemons[other].Stop(t)
	s.Daemons[other] = StartDaemon(t, s.Gateways[other], s.Args(other)...)
	otherDaemons = append(otherDaemons, s.Daemons[other])
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	stays(fmt.Sprintf("gateway-%d restarted during replays", other+1), start)

	// The owner restarts (it hands the IP over and takes it back): its earlier incarnation is
	// stale, replayed or signed anew with the site's key.
	s.Daemons[owner].Stop(t)
	s.ThroughGateway(t, other, 10*time.Second)
	s.Daemons[owner] = StartDaemon(t, s.Gateways[owner], s.Args(owner)...)
	s.ThroughGateway(t, owner, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	start = time.Now()
	send(append(replays, member.Encode(forgedDrain, s.Key))...)
	time.Sleep(500 * time.Millisecond)
	stays(fmt.Sprintf("gateway-%d restarted; its old incarnation replayed and signed", owner+1), start)

	// The gateways say what they refused, and from where.
	from := "from=" + s.Client.IPv4.String()
	for _, c := range []struct {
		d      *Daemon
		who    string
		reason string
	}{
		{otherDaemons[0], "before its restart", member.RejectUnsigned},
		{otherDaemons[0], "before its restart", member.RejectBadMAC},
		{otherDaemons[0], "before its restart", member.RejectReplayed},
		{otherDaemons[1], "after its restart", member.RejectStale},
	} {
		line, ok := c.d.LogLine("refused a heartbeat", from, "reason="+c.reason)
		if !ok {
			t.Errorf("gateway-%d %s: no log line of a %s heartbeat refused %s", other+1, c.who, c.reason, from)
		}
		t.Logf("gateway-%d %s: %s", other+1, c.who, line)
	}
	code, body, err := s.Gateways[other].Fetch("http://127.0.0.1:10249/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("metrics of gateway-%d: %d %v", other+1, code, err)
	}
	var counted []string
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "edgegate_lb_heartbeats_rejected_total{") {
			counted = append(counted, strings.TrimSpace(line))
		}
	}
	t.Logf("gateway-%d (since its restart): %s", other+1, strings.Join(counted, ", "))
	if !strings.Contains(body, `edgegate_lb_heartbeats_rejected_total{reason="stale"}`) ||
		strings.Contains(body, `edgegate_lb_heartbeats_rejected_total{reason="stale"} 0`+"\n") {
		t.Errorf("gateway-%d counted no stale heartbeat: %v", other+1, counted)
	}
	replayDeadOwner(t, s, tap, owner)
}

// replayDeadOwner kills the owner, restarts the other gateway and replays thirty of the
// owner's last heartbeats in order, one every 350 ms (each would keep it alive for a
// heartbeat timeout): the IP must move to the other gateway within 5 s of its start all
// the same.
func replayDeadOwner(t *testing.T, s *LBSite, tap *lab.HeartbeatTap, owner int) {
	other := 1 - owner
	time.Sleep(3 * time.Second) // thirty heartbeats of the owner's current incarnation
	caught := tap.Captured(s.Gateways[owner].IPv4, func(h member.Heartbeat) bool { return !h.Draining && !h.Listening })
	if len(caught) < 30 {
		t.Fatalf("captured %d heartbeats of gateway-%d, want 30", len(caught), owner+1)
	}
	caught = caught[len(caught)-30:]
	s.Daemons[owner].Kill(t)
	s.Daemons[other].Stop(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		for _, c := range caught {
			_ = tap.Send(c.Data)
			time.Sleep(350 * time.Millisecond)
		}
	})
	s.Daemons[other] = StartDaemon(t, s.Gateways[other], s.Args(other)...)
	started := time.Now()
	moved := s.ThroughGateway(t, other, 5*time.Second)
	t.Logf("gateway-%d dead, gateway-%d restarted during replays of its heartbeats: through gateway-%d %v after its start",
		owner+1, other+1, other+1, moved.Sub(started).Round(time.Millisecond))
	if _, ok := s.Daemons[other].LogLine("refused a heartbeat", "from="+s.Client.IPv4.String(), "reason=stale", "claims=gw-"); !ok {
		t.Errorf("gateway-%d logged no stale heartbeat refused from the client", other+1)
	}
}
