package ipt

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"

	"github.com/edgegate/edgegate/daemon/model"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

func restoreTool(f model.Family) string {
	if f == model.IPv6 {
		return "ip6tables-nft-restore"
	}
	return "iptables-nft-restore"
}

// TestApplyMatchesPlanDump applies the demo plans and checks that iptables-nft-save reads
// back exactly the plan's rules, chain by chain, and that iptables-nft-restore accepts them.
func TestApplyMatchesPlanDump(t *testing.T) {
	plans := demoPlans(demoSnapshot(), demoConfig())
	inNetns(t, func(ns string) {
		start := time.Now()
		st, err := New().Apply(plans, true)
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
		if took := time.Since(start); st.Kernel <= 0 || st.Kernel > took {
			t.Errorf("the batch's time in the kernel is %v of an apply of %v", st.Kernel, took)
		}
		t.Logf("full apply: %+v", st)
		for _, p := range plans {
			out := save(t, ns, p.Family)
			for _, d := range parseSave(out).diff(parseSave(p.Dump())) {
				t.Errorf("%s: %s differs from the plan's Dump:\n%s", p.Family, saveTool(p.Family), d)
			}
			run(t, ns, out, restoreTool(p.Family), "--test")
			if p.Family == model.IPv4 {
				checkProbabilities(t, out)
			}
		}
	})
}

// checkProbabilities finds the three-endpoint service chain of default/web and checks that
// the kernel holds kube-proxy's probabilities 1/3, 1/2, then an unconditional jump.
func checkProbabilities(t *testing.T, saved string) {
	t.Helper()
	svc := regexp.MustCompile(`-A EG-SERVICES -d 10\.96\.0\.10/32 .*cluster IP.* -j (EG-SVC-\S+)`).FindStringSubmatch(saved)
	if svc == nil {
		t.Fatalf("no cluster IP rule for default/web in:\n%s", saved)
	}
	var picks []string
	for _, line := range strings.Split(saved, "\n") {
		if strings.HasPrefix(line, "-A "+svc[1]+" ") && strings.Contains(line, "-j EG-SEP-") && !strings.Contains(line, "--rcheck") {
			picks = append(picks, line)
		}
	}
	want := []string{"--probability 0.33333333349 -j EG-SEP-", "--probability 0.50000000000 -j EG-SEP-", `:8080" -j EG-SEP-`}
	if len(picks) != len(want) {
		t.Fatalf("%s picks %d endpoints, want 3:\n%s", svc[1], len(picks), strings.Join(picks, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(picks[i], w) {
			t.Errorf("endpoint rule %d is %q, want it to contain %q", i, picks[i], w)
		}
	}
}

// kernelRules renders every chain of the ip/ip6 nat and filter tables with its attributes
// and the exact expressions of its rules (counter values left out, compat info as bytes).
func kernelRules(t *testing.T) map[string][]string {
	t.Helper()
	conn, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range families {
		chains, err := conn.ListChainsOfTableFamily(tableFamily(f))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chains {
			if !slices.Contains(tableNames, c.Table.Name) {
				continue
			}
			key := fmt.Sprintf("%s %s %s", f, c.Table.Name, c.Name)
			lines := []string{}
			if c.Hooknum != nil {
				lines = append(lines, fmt.Sprintf("base type %s hook %d prio %d policy %d", c.Type, *c.Hooknum, *c.Priority, *c.Policy))
			}
			rules, err := conn.GetRules(c.Table, c)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rules {
				lines = append(lines, renderRule(t, f, r))
			}
			out[key] = lines
		}
	}
	return out
}

func renderRule(t *testing.T, f model.Family, r *nftables.Rule) string {
	fam := xt.TableFamily(tableFamily(f))
	parts := []string{"userdata=" + hex.EncodeToString(r.UserData)}
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Counter:
			parts = append(parts, "counter")
		case *expr.Match:
			if c, ok := e.Info.(*xt.Comment); ok && e.Name == "comment" {
				parts = append(parts, fmt.Sprintf("match comment rev %d %q", e.Rev, string(*c)))
				continue
			}
			b, err := xt.Marshal(fam, e.Rev, e.Info)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, fmt.Sprintf("match %s rev %d %x", e.Name, e.Rev, b))
		case *expr.Target:
			b, err := xt.Marshal(fam, e.Rev, e.Info)
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, fmt.Sprintf("target %s rev %d %x", e.Name, e.Rev, b))
		default:
			parts = append(parts, fmt.Sprintf("%T%+v", e, e))
		}
	}
	return strings.Join(parts, " | ")
}

