// Package firmwaretest runs inside a QEMU guest booted from the real firmware (edgegate as
// /init, the standalone manifests of manifests/ baked in) as /edgegate-test, once PID 1
// has seen the daemon ready. It checks the machine from the inside: who PID 1 is, the
// kernel modules, the NIC, the rules the proxy programmed, and real TCP through the
// ClusterIP between network namespaces it creates. qemu/firmware_test.go turns its results
// into host subtests.
package firmwaretest

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/qemu/testdata/guestutil"
)

// The service of manifests/echo.yaml.
var (
	clusterIP   = netip.MustParseAddr("10.96.7.10")
	servicePort = uint16(80)
	endpoints   = []netip.Addr{netip.MustParseAddr("10.201.2.2"), netip.MustParseAddr("10.201.3.2")}
)

// daemonPackage is the main package the firmware's /init is built from.
const daemonPackage = "github.com/edgegate/edgegate/daemon"

func TestPID1IsEdgegate(t *testing.T) {
	exe, err := os.Readlink("/proc/1/exe")
	if err != nil {
		t.Fatal(err)
	}
	if exe != "/init" {
		t.Errorf("/proc/1/exe -> %s, want /init", exe)
	}
	cmdline, err := os.ReadFile("/proc/1/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	if argv0, _, _ := bytes.Cut(cmdline, []byte{0}); string(argv0) != "/init" {
		t.Errorf("PID 1's argv[0] = %q, want /init", argv0)
	}
	// The running program's own build record says which main package it is.
	info, err := buildinfo.ReadFile("/proc/1/exe")
	if err != nil {
		t.Fatalf("PID 1's build info: %v", err)
	}
	if info.Path != daemonPackage {
		t.Errorf("PID 1 is built from %s, want %s", info.Path, daemonPackage)
	}
	t.Logf("PID 1: %s (%s, %s)", exe, info.Path, info.GoVersion)
}

// TestModules: the proxy's kernel modules are loaded, and so is every module they depend
// on, as each module's own .modinfo names them.
func TestModules(t *testing.T) {
	loaded := guestutil.LoadedModules(t)
	dir := moduleDir(t)
	files := moduleFiles(t, dir)
	checked := map[string]bool{}
	var check func(name, neededBy string)
	check = func(name, neededBy string) {
		if checked[name] {
			return
		}
		checked[name] = true
		file, inImage := files[name]
		switch {
		case loaded[name]:
		case !inImage && isBuiltin(name):
			t.Logf("%s (needed by %s) is built into the kernel", name, neededBy)
			return
		default:
			t.Errorf("%s (needed by %s) is not loaded", name, neededBy)
			return
		}
		if !inImage {
			t.Errorf("%s is loaded but its module file is not in the image", name)
			return
		}
		deps, err := modinfoDepends(path.Join(dir, file))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		for _, d := range deps {
			check(d, name)
		}
	}
	for _, m := range []string{"ip_vs", "nf_tables", "nf_conntrack"} {
		check(m, "the proxy")
	}
	all := slices.Sorted(maps.Keys(checked))
	t.Logf("checked %d modules: %s", len(all), strings.Join(all, " "))
	// nf_conntrack's dependencies, spelled out so that a resolver that stops reading
	// .modinfo cannot pass by checking nothing.
	for _, m := range []string{"nf_defrag_ipv4", "nf_defrag_ipv6", "libcrc32c", "nfnetlink"} {
		if !checked[m] {
			t.Errorf("%s was not reached through the dependencies", m)
		}
	}
}

func moduleDir(t *testing.T) string {
	t.Helper()
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	return path.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:]))
}

// moduleFiles maps module names to their files, from the image's load order file.
func moduleFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(path.Join(dir, "edgegate.order"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, rel := range strings.Fields(string(raw)) {
		name := strings.TrimSuffix(path.Base(rel), ".ko")
		files[strings.ReplaceAll(name, "-", "_")] = rel
	}
	return files
}

// isBuiltin says whether the kernel has name built in: it then has a /sys/module entry
// without a /proc/modules line.
func isBuiltin(name string) bool {
	_, err := os.Stat(path.Join("/sys/module", name))
	return err == nil
}

// modinfoDepends reads depends= from a module's .modinfo section.
func modinfoDepends(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s: no .modinfo section", file)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: .modinfo: %w", file, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, strings.ReplaceAll(d, "-", "_"))
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}

