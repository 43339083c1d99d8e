package ipt_test

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/ipt"
)

// Structural checks of iptables plans and the tests of what the packet-flow tests cannot
// see: the statistic probabilities, the rules' iptables-save spelling, the chain checks
// themselves. Fixtures and the IP plan are nft_test.go's.

// iptMaxChainName is the longest chain name iptables accepts.
const iptMaxChainName = 28

// iptFixedChains are the chains every plan declares, used or not.
var iptFixedChains = []string{ipt.ChainServices, ipt.ChainExternalServices, ipt.ChainNodePorts, ipt.ChainPostrouting, ipt.ChainMarkMasq, ipt.ChainForward, ipt.ChainProxyFirewall}

// checkIPT reports the first structural problem of a plan: a jump to a chain that does not
// exist in the same table, a chain name iptables refuses, a target the table refuses, a
// user chain nothing jumps to, a built-in chain rule the backend would not recognise as its
// own, or a node-port jump that is not at the end of nat EG-SERVICES.
func checkIPT(p *ipt.Tables) error {
	var errs []error
	for _, t := range p.Tables {
		if t.Name != "nat" && t.Name != "filter" {
			errs = append(errs, fmt.Errorf("table %q", t.Name))
			continue
		}
		declared := map[string]bool{}
		for _, c := range t.Chains {
			switch {
			case declared[c.Name]:
				errs = append(errs, fmt.Errorf("%s: chain %s declared twice", t.Name, c.Name))
			case len(c.Name) > iptMaxChainName:
				errs = append(errs, fmt.Errorf("%s: chain %s is longer than %d characters", t.Name, c.Name, iptMaxChainName))
			case !strings.HasPrefix(c.Name, ipt.Prefix):
				errs = append(errs, fmt.Errorf("%s: chain %s lacks the %s prefix", t.Name, c.Name, ipt.Prefix))
			}
			declared[c.Name] = true
		}
		jumped := map[string]bool{}
		check := func(where string, r ipt.Rule) {
			if err := checkIPTRule(p.Family, t, r); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %q: %w", t.Name, where, r.Save(p.Family), err))
			}
			if j, ok := r.Target.(ipt.JumpTo); ok {
				jumped[j.Chain] = true
			}
		}
		for chain, rules := range t.Builtin {
			if !slices.Contains(ipt.BuiltinChains(t.Name), chain) {
				errs = append(errs, fmt.Errorf("%s: rules for built-in chain %s, which the table lacks", t.Name, chain))
			}
			for _, r := range rules {
				if _, ok := r.Target.(ipt.JumpTo); !ok || !slices.ContainsFunc(r.Matches, isHookComment) {
					errs = append(errs, fmt.Errorf("%s %s: %q is not a jump marked with a hook comment", t.Name, chain, r.Save(p.Family)))
				}
				check(chain, r)
			}
		}
		for _, c := range t.Chains {
			for _, r := range c.Rules {
				check(c.Name, r)
			}
		}
		for _, c := range t.Chains {
			if !jumped[c.Name] && !slices.Contains(iptFixedChains, c.Name) {
				errs = append(errs, fmt.Errorf("%s: nothing jumps to chain %s", t.Name, c.Name))
			}
		}
		if t.Name == "nat" {
			errs = append(errs, checkNodePortsLast(t))
		}
	}
	return errors.Join(errs...)
}

func isHookComment(m ipt.Match) bool {
	c, ok := m.(ipt.Comment)
	return ok && slices.Contains(ipt.HookComments, c.Text)
}

