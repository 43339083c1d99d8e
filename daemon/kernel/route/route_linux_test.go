package route

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// inNetns runs fn in a throwaway namespace set up as setupLink says, with a Kernel table
// open in it.
func inNetns(t *testing.T, fn func(ns string, k *Kernel)) {
	t.Helper()
	kerneltest.InNetns(t, "egrt", func(ns string) {
		setupLink(t)
		k, err := New(0)
		if err != nil {
			t.Fatal(err)
		}
		defer k.Close()
		fn(ns, k)
	})
}

// Test IP plan: the gateway's link eg0 (a veth to eg1) holds 192.168.1.2/24 and fd00:1::2/64; nodes are
// on-link at 192.168.1.1N / fd00:1::1N. Routes that are not edgegate's: 10.99.0.0/16 (proto
// static) and 10.244.3.0/24 (proto dhcp), the latter where a node's pod CIDR wants to go.
func setupLink(t *testing.T) {
	t.Helper()
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// A veth pair, both ends here, gives eg0 a carrier (this kernel has no dummy links).
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eg0"}, PeerName: "eg1"}
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("add eg0", h.LinkAdd(link))
	peer, err := h.LinkByName("eg1")
	must("eg1", err)
	must("eg1 up", h.LinkSetUp(peer))
	for _, a := range []string{"192.168.1.2/24", "fd00:1::2/64"} {
		addr, err := netlink.ParseAddr(a)
		must("parse", err)
		addr.Flags = unix.IFA_F_NODAD
		must("address "+a, h.AddrAdd(link, addr))
	}
	must("eg0 up", h.LinkSetUp(link))
	for _, r := range []struct {
		dst, via string
		proto    netlink.RouteProtocol
	}{{"10.99.0.0/16", "192.168.1.254", unix.RTPROT_STATIC}, {"10.244.3.0/24", "192.168.1.250", unix.RTPROT_DHCP}} {
		_, dst, _ := net.ParseCIDR(r.dst)
		must("foreign route "+r.dst, h.RouteAdd(&netlink.Route{Dst: dst, Gw: net.ParseIP(r.via), Protocol: r.proto}))
	}
}

func ipRoutes(t *testing.T, ns string, family string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, family, "route", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip route show: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(l, "fe80::") { // link-local, there on every link
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	return strings.Join(lines, "\n")
}

func routes(specs ...string) []Route {
	var out []Route
	for _, s := range specs {
		dst, via, _ := strings.Cut(s, " via ")
		out = append(out, Route{Dst: netip.MustParsePrefix(dst), Via: netip.MustParseAddr(via)})
	}
	return out
}

func TestKernel(t *testing.T) {
	inNetns(t, func(ns string, k *Kernel) {

		err := k.Apply(routes("10.244.1.0/24 via 192.168.1.11", "10.244.2.0/24 via 192.168.1.12",
			"10.244.3.0/24 via 192.168.1.13", "fd00:244:2::/64 via fd00:1::12"))
		if err == nil || !strings.Contains(err.Error(), "add route 10.244.3.0/24 via 192.168.1.13: a route to it that is not edgegate's exists") {
			t.Errorf("apply over a foreign route: %v", err)
		}
		want4 := `10.99.0.0/16 via 192.168.1.254 dev eg0 proto static
10.244.1.0/24 via 192.168.1.11 dev eg0 proto 69
10.244.2.0/24 via 192.168.1.12 dev eg0 proto 69
10.244.3.0/24 via 192.168.1.250 dev eg0 proto dhcp
192.168.1.0/24 dev eg0 proto kernel scope link src 192.168.1.2`
		if diff := cmp.Diff(want4, ipRoutes(t, ns, "-4")); diff != "" {
			t.Errorf("ip -4 route (-want +got):\n%s", diff)
		}
		want6 := `fd00:1::/64 dev eg0 proto kernel metric 256 pref medium
fd00:244:2::/64 via fd00:1::12 dev eg0 proto 69 metric 1024 pref medium`
		if diff := cmp.Diff(want6, ipRoutes(t, ns, "-6")); diff != "" {
			t.Errorf("ip -6 route (-want +got):\n%s", diff)
		}

		// n1 moves, n2 goes, its IPv6 network moves to another node.
		next := routes("10.244.1.0/24 via 192.168.1.21", "fd00:244:2::/64 via fd00:1::22")
		if err := k.Apply(next); err != nil {
			t.Fatal(err)
		}
		got, err := k.List()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(routeStrings(next), routeStrings(got)); diff != "" {
			t.Errorf("List after the change (-want +got):\n%s", diff)
		}
		want4 = `10.99.0.0/16 via 192.168.1.254 dev eg0 proto static
10.244.1.0/24 via 192.168.1.21 dev eg0 proto 69
10.244.3.0/24 via 192.168.1.250 dev eg0 proto dhcp
192.168.1.0/24 dev eg0 proto kernel scope link src 192.168.1.2`
		if diff := cmp.Diff(want4, ipRoutes(t, ns, "-4")); diff != "" {
			t.Errorf("ip -4 route after the change (-want +got):\n%s", diff)
		}

		// No nodes: every route of edgegate's goes, nobody else's.
		if err := k.Apply(nil); err != nil {
			t.Fatal(err)
		}
		want4 = `10.99.0.0/16 via 192.168.1.254 dev eg0 proto static
10.244.3.0/24 via 192.168.1.250 dev eg0 proto dhcp
192.168.1.0/24 dev eg0 proto kernel scope link src 192.168.1.2`
		if diff := cmp.Diff(want4, ipRoutes(t, ns, "-4")); diff != "" {
			t.Errorf("ip -4 route after removing all (-want +got):\n%s", diff)
		}
		if got := ipRoutes(t, ns, "-6"); strings.Contains(got, "proto 69") {
			t.Errorf("IPv6 routes of edgegate's left:\n%s", got)
		}
	})
}

// Replaying states in random order always ends where the last state says, and never
// disturbs the routes of others.
func TestKernelConverge(t *testing.T) {
	states := [][]Route{
		nil,
		routes("10.244.1.0/24 via 192.168.1.11"),
		routes("10.244.1.0/24 via 192.168.1.21", "10.244.2.0/24 via 192.168.1.12"),
		routes("10.244.2.0/24 via 192.168.1.22", "fd00:244:1::/64 via fd00:1::11"),
		routes("10.244.1.0/24 via 192.168.1.11", "10.244.2.0/24 via 192.168.1.12", "10.244.4.0/24 via 192.168.1.14",
			"fd00:244:1::/64 via fd00:1::21", "fd00:244:2::/64 via fd00:1::12"),
	}
	inNetns(t, func(ns string, k *Kernel) {
		foreign := ipRoutes(t, ns, "-4")
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 40 {
			want := states[rng.IntN(len(states))]
			if err := k.Apply(want); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			got, err := k.List()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(routeStrings(want), routeStrings(got)); diff != "" {
				t.Fatalf("step %d (-want +got):\n%s", i, diff)
			}
		}
		if err := k.Apply(nil); err != nil {
			t.Fatal(err)
		}
		if got := ipRoutes(t, ns, "-4"); got != foreign {
			t.Errorf("other routes changed:\nbefore:\n%s\nafter:\n%s", foreign, got)
		}
	})
}

func routeStrings(rs []Route) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return out
}
