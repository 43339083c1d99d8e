package labtest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"

	"github.com/edgegate/edgegate/lab"
)

// ipvsScenarios are ipvs mode's own rows of the matrix: what the kernel's IPVS table holds
// for the shared scenarios, the schedulers' behaviour, the counters an operator reads with
// ipvsadm --stats, and graceful termination. Addresses: ClusterIPs 10.96.11.1-6, extra
// client-1 addresses 10.200.1.21-28.
func ipvsScenarios() []Scenario {
	return []Scenario{
		ipvsTable(),
		ipvsRoundRobin(),
		ipvsLeastConnection(),
		ipvsSourceHashing(),
		ipvsStats(),
		ipvsTerminatingDrains(),
	}
}

// gatewayAddrs4 are the gateway's IPv4 addresses: IPVS has no "any local address", so a
// node port is a virtual server on each of them.
var gatewayAddrs4 = []string{"10.200.1.1", "10.200.2.1", "10.200.3.1", "10.200.9.1"}

// ipvsTable checks the kernel's IPVS table against the shared scenarios' services, the dummy
// interface's addresses and the sysctls, and logs the table as ipvsadm -Ln prints it.
func ipvsTable() Scenario {
	backends := []string{"10.200.2.11:8080", "10.200.2.12:8080", "10.200.2.13:8080"}
	backends6 := []string{"[fd00:200:2::11]:8080", "[fd00:200:2::12]:8080", "[fd00:200:2::13]:8080"}
	type want struct {
		proto, addr, flags string // flags: ipvsadm's "rr" or "rr persistent 300"
		reals              []string
	}
	wants := []want{
		{"TCP", "10.96.10.1:80", "rr", backends},
		{"TCP", "10.96.10.2:80", "rr", backends},
		{"TCP", "203.0.113.103:80", "rr", backends},
		{"TCP", "10.96.10.4:80", "rr persistent 300", backends},
		{"TCP", "198.51.100.14:80", "rr", backends},
		{"TCP", "10.96.10.7:80", "rr", nil},                          // no endpoints: refused by the auxiliary rules
		{"TCP", "10.96.10.8:80", "rr", []string{"10.200.2.12:8080"}}, // the serving terminating one only
		// eTP Local without a local endpoint: the external frontends have no real server
		// (the auxiliary rules drop their traffic), the cluster IP has them all.
		{"TCP", "10.96.10.5:80", "rr", backends},
		{"TCP", "203.0.113.105:80", "rr", nil},
		{"TCP", "10.200.1.1:30105", "rr", nil},
		{"UDP", "10.96.11.5:53", "rr", []string{"10.200.2.12:5353"}},
		{"TCP", "[fd00:96::10:9]:80", "rr", backends6},
		{"TCP", "[2001:db8:113::109]:80", "rr", backends6},
		{"TCP", "[fd00:200:1::1]:30109", "rr", backends6},
		{"TCP", "10.96.11.2:80", "lc", backends},
		{"TCP", "10.96.11.3:80", "sh", backends},
	}
	for _, a := range gatewayAddrs4 {
		wants = append(wants, want{"TCP", a + ":30102", "rr", backends})
	}
	vips := []string{"10.96.10.1/32", "198.51.100.14/32", "203.0.113.103/32", "fd00:96::10:9/128", "2001:db8:113::109/128"}
	return Scenario{
		Name: "ipvs-virtual-servers-addresses-and-sysctls",
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			st := kernelState(t, l)
			t.Logf("ipvsadm -Ln in the gateway:\n%s", ipvs.Format(st.IPVS, false))
			for _, w := range wants {
				e, err := st.VirtualServer(w.proto, w.addr)
				if err != nil {
					t.Error(err)
					continue
				}
				flags, reals := e.Flags(), e.RealServers()
				for _, d := range e.Destinations {
					if d.Weight != 1 || d.Forward != ipvs.Masq {
						t.Errorf("%s %s: real server %s: weight %d forward %s, want 1 Masq", w.proto, w.addr, d.AddrPort(), d.Weight, d.Forward)
					}
				}
				if flags != w.flags || !slices.Equal(reals, w.reals) {
					t.Errorf("%s %s: %s -> %v, want %s -> %v", w.proto, w.addr, flags, reals, w.flags, w.reals)
				}
			}
			dummy, ok := st.Link("edgegate-ipvs0")
			if !ok || dummy.Type != "dummy" {
				t.Fatalf("no dummy interface edgegate-ipvs0:\n%s", st)
			}
			// The VIPs are local through it by local routes, not addresses.
			var onDummy []string
			for _, a := range dummy.Local {
				onDummy = append(onDummy, a.String())
			}
			for _, v := range vips {
				if !slices.Contains(onDummy, v) {
					t.Errorf("edgegate-ipvs0 lacks the local route of %s: %v", v, onDummy)
				}
			}
			if len(dummy.Addrs) > 0 {
				t.Errorf("edgegate-ipvs0 has addresses: %v", dummy.Addrs)
			}
			// The node's own addresses carry node ports without being VIPs.
			for _, a := range append(slices.Clone(gatewayAddrs4), "fd00:200:1::1") {
				if slices.ContainsFunc(onDummy, func(s string) bool { return strings.HasPrefix(s, a+"/") }) {
					t.Errorf("node address %s is on the dummy interface", a)
				}
			}
			for name, v := range map[string]string{
				"net.ipv4.vs.conntrack": "1", "net.ipv4.vs.conn_reuse_mode": "1", "net.ipv4.vs.expire_nodest_conn": "1",
				"net.ipv4.vs.expire_quiescent_template": "1", "net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2",
			} {
				if got, err := l.Gateway.ReadSysctl(name); err != nil || got != v {
					t.Errorf("sysctl %s = %q (%v), want %s", name, got, err, v)
				}
			}
		},
	}
}

