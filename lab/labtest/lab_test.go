package labtest

import (
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/lab"
)

func TestMain(m *testing.M) { Main(m) }

// TestTopology proves the wiring without any daemon: both clients reach every backend
// through the gateway's plain forwarding, over TCP and UDP, IPv4 and IPv6, and the backends
// see the clients' own addresses (no NAT yet).
func TestTopology(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egt"})
	for _, c := range []*lab.Host{l.Client, l.Client2} {
		for _, b := range l.Backends {
			for _, fam := range []struct {
				backend, client netip.Addr
			}{{b.IPv4, c.IPv4}, {b.IPv6, c.IPv6}} {
				addr := netip.AddrPortFrom(fam.backend, lab.BackendTCPPort).String()
				r := c.Probe(addr)
				if r.Outcome != lab.Answered || r.Reply.Backend != b.Name || r.Reply.Source != fam.client {
					t.Errorf("%s -> tcp %s: %v; want answered by %s seeing %s", c.Name, addr, r, b.Name, fam.client)
				}
				udpAddr := netip.AddrPortFrom(fam.backend, lab.BackendUDPPort).String()
				f, err := c.OpenUDP(41000, udpAddr)
				if err != nil {
					t.Fatal(err)
				}
				u := f.Ask()
				f.Close()
				if u.Outcome != lab.Answered || u.Reply.Backend != b.Name || u.Reply.Source != fam.client {
					t.Errorf("%s -> udp %s: %v; want answered by %s seeing %s", c.Name, udpAddr, u, b.Name, fam.client)
				}
			}
		}
	}
}

// TestOutcomes shows that the client tells a reject, a drop and a missing route apart, and
// fast: a reject must not look like a timeout.
func TestOutcomes(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egt"})
	Exec(t, l.Gateway, "nft", "add table inet labtest\n"+
		"add chain inet labtest input { type filter hook input priority 0; }\n"+
		"add rule inet labtest input tcp dport 9999 drop")

	// Outcomes are told apart by what came back, not by how long it took; only a timeout
	// must have waited the dial timeout out.
	for _, tc := range []struct {
		what string
		addr string
		want lab.Outcome
	}{
		{"closed port on the gateway", "10.200.1.1:9", lab.Refused},
		{"closed port on the gateway, IPv6", "[fd00:200:1::1]:9", lab.Refused},
		{"dropped port", "10.200.1.1:9999", lab.TimedOut},
		{"address behind the uplink, where nothing answers", "10.96.0.10:80", lab.TimedOut},
	} {
		r := l.Client.Probe(tc.addr)
		if r.Outcome != tc.want || tc.want == lab.TimedOut && r.Took < lab.DialTimeout-100*time.Millisecond {
			t.Errorf("%s (%s): %v; want %v", tc.what, tc.addr, r, tc.want)
		}
	}

	f, err := l.Client.OpenUDP(41001, "10.200.1.1:9")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.LocalAddr(); got != netip.MustParseAddrPort("10.200.1.2:41001") {
		t.Errorf("udp flow source = %v, want 10.200.1.2:41001", got)
	}
	// Many rejects in a row stay rejects: the lab lifts the gateway's ICMP rate limit.
	for i := range 20 {
		if r := f.Ask(); r.Outcome != lab.Refused {
			t.Fatalf("udp to a closed gateway port, datagram %d: %v; want refused (ICMP port unreachable)", i+1, r)
		}
	}
}

// TestLabsAreIndependentAndRemoved runs two labs at once (same addresses, different
// namespaces) and checks that nothing of either is left afterwards.
func TestLabsAreIndependentAndRemoved(t *testing.T) {
	if err := lab.CheckPrerequisite(); err != nil {
		cannotBuild(t, err.Error())
	}
	var mu sync.Mutex
	var names []string
	t.Run("group", func(t *testing.T) {
		for _, name := range []string{"a", "b"} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				l := New(t, lab.Options{Prefix: "egt"})
				mu.Lock()
				for _, h := range l.Hosts() {
					names = append(names, h.NS)
				}
				mu.Unlock()
				if r := l.Client.Probe("10.200.2.12:8080"); r.Outcome != lab.Answered || r.Reply.Backend != "backend-2" {
					t.Errorf("probe backend-2: %v", r)
				}
				out := Exec(t, l.Gateway, "ip", "-br", "link")
				for _, dev := range []string{"br0", "c1", "c2", "b1", "b2", "b3", "uplink"} {
					if !strings.Contains(out, dev) {
						t.Errorf("gateway links lack %s:\n%s", dev, out)
					}
				}
			})
		}
	})
	if len(names) != 14 {
		t.Fatalf("got %d namespace names, want 14: %v", len(names), names)
	}
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			t.Errorf("namespace %s used by both labs", n)
		}
		seen[n] = true
		if _, err := os.Stat("/run/netns/" + n); !os.IsNotExist(err) {
			t.Errorf("namespace %s still exists after its lab ended (stat: %v)", n, err)
		}
	}
}
