package ipt

import (
	"math/rand"
	"net/netip"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// ownedRules reads back what edgegate owns in both families, as iptables-nft-save prints it.
func ownedRules(t *testing.T, ns string) map[model.Family]ruleset {
	t.Helper()
	return map[model.Family]ruleset{
		model.IPv4: parseSave(save(t, ns, model.IPv4)),
		model.IPv6: parseSave(save(t, ns, model.IPv6)),
	}
}

func diffOwned(got, want map[model.Family]ruleset) []string {
	var out []string
	for _, f := range families {
		for _, d := range got[f].diff(want[f]) {
			out = append(out, f.String()+" "+d)
		}
	}
	return out
}

// TestPartialSyncsConverge replays random states with partial syncs in one namespace and
// proves the kernel ends exactly where a single full sync of the last state puts a fresh
// namespace.
func TestPartialSyncsConverge(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	cfg := plan.Config{NodeName: "gw", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16")}}
	var states []*model.Snapshot
	for i := 0; i < 20; i++ {
		states = append(states, mt.Snapshot(mt.RandomWorld{DualStack: true}.Objects(r)...))
	}
	var incremental, fresh map[model.Family]ruleset
	inNetns(t, func(ns string) {
		foreign(t, ns)
		k := New()
		var chains, deleted int
		for i, s := range states {
			st, err := k.Apply(demoPlans(s, cfg), i == 0)
			if err != nil {
				t.Fatalf("state %d: %v", i, err)
			}
			if i > 0 && st.Full {
				t.Fatalf("state %d was applied in full; want partial", i)
			}
			if i > 0 {
				chains, deleted = chains+st.Chains, deleted+st.Deleted
			}
		}
		if chains == 0 || deleted == 0 {
			t.Errorf("partial syncs wrote %d chains and deleted %d: the states do not exercise them", chains, deleted)
		}
		incremental = ownedRules(t, ns)
	})
	inNetns(t, func(ns string) {
		foreign(t, ns)
		if _, err := New().Apply(demoPlans(states[len(states)-1], cfg), true); err != nil {
			t.Fatal(err)
		}
		fresh = ownedRules(t, ns)
	})
	if len(fresh[model.IPv4]["nat"]) < 5 {
		t.Fatalf("the last state programs almost nothing: %v", fresh)
	}
	for _, d := range diffOwned(incremental, fresh) {
		t.Errorf("partial syncs ended elsewhere than a full sync: %s", d)
	}
}

// TestFullSyncRepairsTampering deletes a rule of an edgegate chain and edgegate's jump from
// PREROUTING and adds an EG- chain by hand; a partial sync (which trusts its memory of the
// kernel) does not notice, the next full sync restores exactly the plan. The operator's
// rules survive every apply.
func TestFullSyncRepairsTampering(t *testing.T) {
	plans := demoPlans(demoSnapshot(), demoConfig())
	inNetns(t, func(ns string) {
		foreign(t, ns)
		k := New()
		if _, err := k.Apply(plans, true); err != nil {
			t.Fatal(err)
		}
		want := ownedRules(t, ns)
		svc := plans[0].Table("nat").Chain(iptplan.ChainServices).Rules[0].Target.(iptplan.JumpTo).Chain
		for _, args := range [][]string{
			{"iptables-nft", "-t", "nat", "-D", svc, "1"},
			{"iptables-nft", "-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment", "edgegate service portals", "-j", iptplan.ChainServices},
			{"iptables-nft", "-t", "nat", "-N", "EG-INTRUDER"},
			{"iptables-nft", "-t", "nat", "-A", "EG-INTRUDER", "-j", "RETURN"},
			{"iptables-nft", "-t", "nat", "-I", "OUTPUT", "-m", "comment", "--comment", "edgegate service portals", "-j", "EG-INTRUDER"},
		} {
			run(t, ns, "", args...)
		}
		if _, err := k.Apply(plans, false); err != nil {
			t.Fatal(err)
		}
		if len(diffOwned(ownedRules(t, ns), want)) == 0 {
			t.Fatal("tampering was not visible; the test cannot tell repair from nothing")
		}
		st, err := k.Apply(plans, true)
		if err != nil {
			t.Fatal(err)
		}
		if st.Deleted != 1 {
			t.Errorf("full sync deleted %d chains, want 1 (EG-INTRUDER)", st.Deleted)
		}
		for _, d := range diffOwned(ownedRules(t, ns), want) {
			t.Errorf("full sync did not repair: %s", d)
		}
		for _, f := range families {
			out := save(t, ns, f)
			if strings.Contains(out, "EG-INTRUDER") {
				t.Errorf("%s: EG-INTRUDER survived a full sync:\n%s", f, out)
			}
			if f == model.IPv4 && !strings.Contains(out, "\n-A INPUT -s 192.0.2.1/32 -j DROP\n") {
				t.Errorf("the operator's INPUT rule is gone:\n%s", out)
			}
		}
	})
}

// TestFullSyncListsOnlyAfterForeignCommits: a full apply lists the tables' chains (slow
// at scale) only when the nftables generation says that something else committed since the
// last apply; otherwise it rewrites the chains it knows, with the same result.
func TestFullSyncListsOnlyAfterForeignCommits(t *testing.T) {
	plans := demoPlans(demoSnapshot(), demoConfig())
	inNetns(t, func(ns string) {
		foreign(t, ns)
		k := New()
		apply := func(full, wantListed bool, what string) {
			t.Helper()
			st, err := k.Apply(plans, full)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if st.Listed != wantListed {
				t.Errorf("%s: listed %v, want %v", what, st.Listed, wantListed)
			}
		}
		apply(true, true, "first apply")
		want := ownedRules(t, ns)
		apply(true, false, "full apply, nothing else committed")
		apply(false, false, "partial apply")
		apply(true, false, "full apply after a partial one")
		for _, d := range diffOwned(ownedRules(t, ns), want) {
			t.Errorf("after full applies that knew the chains: %s", d)
		}
		run(t, ns, "", "iptables-nft", "-t", "nat", "-N", "EG-INTRUDER")
		apply(false, false, "partial apply after a foreign commit")
		apply(true, true, "full apply after a foreign commit")
		if out := save(t, ns, model.IPv4); strings.Contains(out, "EG-INTRUDER") {
			t.Errorf("EG-INTRUDER survived the full apply:\n%s", out)
		}
		apply(true, false, "full apply after that")
	})
}

// TestFailedApplyKeepsRules makes the kernel refuse a batch (DNAT is valid only in the nat
// table) and checks that the rules of the last good apply stay and the next apply is full.
func TestFailedApplyKeepsRules(t *testing.T) {
	good := demoPlans(demoSnapshot(), demoConfig())
	bad := demoPlans(demoSnapshot(mt.Affinity(600)), demoConfig())
	fw := bad[0].Table("filter").Chain(iptplan.ChainForward)
	fw.Rules = append(fw.Rules, iptplan.Rule{Proto: 6, Matches: []iptplan.Match{iptplan.DPort{Proto: 6}},
		Target: iptplan.DNATTarget{To: netip.MustParseAddrPort("10.0.0.1:80")}})
	inNetns(t, func(ns string) {
		k := New()
		if _, err := k.Apply(good, true); err != nil {
			t.Fatal(err)
		}
		want := ownedRules(t, ns)
		if _, err := k.Apply(bad, false); err == nil {
			t.Fatal("the kernel accepted DNAT in the filter table")
		} else if !strings.Contains(err.Error(), "nftables batch (partial)") {
			t.Fatalf("want the kernel to refuse the batch, got: %v", err)
		}
		for _, d := range diffOwned(ownedRules(t, ns), want) {
			t.Errorf("a refused batch changed the kernel: %s", d)
		}
		st, err := k.Apply(good, false)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Full {
			t.Error("the apply after a failure was not full")
		}
	})
}

// TestPartialSyncBuiltinAndFamilyChanges changes edgegate's rules in a built-in chain and
// drops the IPv6 plan, both through partial syncs.
func TestPartialSyncBuiltinAndFamilyChanges(t *testing.T) {
	plans := demoPlans(demoSnapshot(), demoConfig())
	changed := demoPlans(demoSnapshot(), demoConfig())
	filter := changed[0].Table("filter")
	fwd := filter.Builtin["FORWARD"]
	filter.Builtin["FORWARD"] = []iptplan.Rule{fwd[1], fwd[0]}
	filter.Builtin["OUTPUT"] = nil
	inNetns(t, func(ns string) {
		foreign(t, ns)
		k := New()
		if _, err := k.Apply(plans, true); err != nil {
			t.Fatal(err)
		}
		st, err := k.Apply(changed, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Full || st.Chains != 2 || st.Rules != 2 {
			t.Errorf("partial sync of two built-in chains: %+v, want 2 chains and 2 rules written", st)
		}
		got := parseSave(save(t, ns, model.IPv4))["filter"]
		want := parseSave(changed[0].Dump())["filter"]
		for _, c := range []string{"INPUT", "FORWARD", "OUTPUT"} {
			if strings.Join(got[c], "\n") != strings.Join(want[c], "\n") {
				t.Errorf("%s:\ngot:  %q\nwant: %q", c, got[c], want[c])
			}
		}
		st, err = k.Apply(changed[:1], false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Deleted == 0 {
			t.Errorf("dropping the IPv6 plan deleted no chains: %+v", st)
		}
		out := save(t, ns, model.IPv6)
		if strings.Contains(out, iptplan.Prefix) || strings.Contains(out, "edgegate") {
			t.Errorf("the dropped IPv6 plan left rules:\n%s", out)
		}
		if !strings.Contains(out, "-A FORWARD -s 2001:db8::1/128 -j DROP") {
			t.Errorf("the operator's IPv6 rule is gone:\n%s", out)
		}
	})
}