// ipvsRoundRobin: rr hands consecutive new connections to the real servers in turn, so N
// connections split exactly evenly; the kernel's per-real-server connection counters say
// the same.
func ipvsRoundRobin() Scenario {
	svc := service("ipvs-rr", []string{"10.96.11.1"}, ipvsScheduler("rr"))
	const n = 30
	return threeReady("ipvs-rr-spreads-evenly", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		byBackend, _ := tally(t, l.Client, "10.96.11.1:80", n)
		t.Logf("rr, %d connections: %s", n, describe(byBackend))
		for _, b := range l.Backends {
			if byBackend[b.Name] != n/len(l.Backends) {
				t.Errorf("rr: %s got %d of %d connections, want exactly %d: %s", b.Name, byBackend[b.Name], n, n/len(l.Backends), describe(byBackend))
			}
		}
		e := settledStats(t, l, "TCP", "10.96.11.1:80", n)
		for _, d := range e.Destinations {
			if got := int(d.Stats.Connections); got != byBackend[backendOf(l, d.Addr)] {
				t.Errorf("rr: kernel counts %d connections to %s, the backend answered %d", got, d.AddrPort(), byBackend[backendOf(l, d.Addr)])
			}
		}
	})
}

// ipvsLeastConnection holds connections open and closes some: lc gives every new
// connection to a real server with the fewest active ones, which rr (turn by turn) would
// not, and the kernel's ActiveConn counts match the connections held.
func ipvsLeastConnection() Scenario {
	svc := service("ipvs-lc", []string{"10.96.11.2"}, ipvsScheduler("lc"))
	const addr = "10.96.11.2:80"
	return threeReady("ipvs-lc-prefers-fewer-active", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		held := map[string][]*lab.HTTPConn{}
		var order []string // the backend of each connection opened, in order
		t.Cleanup(func() {
			for _, cs := range held {
				for _, c := range cs {
					c.Close()
				}
			}
		})
		fewest := func() []string {
			var out []string
			least := -1
			for _, b := range l.Backends {
				switch n := len(held[b.Name]); {
				case least < 0 || n < least:
					out, least = []string{b.Name}, n
				case n == least:
					out = append(out, b.Name)
				}
			}
			return out
		}
		open := func() {
			t.Helper()
			want := fewest()
			c := openHTTP(t, l.Client, addr)
			// One exchange: the connection is established in IPVS's eyes before the next.
			r, err := c.Ask()
			if err != nil {
				c.Close()
				t.Fatalf("held connection %d: %v", len(order)+1, err)
			}
			held[r.Backend] = append(held[r.Backend], c)
			order = append(order, r.Backend)
			if !slices.Contains(want, r.Backend) {
				t.Errorf("connection %d went to %s; the fewest active connections were on %v (held: %s)", len(order), r.Backend, want, describeHeld(held))
			}
		}
		closeOn := func(backend string) {
			t.Helper()
			cs := held[backend]
			if err := cs[len(cs)-1].Reset(); err != nil {
				t.Fatal(err)
			}
			held[backend] = cs[:len(cs)-1]
		}
		for range 3 {
			open()
		}
		// The second backend's connection ends: it alone has none now. rr would go on
		// to the first backend.
		closeOn(order[1])
		open()
		if order[3] != order[1] {
			t.Errorf("after the connection on %s ended, the next went to %s", order[1], order[3])
		}
		closeOn(order[0])
		closeOn(order[2])
		open()
		open()
		t.Logf("lc: connections went to %v; held now: %s", order, describeHeld(held))
		eventually(t, 5*time.Second, "the kernel's active connections match those held", func() (bool, string) {
			e := virtualServer(t, l, "TCP", addr)
			var got []string
			ok := true
			for _, d := range e.Destinations {
				b := backendOf(l, d.Addr)
				got = append(got, fmt.Sprintf("%s=%d/%d", b, d.ActiveConns, d.InactiveConns))
				ok = ok && d.ActiveConns == len(held[b])
			}
			return ok, "ActiveConn/InActConn " + strings.Join(got, " ") + "; held " + describeHeld(held)
		})
	})
}

