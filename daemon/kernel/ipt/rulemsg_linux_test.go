package ipt

import (
	"fmt"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/google/nftables"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// TestRuleMessagesMatchGoogle: every rule of a variety of plans (both families, affinity,
// source ranges, local policies, UDP and SCTP, masked and whole-byte prefixes, masquerade
// settings, and addEncodingChains' rarer encodings) encodes to the very bytes
// google/nftables' AddRule (InsertRule for built-in chains) queues for encoder.rule's
// expressions; flags differ only in the acknowledgement and echo the library asks for,
// which nlbatch clears anyway.
func TestRuleMessagesMatchGoogle(t *testing.T) {
	lib, same := kerneltest.LibraryMessages(t)
	masqAll := demoConfig()
	masqAll.MasqueradeAll = true
	configs := []plan.Config{demoConfig(), masqAll, {NodeName: "gw", ClusterCIDRs: []netip.Prefix{
		netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("fd00:200::/32")}}}
	snaps := []*model.Snapshot{demoSnapshot()}
	for seed := range 4 {
		snaps = append(snaps, mt.Snapshot(mt.RandomWorld{DualStack: true}.Objects(rand.New(rand.NewSource(int64(seed))))...))
	}
	rules, kinds := 0, map[bool]int{}
	for _, snap := range snaps {
		for _, cfg := range configs {
			for _, p := range demoPlans(snap, cfg) {
				addEncodingChains(p)
				for _, tab := range p.Tables {
					enc := encoder{family: p.Family}
					w := newRuleWriter(enc, tab.Name)
					lt := &nftables.Table{Name: tab.Name, Family: tableFamily(p.Family)}
					check := func(chain string, i int, r iptplan.Rule, insert bool) {
						where := fmt.Sprintf("%v %s %s rule %d (%+v)", p.Family, tab.Name, chain, i, r)
						exprs, err := enc.rule(r)
						if err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						lr := &nftables.Rule{Table: lt, Chain: &nftables.Chain{Name: chain, Table: lt}, Exprs: exprs}
						if insert {
							lib.InsertRule(lr)
						} else {
							lib.AddRule(lr)
						}
						got, err := w.message(chain, r, insert)
						if err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						same(where, got)
						rules++
						kinds[insert]++
					}
					for _, c := range tab.Chains {
						for i, r := range c.Rules {
							check(c.Name, i, r, false)
						}
					}
					for _, hook := range iptplan.BuiltinChains(tab.Name) {
						for i, r := range tab.Builtin[hook] {
							check(hook, i, r, true)
						}
					}
				}
			}
		}
	}
	if rules < 1000 || kinds[true] < 50 {
		t.Fatalf("only %d rules compared (%d inserted)", rules, kinds[true])
	}
	t.Logf("%d rules, %d of them inserted into built-in chains, encoded as the library does", rules, kinds[true])
}