// TestNIC: every edgegate.ip= static address of the kernel command line is on its
// device, which is up.
func TestNIC(t *testing.T) {
	raw, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, arg := range strings.Fields(string(raw)) {
		v, ok := strings.CutPrefix(arg, "edgegate.ip=")
		if !ok {
			continue
		}
		dev, rest, _ := strings.Cut(v, ":")
		if rest == "dhcp" {
			continue
		}
		want, err := staticAddr(rest)
		if err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		n++
		link, err := netlink.LinkByName(dev)
		if err != nil {
			t.Errorf("%s: %v", dev, err)
			continue
		}
		if link.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s is down", dev)
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		var have []string
		for _, a := range addrs {
			have = append(have, a.IPNet.String())
			found = found || a.IPNet.String() == want.String()
		}
		if !found {
			t.Errorf("%s has %v, want %s", dev, have, want)
		}
		t.Logf("%s up with %v", dev, have)
	}
	if n == 0 {
		t.Fatalf("no static edgegate.ip= on the kernel command line %q", raw)
	}
}

// staticAddr reads the address of "<addr>/<prefix>[:<gateway>]"; the prefix length ends
// the address, so an IPv6 address's colons need no brackets.
func staticAddr(s string) (netip.Prefix, error) {
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		return netip.Prefix{}, fmt.Errorf("%q has no /prefix length", s)
	}
	end := slash + 1
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	return netip.ParsePrefix(s[:end])
}

// TestForwarding: PID 1 made the machine a router.
func TestForwarding(t *testing.T) {
	for _, s := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(b)) != "1" {
			t.Errorf("%s = %q, want 1", s, b)
		}
	}
}

// TestRules reads edgegate's nftables table back from the kernel: the ClusterIP is in the
// cluster-ips set, its address, protocol and port are in the service-ips map, and a DNAT
// rule leads to each endpoint.
func TestRules(t *testing.T) {
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	table, err := c.ListTableOfFamily("edgegate", nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatalf("table ip edgegate: %v", err)
	}
	ips := setKeys(t, c, table, "cluster-ips")
	if !containsKey(ips, clusterIP.AsSlice()) {
		t.Errorf("cluster-ips %x lacks %s", ips, clusterIP)
	}
	// daddr . l4proto . dport, each field padded to 32 bits as the kernel compares them.
	want := append(clusterIP.AsSlice(), unix.IPPROTO_TCP, 0, 0, 0, byte(servicePort>>8), byte(servicePort), 0, 0)
	if keys := setKeys(t, c, table, "service-ips"); !containsKey(keys, want) {
		t.Errorf("service-ips %x lacks %s . tcp . %d", keys, clusterIP, servicePort)
	}

	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	dnat := map[netip.Addr]string{}
	for _, ch := range chains {
		if ch.Table.Name != table.Name {
			continue
		}
		rules, err := c.GetRules(table, ch)
		if err != nil {
			t.Fatalf("chain %s: %v", ch.Name, err)
		}
		for _, r := range rules {
			if to, ok := dnatTarget(r); ok {
				dnat[to] = ch.Name
			}
		}
	}
	for _, ep := range endpoints {
		if ch, ok := dnat[ep]; ok {
			t.Logf("endpoint %s: DNAT in chain %s", ep, ch)
		} else {
			t.Errorf("no DNAT rule to endpoint %s (DNAT targets: %v)", ep, dnat)
		}
	}
}

func setKeys(t *testing.T, c *nftables.Conn, table *nftables.Table, name string) [][]byte {
	t.Helper()
	s, err := c.GetSetByName(table, name)
	if err != nil {
		t.Fatalf("set %s: %v", name, err)
	}
	elems, err := c.GetSetElements(s)
	if err != nil {
		t.Fatalf("set %s: %v", name, err)
	}
	keys := make([][]byte, 0, len(elems))
	for _, e := range elems {
		keys = append(keys, e.Key)
	}
	return keys
}

func containsKey(keys [][]byte, want []byte) bool {
	for _, k := range keys {
		if bytes.Equal(k, want) {
			return true
		}
	}
	return false
}

// dnatTarget returns the address a rule translates destinations to.
func dnatTarget(r *nftables.Rule) (netip.Addr, bool) {
	regs := map[uint32][]byte{}
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Immediate:
			regs[e.Register] = e.Data
		case *expr.NAT:
			if e.Type == expr.NATTypeDestNAT {
				return netip.AddrFromSlice(regs[e.RegAddrMin])
			}
		}
	}
	return netip.Addr{}, false
}
