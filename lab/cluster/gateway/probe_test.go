package gateway

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/labtest"
)

// eventually polls cond until it reports done, for at most within; it fails the test with
// cond's last state otherwise. The bounds are generous: after an apiserver outage the
// informers reconnect with a backoff of up to 30 s, and no bound here is a timing claim.
func eventually(t *testing.T, within time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		done, state := cond()
		if done {
			t.Logf("%s (after %v)", what, time.Since(start).Round(10*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, within, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// probes is how many new connections (or UDP flows) spread makes: enough that a backend with
// a third of the traffic is missed with a probability of (2/3)^30 ≈ 5e-6.
const probes = 30

// spread opens probes new TCP connections from h to addr and reports whether every one was
// answered and the backends that answered are exactly want.
func spread(h *lab.Host, addr string, want ...string) (bool, string) {
	got := map[string]int{}
	for i := range probes {
		r := h.Probe(addr)
		if r.Outcome != lab.Answered {
			return false, fmt.Sprintf("tcp %s probe %d: %v (answered so far: %v)", addr, i+1, r, got)
		}
		got[r.Reply.Backend]++
	}
	return sameBackends(got, want), fmt.Sprintf("tcp %s answered by %v, want %v", addr, got, want)
}

// udpSpread is spread for UDP: each probe is a new flow (a new source port).
func udpSpread(h *lab.Host, addr string, want ...string) (bool, string) {
	got := map[string]int{}
	for i := range probes {
		f, err := h.OpenUDP(0, addr)
		if err != nil {
			return false, err.Error()
		}
		r := f.Ask()
		f.Close()
		if r.Outcome != lab.Answered {
			return false, fmt.Sprintf("udp %s flow %d: %v (answered so far: %v)", addr, i+1, r, got)
		}
		got[r.Reply.Backend]++
	}
	return sameBackends(got, want), fmt.Sprintf("udp %s answered by %v, want %v", addr, got, want)
}

func sameBackends(got map[string]int, want []string) bool {
	return slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(slices.Values(want)))
}

// follows waits until TCP to tcpAddr and UDP to udpAddr ("" for none) reach exactly want.
func follows(t *testing.T, h *lab.Host, what, tcpAddr, udpAddr string, want ...string) {
	t.Helper()
	eventually(t, 90*time.Second, what, func() (bool, string) {
		if ok, state := spread(h, tcpAddr, want...); !ok || udpAddr == "" {
			return ok, state
		}
		return udpSpread(h, udpAddr, want...)
	})
}

// outcome waits until a TCP probe from h to addr ends in want.
func outcome(t *testing.T, h *lab.Host, addr string, want lab.Outcome) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("tcp %s %v", addr, want), func() (bool, string) {
		r := h.Probe(addr)
		return r.Outcome == want, r.String()
	})
}

// unanswered waits until a TCP probe from h to addr is not answered, however it fails.
func unanswered(t *testing.T, h *lab.Host, addr string) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("tcp %s not answered", addr), func() (bool, string) {
		r := h.Probe(addr)
		return r.Outcome != lab.Answered, r.String()
	})
}

// healthz is what the daemon's health endpoint at path answers inside the gateway.
type healthz struct {
	code int
	body string
}

func (hz healthz) String() string { return fmt.Sprintf("%d %s", hz.code, strings.TrimSpace(hz.body)) }

// check returns the named informational check of a /healthz body.
func (hz healthz) check(name string) (ok bool, detail map[string]any, found bool) {
	var body struct {
		Checks map[string]struct {
			OK     bool           `json:"ok"`
			Detail map[string]any `json:"detail"`
		} `json:"checks"`
	}
	if err := json.Unmarshal([]byte(hz.body), &body); err != nil {
		return false, nil, false
	}
	c, found := body.Checks[name]
	return c.OK, c.Detail, found
}

func getHealthz(l *lab.Lab, path string) healthz {
	code, body, err := l.Gateway.Fetch("http://127.0.0.1:10256" + path)
	if err != nil {
		return healthz{body: err.Error()}
	}
	return healthz{code: code, body: body}
}