// checkIPTRule checks one rule against what iptables-restore accepts.
func checkIPTRule(f model.Family, t *ipt.Table, r ipt.Rule) error {
	for _, pfx := range []netip.Prefix{r.Src, r.Dst} {
		if pfx.IsValid() && model.FamilyOf(pfx.Addr()) != f {
			return fmt.Errorf("address of the other family")
		}
	}
	for _, m := range r.Matches {
		switch m := m.(type) {
		case ipt.DPort:
			if m.Proto != r.Proto {
				return fmt.Errorf("-m %s without -p %s", plan.ProtoName(m.Proto), plan.ProtoName(m.Proto))
			}
		case ipt.Statistic:
			if !(m.Probability > 0 && m.Probability < 1) {
				return fmt.Errorf("statistic probability %v", m.Probability)
			}
		}
	}
	switch tg := r.Target.(type) {
	case ipt.JumpTo:
		if t.Chain(tg.Chain) == nil {
			return fmt.Errorf("jump to %s, which table %s lacks", tg.Chain, t.Name)
		}
	case ipt.Standard:
		if tg.Verdict == "DROP" && t.Name == "nat" {
			return fmt.Errorf("DROP in the nat table")
		}
	case ipt.RejectTarget:
		if t.Name != "filter" {
			return fmt.Errorf("REJECT in the %s table", t.Name)
		}
	case ipt.DNATTarget:
		if t.Name != "nat" || model.FamilyOf(tg.To.Addr()) != f || r.Proto == 0 {
			return fmt.Errorf("DNAT outside nat, to the other family, or without -p")
		}
	case ipt.MasqueradeTarget:
		if t.Name != "nat" {
			return fmt.Errorf("MASQUERADE in the %s table", t.Name)
		}
	}
	return nil
}

// checkNodePortsLast: the jumps to EG-NODEPORTS (one, or one per --nodeport-addresses
// prefix) end nat EG-SERVICES, so every service address rule is tried before them.
func checkNodePortsLast(nat *ipt.Table) error {
	rules := nat.Chain(ipt.ChainServices).Rules
	isNP := func(r ipt.Rule) bool { return r.Target == ipt.JumpTo{Chain: ipt.ChainNodePorts} }
	first := slices.IndexFunc(rules, isNP)
	if first < 0 {
		return fmt.Errorf("nat %s: no jump to %s", ipt.ChainServices, ipt.ChainNodePorts)
	}
	if !slices.ContainsFunc(rules[first:], func(r ipt.Rule) bool { return !isNP(r) }) {
		return nil
	}
	return fmt.Errorf("nat %s: rules after the jump to %s", ipt.ChainServices, ipt.ChainNodePorts)
}

func TestIPTStructureChecks(t *testing.T) {
	good := func() *ipt.Tables {
		return ipt.Build(mt.Snapshot(pt.Web(mt.LoadBalancerIPs("203.0.113.10")), pt.WebV4Ready()), model.IPv4, pt.Cfg)
	}
	if err := checkIPT(good()); err != nil {
		t.Fatalf("a good plan fails: %v", err)
	}
	nat := func(p *ipt.Tables) *ipt.Table { return p.Table("nat") }
	cases := map[string]func(*ipt.Tables){
		"missing chain": func(p *ipt.Tables) {
			nat(p).Chain(ipt.ChainMarkMasq).Rules = []ipt.Rule{{Target: ipt.JumpTo{Chain: "EG-NOWHERE"}}}
		},
		"jump across tables": func(p *ipt.Tables) {
			p.Table("filter").Chain(ipt.ChainForward).Rules = []ipt.Rule{{Target: ipt.JumpTo{Chain: ipt.ChainMarkMasq}}}
		},
		"long chain name": func(p *ipt.Tables) {
			nat(p).Chains = append(nat(p).Chains, &ipt.Chain{Name: "EG-" + strings.Repeat("X", 26)})
			nat(p).Chain(ipt.ChainMarkMasq).Rules = []ipt.Rule{{Target: ipt.JumpTo{Chain: "EG-" + strings.Repeat("X", 26)}}}
		},
		"DROP in nat": func(p *ipt.Tables) {
			nat(p).Chain(ipt.ChainMarkMasq).Rules = []ipt.Rule{{Target: ipt.Standard{Verdict: "DROP"}}}
		},
		"REJECT in nat": func(p *ipt.Tables) {
			nat(p).Chain(ipt.ChainMarkMasq).Rules = []ipt.Rule{{Target: ipt.RejectTarget{With: "icmp-port-unreachable"}}}
		},
		"node ports not last": func(p *ipt.Tables) {
			c := nat(p).Chain(ipt.ChainServices)
			c.Rules = append(c.Rules, c.Rules[0])
		},
		"unmarked built-in rule": func(p *ipt.Tables) {
			nat(p).Builtin["OUTPUT"] = []ipt.Rule{{Target: ipt.JumpTo{Chain: ipt.ChainServices}}}
		},
		"dport without protocol": func(p *ipt.Tables) {
			nat(p).Chain(ipt.ChainMarkMasq).Rules = []ipt.Rule{{Matches: []ipt.Match{ipt.DPort{Proto: 6, Port: 80}}}}
		},
		"unused chain": func(p *ipt.Tables) {
			nat(p).Chains = append(nat(p).Chains, &ipt.Chain{Name: "EG-SVC-ORPHAN"})
		},
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			p := good()
			breakIt(p)
			if err := checkIPT(p); err == nil {
				t.Errorf("checkIPT accepted it:\n%s", p.Dump())
			} else {
				t.Logf("refused: %v", err)
			}
		})
	}
}

