package ipt

import (
	"bytes"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
	"github.com/edgegate/edgegate/internal/prereq"
)

var installOnce sync.Once

// needKernel fails under CI=true and skips elsewhere when the test cannot run: it needs
// root and iptables-nft, which it installs with apt-get when missing.
func needKernel(t testing.TB) {
	t.Helper()
	prereq.Root(t, "kernel tests")
	if _, err := exec.LookPath("iptables-nft-save"); err != nil {
		installOnce.Do(func() {
			out, err := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "iptables").CombinedOutput()
			t.Logf("apt-get install iptables: %v\n%s", err, out)
		})
	}
	for _, tool := range []string{"iptables-nft", "iptables-nft-save", "ip6tables-nft-save", "iptables-nft-restore", "ip6tables-nft-restore"} {
		if _, err := exec.LookPath(tool); err != nil {
			prereq.Missing(t, "kernel tests need %s (Debian package iptables): %v", tool, err)
		}
	}
}

// inNetns runs fn inside a fresh network namespace once the iptables tools are there.
func inNetns(t testing.TB, fn func(name string)) {
	t.Helper()
	needKernel(t)
	kerneltest.InNetns(t, "egipt", fn)
}

// run runs an iptables tool in a namespace and fails the test on a non-zero exit or any
// output on stderr (warnings included).
func run(t *testing.T, ns string, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("%s: %v\nstderr: %s\nstdout: %s", strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String()
}

func saveTool(f model.Family) string {
	if f == model.IPv6 {
		return "ip6tables-nft-save"
	}
	return "iptables-nft-save"
}

// save runs iptables-nft-save for a family and checks that it understood every rule.
func save(t *testing.T, ns string, f model.Family) string {
	t.Helper()
	out := run(t, ns, "", saveTool(f))
	for _, bad := range []string{"[unsupported revision]", "incompatible", "Warning", "unknown"} {
		if strings.Contains(out, bad) {
			t.Fatalf("%s printed %q:\n%s", saveTool(f), bad, out)
		}
	}
	return out
}

// ruleset is iptables-save text reduced to what edgegate owns: table -> chain -> the rule
// text after "-A CHAIN ", for every EG- chain and for edgegate's rules in built-in chains.
type ruleset map[string]map[string][]string

func parseSave(text string) ruleset {
	rs := ruleset{}
	table := ""
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
			rs[table] = map[string][]string{}
		case strings.HasPrefix(line, ":"+iptplan.Prefix):
			name := strings.Fields(line[1:])[0]
			rs[table][name] = []string{}
		case strings.HasPrefix(line, "-A "):
			chain, rule, _ := strings.Cut(line[3:], " ")
			if strings.HasPrefix(chain, iptplan.Prefix) || hookComment(rule) {
				rs[table][chain] = append(rs[table][chain], rule)
			}
		}
	}
	return rs
}

func hookComment(rule string) bool {
	return slices.ContainsFunc(iptplan.HookComments, func(c string) bool {
		return strings.Contains(rule, `--comment "`+c+`"`)
	})
}

// diff lists, per table and chain, where two rulesets differ.
func (rs ruleset) diff(other ruleset) []string {
	var out []string
	for _, table := range tableNames {
		chains := map[string]bool{}
		for c := range rs[table] {
			chains[c] = true
		}
		for c := range other[table] {
			chains[c] = true
		}
		for _, c := range slices.Sorted(maps.Keys(chains)) {
			a, aok := rs[table][c]
			b, bok := other[table][c]
			if aok != bok || !slices.Equal(a, b) {
				out = append(out, table+" "+c+":\n  got:  "+strings.Join(a, "\n        ")+
					"\n  want: "+strings.Join(b, "\n        "))
			}
		}
	}
	return out
}

// demoConfig has cluster CIDRs whose lengths are not whole bytes, so source matches need
// the masked (bitwise) encoding as well as the truncated one.
func demoConfig() plan.Config {
	return plan.Config{NodeName: "gw", ClusterCIDRs: []netip.Prefix{
		netip.MustParsePrefix("10.200.0.0/20"), netip.MustParsePrefix("fd00:200::/60")}}
}

// demoSnapshot: a dual-stack LoadBalancer service with three endpoints per family,
// ClientIP affinity and source ranges; a service without endpoints that also has an
// external IP; a UDP NodePort service; an SCTP NodePort service; and an
// externalTrafficPolicy Local service with one local and one remote endpoint.
func demoSnapshot(mods ...func(*v1.Service)) *model.Snapshot {
	web := mt.Service("default", "web", "10.96.0.10", append([]func(*v1.Service){
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
		mt.DualStack("fd00:96::10"),
		mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"),
		mt.SourceRanges("10.200.1.0/24", "2001:db8:1::/48"),
		mt.Affinity(300),
	}, mods...)...)
	webV4 := mt.Slice("default", "web-v4", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.13"))
	webV6 := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("fd00:200:2::11"), mt.EP("fd00:200:2::12"), mt.EP("fd00:200:2::13"))
	empty := mt.Service("default", "empty", "10.96.0.20", mt.Port("dns", v1.ProtocolUDP, 53, 53, 0),
		mt.DualStack("fd00:96::20"), mt.ExternalIPs("198.51.100.7"))
	np := mt.Service("default", "np", "10.96.0.30", mt.Port("p", v1.ProtocolUDP, 5353, 53, 30053), mt.Type(v1.ServiceTypeNodePort))
	npEps := mt.Slice("default", "np-1", "np", "p", v1.ProtocolUDP, 53, mt.EP("10.200.3.1"))
	sctp := mt.Service("default", "sig", "10.96.0.50", mt.Port("s", v1.ProtocolSCTP, 3868, 3868, 30868), mt.Type(v1.ServiceTypeNodePort))
	sctpEps := mt.Slice("default", "sig-1", "sig", "s", v1.ProtocolSCTP, 3868, mt.EP("10.200.5.1"))
	local := mt.Service("default", "loc", "10.96.0.40", mt.Port("https", v1.ProtocolTCP, 443, 8443, 30443),
		mt.LoadBalancerIPs("203.0.113.40"), mt.ExternalLocal(32000))
	localEps := mt.Slice("default", "loc-1", "loc", "https", v1.ProtocolTCP, 8443,
		mt.EP("10.200.4.1", mt.OnNode("gw")), mt.EP("10.200.4.2", mt.OnNode("other")))
	return mt.Snapshot(web, webV4, webV6, empty, np, npEps, sctp, sctpEps, local, localEps)
}

func demoPlans(snap *model.Snapshot, cfg plan.Config) []*iptplan.Tables {
	return []*iptplan.Tables{iptplan.Build(snap, model.IPv4, cfg), iptplan.Build(snap, model.IPv6, cfg)}
}