// waitHealthz waits until the gateway's health server answers path with code.
func waitHealthz(t *testing.T, l *lab.Lab, within time.Duration, what, path string, code int) {
	t.Helper()
	eventually(t, within, what, func() (bool, string) {
		hz := getHealthz(l, path)
		return hz.code == code, hz.String()
	})
}

// metric returns the value of an unlabelled series of the daemon's /metrics.
func metric(l *lab.Lab, name string) (float64, error) {
	code, body, err := l.Gateway.Fetch("http://127.0.0.1:10249/metrics")
	if err != nil {
		return 0, err
	}
	if code != 200 {
		return 0, fmt.Errorf("/metrics: %d", code)
	}
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no series %s", name)
}

// metricIs waits until the series name has the value want.
func metricIs(t *testing.T, l *lab.Lab, name string, want float64) {
	t.Helper()
	eventually(t, 90*time.Second, fmt.Sprintf("%s = %v", name, want), func() (bool, string) {
		v, err := metric(l, name)
		if err != nil {
			return false, err.Error()
		}
		return v == want, fmt.Sprintf("%s = %v", name, v)
	})
}

// routeProto is the rtm_protocol edgegate tags its routes with (daemon/kernel/route).
const routeProto = 69

// kernelRoute is a route of the gateway's main table as the test compares them.
type kernelRoute struct {
	Dst, Via, Dev string
	Proto         int
}

func (r kernelRoute) String() string {
	s := r.Dst
	if r.Via != "" {
		s += " via " + r.Via
	}
	return fmt.Sprintf("%s dev %s proto %d", s, r.Dev, r.Proto)
}

// routes lists the gateway namespace's main routing table, both families, read with netlink
// in that namespace: edgegate's (proto 69) and everyone else's.
func routes(t *testing.T, l *lab.Lab) (edgegate, others []string) {
	t.Helper()
	ns, err := netns.GetFromName(l.Gateway.NS)
	if err != nil {
		t.Fatalf("open namespace %s: %v", l.Gateway.NS, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatalf("netlink in %s: %v", l.Gateway.NS, err)
	}
	defer h.Close()
	names := map[int]string{}
	links, err := h.LinkList()
	if err != nil {
		t.Fatalf("links of %s: %v", l.Gateway.NS, err)
	}
	for _, link := range links {
		names[link.Attrs().Index] = link.Attrs().Name
	}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatalf("routes of %s: %v", l.Gateway.NS, err)
		}
		for _, r := range rs {
			kr := kernelRoute{Dst: "default", Dev: names[r.LinkIndex], Proto: int(r.Protocol)}
			if r.Dst != nil {
				kr.Dst = r.Dst.String()
			}
			if r.Gw != nil {
				kr.Via = r.Gw.String()
			}
			if kr.Proto == routeProto {
				edgegate = append(edgegate, kr.String())
			} else {
				others = append(others, kr.String())
			}
		}
	}
	slices.Sort(edgegate)
	slices.Sort(others)
	return edgegate, others
}

// routesAre waits until edgegate's routes in the gateway are exactly want ("dst via gw dev
// d proto 69" lines, sorted), and checks every other route is still exactly others.
func routesAre(t *testing.T, l *lab.Lab, what string, others []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	eventually(t, 60*time.Second, what, func() (bool, string) {
		mine, _ := routes(t, l)
		return slices.Equal(mine, want), fmt.Sprintf("edgegate's routes %q, want %q", mine, want)
	})
	if _, now := routes(t, l); !slices.Equal(now, others) {
		t.Errorf("routes that are not edgegate's changed:\nnow  %q\nwere %q", now, others)
	}
}

// addPodAddr puts a pod's address on a backend (on its loopback: the backend answers on every
// address), so traffic to it crosses the gateway's pod route.
func addPodAddr(t *testing.T, l *lab.Lab, h *lab.Host, addr netip.Addr) {
	t.Helper()
	labtest.Exec(t, h, "ip", "addr", "add", netip.PrefixFrom(addr, addr.BitLen()).String(), "dev", "lo")
}