// TestEncodingMatchesIptablesNft is the byte-level check: what iptables-nft-restore writes
// for the text iptables-nft-save prints of edgegate's rules must be, chain for chain and
// expression for expression, what edgegate wrote.
func TestEncodingMatchesIptablesNft(t *testing.T) {
	plans := demoPlans(demoSnapshot(), demoConfig())
	for _, p := range plans {
		addEncodingChains(p)
	}
	var ours map[string][]string
	saved := map[model.Family]string{}
	inNetns(t, func(ns string) {
		if _, err := New().Apply(plans, true); err != nil {
			t.Fatalf("apply: %v", err)
		}
		for _, f := range families {
			saved[f] = save(t, ns, f)
		}
		ours = kernelRules(t)
	})
	var theirs map[string][]string
	inNetns(t, func(ns string) {
		for _, f := range families {
			run(t, ns, saved[f], restoreTool(f))
		}
		theirs = kernelRules(t)
	})
	if len(ours) < 20 {
		t.Fatalf("only %d chains were read back", len(ours))
	}
	for key, want := range theirs {
		got, ok := ours[key]
		if !ok && len(want) == 1 && strings.HasPrefix(want[0], "base ") {
			continue // iptables-nft-restore creates every built-in chain; edgegate only those it uses
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s:\nedgegate:     %s\niptables-nft: %s", key, strings.Join(got, "\n              "), strings.Join(want, "\n              "))
		}
	}
	for key := range ours {
		if _, ok := theirs[key]; !ok {
			t.Errorf("%s exists only in edgegate's kernel", key)
		}
	}
}

// addEncodingChains adds rules for encodings the demo plan does not reach: inverted address
// types, a mark with a full mask, every conntrack state, other reject types, inverted
// masked destinations, a bare sctp match and DNAT without a port.
func addEncodingChains(p *iptplan.Tables) {
	host, network := netip.MustParseAddr("10.0.0.1"), netip.MustParsePrefix("10.0.0.0/20")
	reject := []string{"icmp-admin-prohibited", "icmp-host-unreachable"}
	if p.Family == model.IPv6 {
		host, network = netip.MustParseAddr("fd00::1"), netip.MustParsePrefix("fd00::/61")
		reject = []string{"icmp6-adm-prohibited", "icmp6-addr-unreachable"}
	}
	filter, nat := p.Table("filter"), p.Table("nat")
	filter.Chains = append(filter.Chains, &iptplan.Chain{Name: "EG-ENCODING", Rules: []iptplan.Rule{
		{Matches: []iptplan.Match{iptplan.AddrType{Not: true}}, Target: iptplan.Standard{Verdict: "RETURN"}},
		{Matches: []iptplan.Match{iptplan.AddrType{Source: true, Not: true}}, Target: iptplan.Standard{Verdict: "ACCEPT"}},
		{Matches: []iptplan.Match{iptplan.MarkMatch{Value: 1, Mask: 0xffffffff}}, Target: iptplan.Standard{Verdict: "DROP"}},
		{Matches: []iptplan.Match{iptplan.CtState{States: []string{"INVALID", "NEW", "ESTABLISHED", "RELATED", "UNTRACKED", "SNAT", "DNAT"}}}},
		{Dst: network, DstNot: true, Proto: 6, Target: iptplan.RejectTarget{With: reject[0]}},
		{Src: network, Proto: 132, Matches: []iptplan.Match{iptplan.DPort{Proto: 132}}, Target: iptplan.RejectTarget{With: reject[1]}},
	}})
	nat.Chains = append(nat.Chains, &iptplan.Chain{Name: "EG-ENCODING", Rules: []iptplan.Rule{
		{Proto: 17, Matches: []iptplan.Match{iptplan.DPort{Proto: 17}}, Target: iptplan.DNATTarget{To: netip.AddrPortFrom(host, 0)}},
	}})
}

