package ipvslink

import (
	"errors"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// The rtnetlink Links in a throwaway namespace. The development kernel has no dummy
// links, so the address work runs on one end of a veth pair (egv0, peer egv1 holding the
// "node" addresses); creating the dummy itself is exercised in the QEMU guest.
func TestNetlinkAddresses(t *testing.T) {
	kerneltest.InNetns(t, "egipvs", func(ns string) {
		n := &Netlink{}
		defer n.Close()
		if err := n.open(); err != nil {
			t.Fatal(err)
		}
		if err := n.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "egv0"}, PeerName: "egv1"}); err != nil {
			t.Fatal(err)
		}
		if err := n.h.AddrAdd(mustLink(t, n, "egv1"), hostAddr(netip.MustParseAddr("192.168.7.1"))); err != nil {
			t.Fatal(err)
		}
		// Up first, as EnsureDummy leaves the dummy: the kernel takes IPv6 routes only
		// through an interface that is up.
		if err := n.h.LinkSetUp(mustLink(t, n, "egv0")); err != nil {
			t.Fatal(err)
		}
		vips := []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00:96::10")}
		for _, v := range vips {
			if err := n.AddAddr("egv0", v); err != nil {
				t.Fatalf("add %s: %v", v, err)
			}
			if err := n.AddAddr("egv0", v); err != nil {
				t.Errorf("adding %s twice: %v", v, err)
			}
		}
		// An address an earlier build bound is a VIP too, and goes the same way.
		legacy := netip.MustParseAddr("10.96.0.11")
		if err := n.h.AddrAdd(mustLink(t, n, "egv0"), hostAddr(legacy)); err != nil {
			t.Fatal(err)
		}
		vips = append(vips[:1], legacy, vips[1])
		got, err := n.Addrs("egv0")
		if err != nil || !slices.Equal(got, vips) {
			t.Errorf("Addrs(egv0) = %v, %v; want %v (the kernel's link-local address left out)", got, err, vips)
		}
		for _, c := range [][]string{{"-4", "route", "show", "table", "local", "dev", "egv0"}, {"-6", "route", "show", "table", "local", "dev", "egv0"}} {
			out, _ := exec.Command("ip", append([]string{"-n", ns}, c...)...).CombinedOutput()
			for _, want := range []string{"local 10.96.0.10 proto 69 scope host", "local fd00:96::10 proto 69 metric 1024"} {
				if strings.Contains(want, ":") == (c[0] == "-6") && !strings.Contains(string(out), want) {
					t.Errorf("ip %s lacks %q:\n%s", strings.Join(c, " "), want, out)
				}
			}
		}
		if out, _ := exec.Command("ip", "-n", ns, "addr", "show", "dev", "egv0").CombinedOutput(); strings.Contains(string(out), "10.96.0.10") {
			t.Errorf("a VIP became an address:\n%s", out)
		}
		// The kernel routes a VIP as local: traffic to it is delivered to this host,
		// where IPVS takes it.
		for _, v := range vips {
			rs, err := n.h.RouteGet(v.AsSlice())
			if err != nil || len(rs) != 1 || rs[0].Type != unix.RTN_LOCAL {
				t.Errorf("route to %s: %+v, %v; want a local route", v, rs, err)
			}
		}
		node, err := n.NodeAddrs("egv0")
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range node {
			if a == vips[0] || a == vips[1] {
				t.Errorf("NodeAddrs(egv0) lists the excluded interface's %s: %v", a, node)
			}
		}
		if len(node) == 0 || node[0] != netip.MustParseAddr("192.168.7.1") {
			t.Errorf("NodeAddrs(egv0) = %v, want 192.168.7.1 first", node)
		}
		for _, v := range vips {
			if err := n.DelAddr("egv0", v); err != nil {
				t.Errorf("delete %s: %v", v, err)
			}
			if err := n.DelAddr("egv0", v); err != nil {
				t.Errorf("deleting %s twice: %v", v, err)
			}
		}
		if got, _ := n.Addrs("egv0"); len(got) != 0 {
			t.Errorf("addresses left: %v", got)
		}
		// A veth by the dummy's name is never taken for it.
		if err := n.EnsureDummy("egv0"); err == nil || !strings.Contains(err.Error(), "egv0 exists and is a veth, not a dummy") {
			t.Errorf("EnsureDummy on a veth: %v", err)
		}
		// Creating the dummy works where the kernel has dummy links, and is refused
		// plainly where it has none.
		switch err := n.EnsureDummy("egd0"); {
		case err == nil:
			l := mustLink(t, n, "egd0")
			if l.Type() != "dummy" || l.Attrs().OperState == netlink.OperDown {
				t.Errorf("egd0: type %s state %s", l.Type(), l.Attrs().OperState)
			}
		case !errors.Is(err, unix.EOPNOTSUPP) || !strings.Contains(err.Error(), "create dummy interface egd0"):
			t.Errorf("EnsureDummy: %v", err)
		}
		for _, name := range []string{"egv0", "egd0", "nonexistent0"} {
			if err := n.DeleteLink(name); err != nil {
				t.Errorf("delete %s: %v", name, err)
			}
		}
		if got, err := n.Addrs("egv0"); got != nil || err != nil {
			t.Errorf("Addrs of a deleted interface: %v, %v", got, err)
		}
	})
}

func mustLink(t *testing.T, n *Netlink, name string) netlink.Link {
	t.Helper()
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
