package mgmt

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/edgegate/edgegate/daemon/kernel/ipt"
	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/kernel/nft"
)

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func ruleset(t *testing.T, ns string) string {
	t.Helper()
	return run(t, "ip", "netns", "exec", ns, "nft", "list", "ruleset")
}

// The test's IP plan: the gateway's namespace holds the dashboard at 10.77.1.1 and
// fd77:1::1 (port 8443); client "in" sits on that link (10.77.1.2, fd77:1::2, inside the
// allow-list), client "out" on another (10.77.2.2, fd77:2::2, outside it), routed through
// the gateway to the same addresses.
var rules = Rules{
	Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.77.1.1:8443"), netip.MustParseAddrPort("[fd77:1::1]:8443")},
	Allowed:   []netip.Prefix{netip.MustParsePrefix("10.77.1.0/24"), netip.MustParsePrefix("fd77:1::/64")},
}

func TestAllowListInKernel(t *testing.T) {
	kerneltest.InNetns(t, "egmg", func(gw string) {
		k := &Kernel{}
		if err := k.Apply(rules); err != nil {
			t.Fatalf("apply: %v", err)
		}
		out := ruleset(t, gw)
		t.Logf("nft list ruleset:\n%s", out)
		for _, want := range []string{
			"table inet edgegate-mgmt {",
			"type filter hook input priority filter; policy accept;",
			`iifname "lo" accept`,
			"ip daddr 10.77.1.1 tcp dport 8443 jump allowlist",
			"ip6 daddr fd77:1::1 tcp dport 8443 jump allowlist",
			"ip saddr 10.77.1.0/24 accept",
			"ip6 saddr fd77:1::/64 accept",
			"counter packets 0 bytes 0 drop",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("nft list ruleset lacks %q", want)
			}
		}

		// Applying again replaces the table: the old allow-list is gone.
		again := rules
		again.Allowed = []netip.Prefix{netip.MustParsePrefix("10.77.9.0/24")}
		if err := k.Apply(again); err != nil {
			t.Fatalf("apply again: %v", err)
		}
		if out := ruleset(t, gw); strings.Contains(out, "10.77.1.0/24") || !strings.Contains(out, "ip saddr 10.77.9.0/24 accept") {
			t.Errorf("a second apply did not replace the allow-list:\n%s", out)
		}
		if err := k.Apply(rules); err != nil {
			t.Fatal(err)
		}

		// Every proxy mode's cleanup (what a start in another mode runs) leaves it.
		for name, clean := range map[string]func() error{
			"nftables": nft.New().Cleanup, "iptables": ipt.New().Cleanup, "ipvs": ipvs.NewKernelAux().DeleteTables,
		} {
			if err := clean(); err != nil {
				t.Fatalf("%s mode's cleanup: %v", name, err)
			}
		}
		if out := ruleset(t, gw); !strings.Contains(out, "table inet edgegate-mgmt") {
			t.Errorf("a proxy mode's cleanup removed the allow-list table:\n%s", out)
		}
		if err := k.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if out := ruleset(t, gw); strings.Contains(out, "edgegate-mgmt") {
			t.Errorf("cleanup left:\n%s", out)
		}
		if err := k.Cleanup(); err != nil {
			t.Errorf("cleanup without the table: %v", err)
		}
	})
}

// TestAllowListRealTCP: the client inside the list connects, the client outside it gets
// no answer at all (dropped, not refused) on the dashboard's port while another port of
// the same address answers it, in both families. The listeners do no checking of their
// own: what refuses is the kernel.
func TestAllowListRealTCP(t *testing.T) {
	kerneltest.InNetns(t, "egmg", func(gw string) {
		in, out := clientNetns(t, gw, "in", 1), clientNetns(t, gw, "out", 2)
		run(t, "ip", "netns", "exec", gw, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
		for _, addr := range []string{"10.77.1.1:8443", "[fd77:1::1]:8443", "10.77.1.1:8080", "[fd77:1::1]:8080"} {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					_, _ = c.Write([]byte("hello\n"))
					c.Close()
				}
			}()
		}
		k := &Kernel{}
		if err := k.Apply(rules); err != nil {
			t.Fatalf("apply: %v", err)
		}
		for _, tc := range []struct {
			ns, addr string
			want     bool
		}{
			{in, "10.77.1.1:8443", true}, {in, "[fd77:1::1]:8443", true},
			{out, "10.77.1.1:8443", false}, {out, "[fd77:1::1]:8443", false},
			{out, "10.77.1.1:8080", true}, {out, "[fd77:1::1]:8080", true},
		} {
			err := dialFrom(t, tc.ns, tc.addr)
			if tc.want && err != nil {
				t.Errorf("%s -> %s: %v, want answered", tc.ns, tc.addr, err)
			}
			var ne net.Error
			if !tc.want && !(errors.As(err, &ne) && ne.Timeout()) {
				t.Errorf("%s -> %s: %v, want no answer (dropped)", tc.ns, tc.addr, err)
			}
		}
		list := ruleset(t, gw)
		if !strings.Contains(list, "counter packets") || strings.Contains(list, "counter packets 0 ") {
			t.Errorf("the drop counter did not count the outsider:\n%s", list)
		}
		t.Logf("after the clients:\n%s", list)
	})
}

// clientNetns makes a client namespace linked to gw over a veth pair on subnet n
// (gateway .1 / ::1, client .2 / ::2), with its default routes via the gateway.
func clientNetns(t *testing.T, gw, name string, n int) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%s", gw, name)
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	gwIf := fmt.Sprintf("g%d", n)
	run(t, "ip", "-n", gw, "link", "add", gwIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	run(t, "ip", "-n", gw, "addr", "add", fmt.Sprintf("10.77.%d.1/24", n), "dev", gwIf)
	run(t, "ip", "-n", gw, "addr", "add", fmt.Sprintf("fd77:%d::1/64", n), "dev", gwIf, "nodad")
	run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("10.77.%d.2/24", n), "dev", "eth0")
	run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("fd77:%d::2/64", n), "dev", "eth0", "nodad")
	for _, args := range [][]string{{"-n", gw, "link", "set", gwIf, "up"}, {"-n", ns, "link", "set", "eth0", "up"}, {"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "route", "add", "default", "via", fmt.Sprintf("10.77.%d.1", n)},
		{"-n", ns, "-6", "route", "add", "default", "via", fmt.Sprintf("fd77:%d::1", n)}} {
		run(t, append([]string{"ip"}, args...)...)
	}
	return ns
}

// dialFrom connects from inside ns and reads the greeting. A dropped SYN is never
// answered, so the short deadline only decides how long the test waits for nothing.
func dialFrom(t *testing.T, ns, addr string) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		h, err := netns.GetFromName(ns)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		d := net.Dialer{Deadline: time.Now().Add(2 * time.Second)}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 6)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(buf)
		errc <- err
	}()
	return <-errc
}