// TestListNat runs the tool an operator reaches for first.
func TestListNat(t *testing.T) {
	plans := demoPlans(demoSnapshot(), demoConfig())
	inNetns(t, func(ns string) {
		if _, err := New().Apply(plans, true); err != nil {
			t.Fatalf("apply: %v", err)
		}
		for _, tool := range []string{"iptables-nft", "ip6tables-nft"} {
			out := run(t, ns, "", tool, "-t", "nat", "-L", "-n", "-v")
			if !strings.Contains(out, "Chain EG-SERVICES (2 references)") || !regexp.MustCompile(`(?m)^ +0 +0 EG-SERVICES +0 +-- .*/\* edgegate service portals \*/`).MatchString(out) {
				t.Errorf("%s -t nat -L -n -v does not list EG-SERVICES and the jumps to it:\n%s", tool, out)
			}
		}
	})
}

// TestCleanupLeavesForeignRules puts the operator's and another tool's rules around
// edgegate's and checks that Apply keeps them and Cleanup removes only edgegate's.
func TestCleanupLeavesForeignRules(t *testing.T) {
	plans := demoPlans(demoSnapshot(), demoConfig())
	inNetns(t, func(ns string) {
		foreign(t, ns)
		before := map[model.Family]string{}
		for _, f := range families {
			before[f] = stripComments(save(t, ns, f))
		}
		k := New()
		if _, err := k.Apply(plans, true); err != nil {
			t.Fatalf("apply: %v", err)
		}
		out := save(t, ns, model.IPv4)
		input := regexp.MustCompile(`(?m)^-A INPUT .*$`).FindAllString(out, -1)
		if len(input) != 4 || input[3] != "-A INPUT -s 192.0.2.1/32 -j DROP" {
			t.Errorf("edgegate's INPUT rules do not come first, before the operator's:\n%s", strings.Join(input, "\n"))
		}
		if err := k.Cleanup(); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		for _, f := range families {
			after := stripComments(save(t, ns, f))
			if strings.Contains(after, iptplan.Prefix) || strings.Contains(after, "edgegate") {
				t.Errorf("%s: cleanup left edgegate rules:\n%s", f, after)
			}
			if after != before[f] {
				t.Errorf("%s: cleanup changed foreign rules:\nbefore:\n%s\nafter:\n%s", f, before[f], after)
			}
		}
	})
}

// foreign adds rules and chains edgegate does not own: the operator's INPUT rule and a
// Docker-like chain with jumps from built-in chains, in both families.
func foreign(t *testing.T, ns string) {
	t.Helper()
	for _, args := range [][]string{
		{"iptables-nft", "-A", "INPUT", "-s", "192.0.2.1", "-j", "DROP"},
		{"iptables-nft", "-t", "nat", "-N", "DOCKER"},
		{"iptables-nft", "-t", "nat", "-A", "DOCKER", "-p", "tcp", "-m", "tcp", "--dport", "8080", "-j", "DNAT", "--to-destination", "172.17.0.2:80"},
		{"iptables-nft", "-t", "nat", "-A", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "DOCKER"},
		{"iptables-nft", "-t", "nat", "-A", "POSTROUTING", "-s", "172.17.0.0/16", "-j", "MASQUERADE"},
		{"ip6tables-nft", "-A", "FORWARD", "-s", "2001:db8::1", "-j", "DROP"},
		{"ip6tables-nft", "-t", "nat", "-A", "POSTROUTING", "-s", "fd00:17::/64", "-j", "MASQUERADE"},
	} {
		run(t, ns, "", args...)
	}
}

// stripComments drops iptables-save's "# Generated ..." lines, which carry a time.
func stripComments(s string) string {
	var keep []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "#") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}