// TestIPTStatisticSpread: kube-proxy's endpoint choice, 1/n, 1/(n-1), ..., the last endpoint
// unconditional, gives each endpoint 1/n of new connections, with the probabilities as the
// kernel rounds them (the tracer uses StatisticProbability).
func TestIPTStatisticSpread(t *testing.T) {
	for n := 1; n <= 7; n++ {
		t.Run(fmt.Sprint(n, " endpoints"), func(t *testing.T) {
			var eps []discovery.Endpoint
			for i := range n {
				eps = append(eps, mt.EP(fmt.Sprintf("10.200.2.%d", 11+i)))
			}
			p := iptMode.Build(t, pt.Cfg, model.IPv4, pt.Web(), pt.WebV4(eps...))
			svc := p.Table("nat").Chain(ipt.PortChain("SVC", mt.Snapshot(pt.Web()).Sorted()[0].Name))
			if svc == nil || len(svc.Rules) != n {
				t.Fatalf("service chain: %+v\n%s", svc, p.Dump())
			}
			for i, r := range svc.Rules {
				var st []ipt.Statistic
				for _, m := range r.Matches {
					if s, ok := m.(ipt.Statistic); ok {
						st = append(st, s)
					}
				}
				want := []ipt.Statistic{{Probability: 1 / float64(n-i)}}
				if i == n-1 {
					want = nil
				}
				if !slices.Equal(st, want) {
					t.Errorf("rule %d %q: statistic %v, want %v", i, r.Save(p.Family), st, want)
				}
			}
			share := map[string]float64{}
			for _, w := range pt.NewIPTTracer(t, p, pt.NodeAddrs...).Paths(pt.Pkt(pt.Client, "10.96.0.10", 80)) {
				share[w.Result] += w.Prob
			}
			if len(share) != n {
				t.Errorf("reached %d endpoints, want %d: %v", len(share), n, share)
			}
			for ep, s := range share {
				if math.Abs(s-1/float64(n)) > 1e-8 {
					t.Errorf("%s gets %.12f of new connections, want 1/%d", ep, s, n)
				}
			}
		})
	}
}

