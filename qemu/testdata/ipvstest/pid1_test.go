package ipvstest

import (
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
	"github.com/edgegate/edgegate/lab"
)

// The guest's NIC address (the kernel command line's edgegate.ip) and manifests/web.yaml.
const (
	nicAddr  = "10.0.2.15"
	nodePort = "30710"
)

// TestPID1IPVSMode: the firmware booted in ipvs mode (edgegate.flags=--proxy-mode=ipvs).
// PID 1 loaded ip_vs and every scheduler module, and its daemon programmed the baked
// manifests into the root namespace: virtual servers on the cluster IPs and on the NIC's
// address for the node port, persistence for ClientIP affinity, the annotation's
// scheduler, the VIPs on the dummy interface, the auxiliary table and no table of another
// mode.
func TestPID1IPVSMode(t *testing.T) {
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cmdline), "edgegate.flags=--proxy-mode=ipvs") {
		t.Fatalf("the guest did not boot in ipvs mode: /proc/cmdline %q", cmdline)
	}
	for _, m := range append([]string{"ip_vs"}, schedulerModules()...) {
		if _, err := os.Stat(path.Join("/sys/module", m)); err != nil {
			t.Errorf("kernel module %s not loaded: %v", m, err)
		}
	}
	root, err := netns.GetFromPid(1)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	st, err := lab.HostIn("root", root).KernelState()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ipvsadm -Ln in the guest's root namespace (PID 1's daemon):\n%s", ipvs.Format(st.IPVS, false))
	for _, c := range []struct{ proto, addr, flags, reals string }{
		{"TCP", "10.96.7.10:80", "rr persistent 600", "10.201.2.2:8080 10.201.3.2:8080"},
		{"TCP", nicAddr + ":" + nodePort, "rr persistent 600", "10.201.2.2:8080 10.201.3.2:8080"},
		{"UDP", "10.96.7.53:53", "sh", "10.201.2.2:5353"},
	} {
		e, err := st.VirtualServer(c.proto, c.addr)
		if err != nil {
			t.Error(err)
			continue
		}
		flags, reals := e.Flags(), e.RealServers()
		if flags != c.flags || strings.Join(reals, " ") != c.reals {
			t.Errorf("%s %s: %s -> %v, want %s -> %s", c.proto, c.addr, flags, reals, c.flags, c.reals)
		}
	}
	if n := len(st.IPVS); n != 3 {
		t.Errorf("%d virtual servers, want 3", n)
	}
	dummy, ok := st.Link(ipvsplan.Interface)
	if !ok {
		t.Fatalf("no %s:\n%s", ipvsplan.Interface, st)
	}
	var local []string
	for _, a := range dummy.Local {
		local = append(local, a.String())
	}
	if want := []string{"10.96.7.10/32", "10.96.7.53/32"}; dummy.Type != "dummy" || !slices.Equal(local, want) || len(dummy.Addrs) > 0 {
		t.Errorf("%s: %s with local routes %v and addresses %v, want a dummy with local routes %v", ipvsplan.Interface, dummy.Type, local, dummy.Addrs, want)
	}
	for _, line := range []string{"table ip " + ipvsplan.TableName, "table ip6 " + ipvsplan.TableName} {
		if !st.Has(line) {
			t.Errorf("no %q in the root namespace:\n%s", line, st)
		}
	}
	if len(st.TablesNamed("edgegate")) > 0 {
		t.Errorf("nftables mode's tables are there in ipvs mode:\n%s", st)
	}
	// PID 1's daemon runs in the initial namespace: it sized the connection tracking
	// table and set the TCP timeouts as kube-proxy does (the kernel's table for the
	// guest's memory holds about 4096 connections).
	for name, least := range map[string]int{
		"nf_conntrack_max":                     max(32768*runtime.NumCPU(), 131072),
		"nf_conntrack_tcp_timeout_established": 86400,
		"nf_conntrack_tcp_timeout_close_wait":  3600,
	} {
		b, err := os.ReadFile("/proc/sys/net/netfilter/" + name)
		if err != nil {
			t.Error(err)
			continue
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || v < least || name != "nf_conntrack_max" && v != least {
			t.Errorf("%s = %q, want %d", name, strings.TrimSpace(string(b)), least)
		}
	}
}

// schedulerModules are the modules of the schedulers the daemon accepts.
func schedulerModules() []string {
	var out []string
	for _, s := range ipvsplan.Schedulers {
		out = append(out, "ip_vs_"+s)
	}
	return out
}