func describeHeld(held map[string][]*lab.HTTPConn) string {
	var parts []string
	for _, b := range []string{"backend-1", "backend-2", "backend-3"} {
		parts = append(parts, fmt.Sprintf("%s=%d", b, len(held[b])))
	}
	return strings.Join(parts, " ")
}

// ipvsSourceHashing gives client-1 more source addresses: sh sends every connection from
// one source to the same real server, and the sources spread over more than one.
func ipvsSourceHashing() Scenario {
	svc := service("ipvs-sh", []string{"10.96.11.3"}, ipvsScheduler("sh"))
	const perSource = 4
	return threeReady("ipvs-sh-pins-each-source", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		sources := []netip.Addr{l.Client.IPv4}
		for i := 21; i <= 28; i++ {
			sources = append(sources, netip.AddrFrom4([4]byte{10, 200, 1, byte(i)}))
		}
		addSourceAddrs(t, l.Client, sources[1:])
		pinned := map[string]int{}
		var lines []string
		for _, src := range sources {
			seen := map[string]int{}
			for i := range perSource {
				r := l.Client.ProbeFrom(src, "10.96.11.3:80")
				if r.Outcome != lab.Answered || r.Reply.Source != src {
					t.Fatalf("from %s, probe %d: %v (want answered, seeing %s)", src, i+1, r, src)
				}
				seen[r.Reply.Backend]++
			}
			if len(seen) != 1 {
				t.Errorf("sh: %d connections from %s went to %s; want one backend", perSource, src, describe(seen))
			}
			for b := range seen {
				pinned[b]++
				lines = append(lines, fmt.Sprintf("%s->%s", src, b))
			}
		}
		t.Logf("sh: %s", strings.Join(lines, " "))
		if len(pinned) < 2 {
			t.Errorf("sh: all %d sources hash to %v: the scheduler does not look at the source", len(sources), pinned)
		}
	})
}