func TestIPTHealthCheckNodePort(t *testing.T) {
	p := iptMode.Build(t, pt.Cfg, model.IPv4, pt.Web(mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalLocal(32000)), pt.WebV4Ready())
	tr := pt.NewIPTTracer(t, p, pt.NodeAddrs...)
	got := tr.Trace(pt.Pkt(pt.Client, "10.200.1.1", 32000))
	accepted := "filter: -A EG-NODEPORTS -p tcp -m comment --comment \"default/web health check node port\" -m tcp --dport 32000 -j ACCEPT"
	if got.Result != pt.Accept || !slices.Contains(got.Matched, accepted) {
		t.Errorf("health check node port: %v, want ACCEPT by filter EG-NODEPORTS; matched:\n%s", got, strings.Join(got.Matched, "\n"))
	}
	// Only from INPUT: the health check port is the node's own listener, never forwarded.
	if got := tr.Trace(pt.Pkt(pt.Client, "10.200.1.99", 32000)); slices.Contains(got.Matched, accepted) {
		t.Errorf("health check rule used for a forwarded packet: %v", got.Matched)
	}
}

// TestIPTRejectWith: refusals use the family's ICMP port unreachable; ip6tables refuses
// icmp-port-unreachable and iptables icmp6-port-unreachable.
func TestIPTRejectWith(t *testing.T) {
	svc := pt.Web(pt.NodePort, mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"))
	for _, c := range []struct {
		f         model.Family
		src, dst  string
		want, not string
	}{
		{model.IPv4, pt.Client, "10.96.0.10", "icmp-port-unreachable", "icmp6-port-unreachable"},
		{model.IPv6, "fd00:200:1::2", "fd00:96::10", "icmp6-port-unreachable", "icmp-port-unreachable"},
	} {
		t.Run(c.f.String(), func(t *testing.T) {
			p := iptMode.Build(t, pt.Cfg, c.f, svc)
			d := p.Dump()
			if !strings.Contains(d, "--reject-with "+c.want) || strings.Contains(d, "--reject-with "+c.not) {
				t.Errorf("want --reject-with %s only:\n%s", c.want, d)
			}
			got := pt.NewIPTTracer(t, p, pt.NodeAddrs...).Trace(pt.Pkt(c.src, c.dst, 80))
			if got.Result != pt.Reject || !strings.HasSuffix(got.Matched[len(got.Matched)-1], "--reject-with "+c.want) {
				t.Errorf("cluster IP without endpoints: %v\n%s", got, strings.Join(got.Matched, "\n"))
			}
		})
	}
}

// TestIPTSave pins the spelling of each match and target to what iptables-nft-save 1.8.9
// prints for the rule the kernel holds (checked by loading such rules in a scratch network
// namespace and saving them).
func TestIPTSave(t *testing.T) {
	cases := []struct {
		f    model.Family
		rule ipt.Rule
		want string
	}{
		{model.IPv4, ipt.Rule{Target: ipt.MarkTarget{Mark: 0x4000}}, "-j MARK --set-xmark 0x4000/0x4000"},
		{model.IPv4, ipt.Rule{Target: ipt.MarkTarget{Xor: true, Mark: 0x4000}}, "-j MARK --set-xmark 0x4000/0x0"},
		{model.IPv4, ipt.Rule{Matches: []ipt.Match{ipt.MarkMatch{Not: true, Value: 0x4000, Mask: 0x4000}}, Target: ipt.Standard{Verdict: "RETURN"}},
			"-m mark ! --mark 0x4000/0x4000 -j RETURN"},
		{model.IPv4, ipt.Rule{Matches: []ipt.Match{ipt.Recent{Name: "EG-SEP-X", Seconds: 300}}, Target: ipt.JumpTo{Chain: "EG-SEP-X"}},
			"-m recent --rcheck --seconds 300 --reap --name EG-SEP-X --mask 255.255.255.255 --rsource -j EG-SEP-X"},
		{model.IPv6, ipt.Rule{Matches: []ipt.Match{ipt.Recent{Name: "EG-SEP-X", Seconds: 300}}, Target: ipt.JumpTo{Chain: "EG-SEP-X"}},
			"-m recent --rcheck --seconds 300 --reap --name EG-SEP-X --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -j EG-SEP-X"},
		{model.IPv6, ipt.Rule{Proto: 6, Matches: []ipt.Match{ipt.Comment{Text: "x y"}, ipt.Recent{Name: "EG-SEP-X", Set: true}, ipt.DPort{Proto: 6}},
			Target: ipt.DNATTarget{To: netip.MustParseAddrPort("[fd00::1]:8080")}},
			`-p tcp -m comment --comment "x y" -m recent --set --name EG-SEP-X --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -m tcp -j DNAT --to-destination [fd00::1]:8080`},
		{model.IPv6, ipt.Rule{Dst: netip.MustParsePrefix("::1/128"), DstNot: true, Matches: []ipt.Match{ipt.AddrType{}}, Target: ipt.JumpTo{Chain: ipt.ChainNodePorts}},
			"! -d ::1/128 -m addrtype --dst-type LOCAL -j EG-NODEPORTS"},
		{model.IPv4, ipt.Rule{Matches: []ipt.Match{ipt.Statistic{Probability: 1.0 / 3}}, Target: ipt.JumpTo{Chain: "EG-SEP-X"}},
			"-m statistic --mode random --probability 0.33333333349 -j EG-SEP-X"},
		{model.IPv4, ipt.Rule{Target: ipt.MasqueradeTarget{}}, "-j MASQUERADE --random-fully"},
		{model.IPv4, ipt.Rule{Matches: []ipt.Match{ipt.CtState{States: []string{"RELATED", "ESTABLISHED"}}}, Target: ipt.Standard{Verdict: "ACCEPT"}},
			"-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"},
		{model.IPv6, ipt.Rule{Dst: netip.MustParsePrefix("fd00::1/128"), Proto: 6, Matches: []ipt.Match{ipt.DPort{Proto: 6, Port: 80}}, Target: ipt.RejectTarget{With: "icmp6-port-unreachable"}},
			"-d fd00::1/128 -p tcp -m tcp --dport 80 -j REJECT --reject-with icmp6-port-unreachable"},
		{model.IPv4, ipt.Rule{Proto: 132, Matches: []ipt.Match{ipt.DPort{Proto: 132, Port: 53}}, Target: ipt.Standard{Verdict: "ACCEPT"}}, "-p sctp -m sctp --dport 53 -j ACCEPT"},
	}
	for _, c := range cases {
		if got := c.rule.Save(c.f); got != c.want {
			t.Errorf("%v rule saves as\n\t%s\nwant\n\t%s", c.f, got, c.want)
		}
	}
}

// TestIPTDumpChainOrder: iptables-nft-save declares and lists user chains sorted by name,
// after the built-in chains' rules; Dump must too for the two to compare line by line.
func TestIPTDumpChainOrder(t *testing.T) {
	p := iptMode.Build(t, pt.Cfg, model.IPv4, pt.Web(mt.LoadBalancerIPs("203.0.113.10"), mt.SourceRanges("10.200.1.0/24")), pt.WebV4Ready())
	for _, table := range strings.SplitAfter(p.Dump(), "COMMIT\n") {
		var declared, listed []string
		builtinDone := false
		for _, line := range strings.Split(table, "\n") {
			switch {
			case strings.HasPrefix(line, ":"):
				declared = append(declared, strings.Fields(line[1:])[0])
			case strings.HasPrefix(line, "-A "):
				chain := strings.Fields(line)[1]
				if !strings.HasPrefix(chain, ipt.Prefix) {
					if builtinDone {
						t.Errorf("built-in chain rule after edgegate's chains: %s", line)
					}
					continue
				}
				builtinDone = true
				if len(listed) == 0 || listed[len(listed)-1] != chain {
					listed = append(listed, chain)
				}
			}
		}
		if !slices.IsSorted(declared) || !slices.IsSorted(listed) {
			t.Errorf("chains not in name order:\ndeclared %v\nlisted %v", declared, listed)
		}
	}
}
