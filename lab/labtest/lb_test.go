package labtest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/lab"
)

func quantiles(ds []time.Duration) (median, maximum time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// TestLoadBalancerFailover: two gateways on one segment announce a LoadBalancer IP (ARP),
// one at a time. Killing the owner's daemon (SIGKILL, 20 times) moves new connections to
// the other gateway, the client's neighbour entry with them; the restarted gateway takes
// its IP back. Cutting the owner's link (its switch port down, 5 times) does the same;
// draining it through its dashboard, or stopping its daemon, hands the IP over at once;
// serving again, or a restart, takes it back. An
// ARP watch on the client asks for the IP every 50 ms throughout: no question is ever
// answered by both gateways (each reply is matched to its question, not to when it came).
func TestLoadBalancerFailover(t *testing.T) {
	s := NewLBSite(t, "nftables")
	watch, err := s.Client.WatchARP(lbIP, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	owner := s.Owner(t)
	t.Logf("%s goes through gateway-%d (MACs %v)", lbAddr, owner+1, s.MACs)

	const kills = 20
	var took []time.Duration
	for round := range kills {
		other := 1 - owner
		s.Daemons[owner].Kill(t)
		killed := time.Now()
		moved := s.ThroughGateway(t, other, 10*time.Second)
		took = append(took, moved.Sub(killed))
		s.Daemons[owner] = StartDaemon(t, s.Gateways[owner], s.Args(owner)...)
		restarted := time.Now()
		back := s.ThroughGateway(t, owner, 10*time.Second)
		t.Logf("kill %d: gateway-%d killed, through gateway-%d after %v; restarted, back after %v",
			round+1, owner+1, other+1, took[len(took)-1].Round(time.Millisecond), back.Sub(restarted).Round(time.Millisecond))
	}
	median, maximum := quantiles(took)
	t.Logf("failover after killing the owner's daemon, %d kills: median %v, max %v", kills, median.Round(time.Millisecond), maximum.Round(time.Millisecond))

	const cuts = 5
	var cut []time.Duration
	for round := range cuts {
		other := 1 - owner
		if err := s.CutLink(owner, true); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		moved := s.ThroughGateway(t, other, 10*time.Second)
		cut = append(cut, moved.Sub(at))
		if err := s.CutLink(owner, false); err != nil {
			t.Fatal(err)
		}
		back := s.ThroughGateway(t, owner, 10*time.Second)
		t.Logf("cut %d: gateway-%d's link down, through gateway-%d after %v; link up, back after %v",
			round+1, owner+1, other+1, cut[len(cut)-1].Round(time.Millisecond), back.Sub(moved).Round(time.Millisecond))
	}
	median, maximum = quantiles(cut)
	t.Logf("failover after cutting the owner's link, %d cuts: median %v, max %v", cuts, median.Round(time.Millisecond), maximum.Round(time.Millisecond))

	// A drain (the dashboard's action, as before maintenance) hands the IP over before the
	// gateway stops serving; serving again takes it back.
	other := 1 - owner
	drainAt := time.Now()
	if code, err := postDrain(s.Gateways[owner], "1"); err != nil || code != http.StatusOK {
		t.Fatalf("drain gateway-%d: %d %v", owner+1, code, err)
	}
	moved := s.ThroughGateway(t, other, 10*time.Second)
	if code, err := postDrain(s.Gateways[owner], "0"); err != nil || code != http.StatusOK {
		t.Fatalf("serve gateway-%d again: %d %v", owner+1, code, err)
	}
	back := s.ThroughGateway(t, owner, 10*time.Second)
	t.Logf("drain: gateway-%d drained, through gateway-%d after %v; serving again, back after %v",
		owner+1, other+1, moved.Sub(drainAt).Round(time.Millisecond), back.Sub(moved).Round(time.Millisecond))

	// A stopping gateway (SIGTERM: an update, a shutdown) hands the IP over first too.
	stopAt := time.Now()
	s.Daemons[owner].Stop(t)
	moved = s.ThroughGateway(t, other, 10*time.Second)
	s.Daemons[owner] = StartDaemon(t, s.Gateways[owner], s.Args(owner)...)
	back = s.ThroughGateway(t, owner, 10*time.Second)
	t.Logf("stop: gateway-%d stopped (SIGTERM), through gateway-%d after %v; restarted, back after %v",
		owner+1, other+1, moved.Sub(stopAt).Round(time.Millisecond), back.Sub(moved).Round(time.Millisecond))

	// The dashboards say the same: the owner announces the IP on eth0, the other knows who.
	eventually(t, 5*time.Second, "the dashboards show the IP's owner", func() (bool, string) {
		var mine, theirs struct {
			LoadBalancer struct {
				Speaker struct {
					Members []string
					Owned   map[string][]string
					Others  map[string]string
				}
			}
		}
		err1, err2 := s.Gateways[owner].DashboardState(&mine), s.Gateways[1-owner].DashboardState(&theirs)
		m, o := mine.LoadBalancer.Speaker, theirs.LoadBalancer.Speaker
		ok := err1 == nil && err2 == nil && slices.Equal(m.Owned[lbIP.String()], []string{"eth0"}) &&
			o.Others[lbIP.String()] == fmt.Sprintf("gw-%d", owner+1) && slices.Equal(m.Members, []string{"gw-1", "gw-2"})
		return ok, fmt.Sprintf("owner's %+v (%v), other's %+v (%v)", m, err1, o, err2)
	})

	watch.Stop()
	requests, replies := watch.Answers()
	t.Logf("ARP watch: %d requests for %s, %d replies", requests, lbIP, replies)
	if doubles := watch.DoubleAnswers(); len(doubles) > 0 {
		t.Errorf("%d questions answered by both gateways:\n%s", len(doubles), strings.Join(doubles, "\n"))
	}
}

// postDrain posts the dashboard's drain action (on "1" or "0") to the daemon in h, with the
// lab's token, from inside h.
func postDrain(h *lab.Host, on string) (int, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: h.DialContext}}
	req, err := http.NewRequest(http.MethodPost, lab.DashboardURL+"api/drain?on="+on, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+lab.DashboardToken)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