// addSourceAddrs adds addresses to h's eth0 for the test's duration.
func addSourceAddrs(t *testing.T, h *lab.Host, addrs []netip.Addr) {
	t.Helper()
	var prefixes []netip.Prefix
	for _, a := range addrs {
		prefixes = append(prefixes, netip.PrefixFrom(a, 24))
	}
	if err := h.AddAddrs("eth0", prefixes...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.RemoveAddrs("eth0", prefixes...); err != nil {
			t.Error(err)
		}
	})
}

// ipvsStats sends known traffic to two services of their own and reads the kernel's
// counters back (ipvsadm -Ln --stats --exact): TCP connections per real server exactly as
// the backends answered them, packets and bytes within what the exchanges can have taken;
// UDP packets and bytes exactly.
func ipvsStats() Scenario {
	tcp := service("ipvs-stats", []string{"10.96.11.4"})
	udp := service("ipvs-stats-udp", []string{"10.96.11.5"}, udpPort(53))
	const conns, datagrams = 9, 5
	return Scenario{
		Name: "ipvs-stats-match-traffic",
		Manifests: manifests(tcp, slice(tcp, discovery.AddressTypeIPv4, ready(1, 2, 3)),
			udp, slice(udp, discovery.AddressTypeIPv4, ready(2))),
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			sent, received := map[string]int{}, map[string]int{}
			count := map[string]int{}
			for i := range conns {
				x, err := exchange(l.Client, "10.96.11.4:80")
				if err != nil {
					t.Fatalf("exchange %d: %v", i+1, err)
				}
				count[x.backend]++
				sent[x.backend] += x.sent
				received[x.backend] += x.received
			}
			e := settledStats(t, l, "TCP", "10.96.11.4:80", conns)
			t.Logf("ipvsadm -Ln --stats --exact (TCP, %d HTTP exchanges: %s):\n%s", conns, describe(count), ipvs.Format([]ipvs.Entry{e}, true))
			var sum ipvs.Counters
			for _, d := range e.Destinations {
				b := backendOf(l, d.Addr)
				c, s := d.Stats, count[b]
				sum.Connections += c.Connections
				sum.PacketsIn += c.PacketsIn
				sum.PacketsOut += c.PacketsOut
				sum.BytesIn += c.BytesIn
				sum.BytesOut += c.BytesOut
				if int(c.Connections) != s {
					t.Errorf("%s: %d connections counted, %d answered", d.AddrPort(), c.Connections, s)
				}
				// Per connection: in SYN, ACK, request, FIN, ACK (a few more if delayed ACKs
				// split); out SYN-ACK, the response, FIN and their ACKs. Every packet carries
				// 40 to 80 bytes of IPv4 and TCP headers (options included) besides the data.
				checkCounter(t, d.AddrPort().String()+" packets in", int64(c.PacketsIn), int64(4*s), int64(8*s))
				checkCounter(t, d.AddrPort().String()+" packets out", int64(c.PacketsOut), int64(3*s), int64(8*s))
				checkCounter(t, d.AddrPort().String()+" bytes in", int64(c.BytesIn), int64(sent[b])+40*int64(c.PacketsIn), int64(sent[b])+80*int64(c.PacketsIn))
				checkCounter(t, d.AddrPort().String()+" bytes out", int64(c.BytesOut), int64(received[b])+40*int64(c.PacketsOut), int64(received[b])+80*int64(c.PacketsOut))
			}
			if sum != e.Stats {
				t.Errorf("the virtual server's counters %+v are not the sum of its real servers' %+v", e.Stats, sum)
			}
			dashboardShowsStats(t, l, Namespace+"/"+tcp.Name+":"+tcp.Spec.Ports[0].Name, e)

			flow, err := l.Client.OpenUDP(40055, "10.96.11.5:53")
			if err != nil {
				t.Fatal(err)
			}
			defer flow.Close()
			var in, out uint64
			for i := range datagrams {
				asked, n, r := flow.AskBytes()
				if r.Outcome != lab.Answered || r.Reply.Backend != "backend-2" {
					t.Fatalf("datagram %d: %v", i+1, r)
				}
				in += uint64(udpHeaders + asked)
				out += uint64(udpHeaders + n)
			}
			u := settledStats(t, l, "UDP", "10.96.11.5:53", 1)
			t.Logf("ipvsadm -Ln --stats --exact (UDP, %d datagrams each way):\n%s", datagrams, ipvs.Format([]ipvs.Entry{u}, true))
			want := ipvs.Counters{Connections: 1, PacketsIn: datagrams, PacketsOut: datagrams, BytesIn: in, BytesOut: out}
			if len(u.Destinations) != 1 || u.Destinations[0].Stats != want || u.Stats != want {
				t.Errorf("UDP counters %+v (real servers %+v), want exactly %+v", u.Stats, u.Destinations, want)
			}
		},
	}
}

