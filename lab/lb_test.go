package lab

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// siteSlice is slice() with the site's backend addresses (10.210.1.1N, fd00:210:1::1N).
func siteSlice(svc *v1.Service, family discovery.AddressType, eps []endpoint) *discovery.EndpointSlice {
	es := slice(svc, family, eps)
	for i := range es.Endpoints {
		for j, a := range es.Endpoints[i].Addresses {
			a = strings.Replace(a, "10.200.2.", "10.210.1.", 1)
			es.Endpoints[i].Addresses[j] = strings.Replace(a, "fd00:200:2::", "fd00:210:1::", 1)
		}
	}
	return es
}

// lbSite is a site with its gateways' daemons announcing one LoadBalancer IP.
type lbSite struct {
	*Site
	daemons []*Daemon
	macs    []string
	args    func(i int) []string
}

const lbAddr = "10.210.0.200:80"

var lbIP = netip.MustParseAddr("10.210.0.200")

func newLBSite(t *testing.T) *lbSite {
	s := &lbSite{Site: NewSite(t, SiteOptions{Prefix: "egf"})}
	dir := ManifestDir(t.TempDir())
	svc := service("lb-web", []string{"10.96.20.1"}, loadBalancer(30220, lbIP.String(), "fd00:210::200"))
	dir.Write(t, "lb-web", manifests(svc, siteSlice(svc, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(pools, []byte(SitePoolsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s.args = func(i int) []string {
		return []string{"--proxy-mode=nftables", "--manifests", string(dir),
			"--hostname-override", fmt.Sprintf("gw-%d", i+1), "--node-ip", s.Gateways[i].IPv4.String(),
			"--healthz-bind-address", "0.0.0.0:10256", "--metrics-bind-address", "127.0.0.1:10249",
			"--lb-announce", "--lb-pools-file", pools}
	}
	for i, g := range s.Gateways {
		s.daemons = append(s.daemons, g.StartDaemon(t, s.args(i)...))
		mac, err := g.MAC("eth0")
		if err != nil {
			t.Fatal(err)
		}
		s.macs = append(s.macs, mac)
	}
	return s
}

// through waits (bounded) until new connections go through gateway i (see Site.Through).
func (s *lbSite) through(t *testing.T, i int, within time.Duration) time.Time {
	t.Helper()
	at, err := s.Through(lbAddr, s.macs, i, within)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// owner finds which gateway the LoadBalancer IP goes through now.
func (s *lbSite) owner(t *testing.T) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r, err := s.Client.AskOnce(lbAddr, time.Second)
		if err != nil {
			continue
		}
		for i := range s.Gateways {
			if r.Reply.Source == GatewayBackIPv4(i) {
				s.through(t, i, 5*time.Second)
				return i
			}
		}
	}
	t.Fatalf("%s never answered", lbAddr)
	return -1
}

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
// answered by both gateways.
func TestLoadBalancerFailover(t *testing.T) {
	s := newLBSite(t)
	watch, err := s.Client.WatchARP(lbIP, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	owner := s.owner(t)
	t.Logf("%s goes through gateway-%d (MACs %v)", lbAddr, owner+1, s.macs)

	const kills = 20
	var took []time.Duration
	for round := range kills {
		other := 1 - owner
		s.daemons[owner].Kill(t)
		killed := time.Now()
		moved := s.through(t, other, 10*time.Second)
		took = append(took, moved.Sub(killed))
		s.daemons[owner] = s.Gateways[owner].StartDaemon(t, s.args(owner)...)
		restarted := time.Now()
		back := s.through(t, owner, 10*time.Second)
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
		moved := s.through(t, other, 10*time.Second)
		cut = append(cut, moved.Sub(at))
		if err := s.CutLink(owner, false); err != nil {
			t.Fatal(err)
		}
		back := s.through(t, owner, 10*time.Second)
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
	moved := s.through(t, other, 10*time.Second)
	if code, err := postDrain(s.Gateways[owner], "0"); err != nil || code != http.StatusOK {
		t.Fatalf("serve gateway-%d again: %d %v", owner+1, code, err)
	}
	back := s.through(t, owner, 10*time.Second)
	t.Logf("drain: gateway-%d drained, through gateway-%d after %v; serving again, back after %v",
		owner+1, other+1, moved.Sub(drainAt).Round(time.Millisecond), back.Sub(moved).Round(time.Millisecond))

	// A stopping gateway (SIGTERM: an update, a shutdown) hands the IP over first too.
	stopAt := time.Now()
	s.daemons[owner].Stop(t)
	moved = s.through(t, other, 10*time.Second)
	s.daemons[owner] = s.Gateways[owner].StartDaemon(t, s.args(owner)...)
	back = s.through(t, owner, 10*time.Second)
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
func postDrain(h *Host, on string) (int, error) {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: h.DialContext}}
	req, err := http.NewRequest(http.MethodPost, DashboardURL+"api/drain?on="+on, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+DashboardToken)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