// udpHeaders is an IPv4 header without options and a UDP header: the bytes IPVS counts
// besides a datagram's data.
const udpHeaders = 20 + 8

func checkCounter(t *testing.T, what string, got, low, high int64) {
	t.Helper()
	if got < low || got > high {
		t.Errorf("%s: %d, want %d..%d", what, got, low, high)
	}
}

// ipvsTerminatingDrains holds a connection on a backend, then marks that endpoint
// terminating: its real server stays at weight 0 while the connection lives, the held
// connection keeps working, new ones avoid it, and once the connection has ended the
// real server is removed.
func ipvsTerminatingDrains() Scenario {
	svc := service("ipvs-drain", []string{"10.96.11.6"})
	const name, addr = "ipvs-terminating-endpoint-drains", "10.96.11.6:80"
	return threeReady(name, svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		conn := openHTTP(t, l.Client, addr)
		defer conn.Close()
		first, err := conn.Ask()
		if err != nil {
			t.Fatal(err)
		}
		x := first.Backend
		xi := slices.IndexFunc(l.Backends, func(h *lab.Host) bool { return h.Name == x })
		var eps []endpoint
		for i := 1; i <= 3; i++ {
			if i == xi+1 {
				eps = append(eps, endpoint{backend: i, terminating: true, node: fmt.Sprintf("worker-%d", i)})
			} else {
				eps = append(eps, ready(i)...)
			}
		}
		t.Logf("held connection is on %s; marking it terminating", x)
		g.Manifests.Write(t, name, manifests(svc, slice(svc, discovery.AddressTypeIPv4, eps)))
		xAddr := netip.AddrPortFrom(l.Backends[xi].IPv4, lab.BackendTCPPort)
		eventually(t, 10*time.Second, x+" at weight 0 with its connection", func() (bool, string) {
			d, ok := destination(virtualServer(t, l, "TCP", addr), xAddr)
			return ok && d.Weight == 0 && d.ActiveConns == 1, fmt.Sprintf("%+v (present %v)", d, ok)
		})
		t.Logf("draining:\n%s", ipvs.Format([]ipvs.Entry{virtualServer(t, l, "TCP", addr)}, false))
		for i := range 3 {
			r, err := conn.Ask()
			if err != nil || r.Backend != x {
				t.Fatalf("held connection, request %d after %s began terminating: %v %v", i+2, x, r, err)
			}
		}
		byBackend, _ := tally(t, l.Client, addr, 12)
		if byBackend[x] != 0 {
			t.Errorf("new connections reached the terminating %s: %s", x, describe(byBackend))
		}
		if err := conn.Reset(); err != nil {
			t.Fatal(err)
		}
		// A reset connection stays in IPVS's table for its CLOSE timeout (10s) before
		// the real server counts none; the daemon then removes it at its next sync.
		start := time.Now()
		deadline := start.Add(30 * time.Second)
		for {
			e := virtualServer(t, l, "TCP", addr)
			d, ok := destination(e, xAddr)
			if !ok {
				if len(e.Destinations) != 2 {
					t.Errorf("after the drain: %s", ipvs.Format([]ipvs.Entry{e}, false))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still a real server 30s after its last connection was reset: %+v", x, d)
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Logf("%s removed %v after its last connection was reset", x, time.Since(start).Round(100*time.Millisecond))
	})
}
