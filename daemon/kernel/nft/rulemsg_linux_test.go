package nft

import (
	"fmt"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// TestRuleMessagesMatchGoogle: every rule of a variety of plans (both families, affinity,
// LoadBalancer source ranges, local and cluster policies, UDP and SCTP, masquerade
// settings) encodes to the very bytes google/nftables' AddRule queues for the rule's
// expressions (encoder.rule) and comment; flags differ only in the acknowledgement and
// echo the library asks for, which nlbatch clears anyway.
func TestRuleMessagesMatchGoogle(t *testing.T) {
	lib, same := kerneltest.LibraryMessages(t)
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("fd00:200::/32")}
	configs := []plan.Config{{NodeName: "gw"}, {NodeName: "gw", MasqueradeAll: true}, {NodeName: "gw", ClusterCIDRs: cidrs}}
	snaps := []*model.Snapshot{demoSnapshot(), demoSnapshot(mt.ExternalLocal(32000))}
	for seed := range 4 {
		snaps = append(snaps, mt.Snapshot(mt.RandomWorld{Shared: seed%2 == 0}.Objects(rand.New(rand.NewSource(int64(seed))))...))
	}
	sctp := mt.Service("ns", "sctp", "10.96.9.9", mt.Port("s", v1.ProtocolSCTP, 9, 9, 0), mt.InternalLocal())
	snaps = append(snaps, mt.Snapshot(sctp, mt.Slice("ns", "sctp-1", "sctp", "s", v1.ProtocolSCTP, 9, mt.EP("10.200.9.1", mt.OnNode("gw")))))
	rules := 0
	for _, snap := range snaps {
		for _, cfg := range configs {
			for _, f := range []model.Family{model.IPv4, model.IPv6} {
				tab := nftplan.Build(snap, f, cfg)
				w := newRuleWriter(f, tab.Name)
				enc := &encoder{family: f}
				lt := &nftables.Table{Name: tab.Name, Family: tableFamily(f)}
				for _, name := range tab.ChainNames() {
					for i, r := range tab.Chains[name].Rules {
						where := fmt.Sprintf("%v %s rule %d (%s)", f, name, i, r.String(f))
						exprs, err := enc.rule(r)
						if err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						lr := &nftables.Rule{Table: lt, Chain: &nftables.Chain{Name: name, Table: lt}, Exprs: exprs}
						if c, ok := r.Comment(); ok {
							lr.UserData = userdata.AppendString(nil, userdata.TypeComment, c)
						}
						lib.AddRule(lr)
						got, err := w.message(name, r)
						if err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						same(where, got)
						rules++
					}
				}
			}
		}
	}
	if rules < 500 {
		t.Errorf("compared %d rules; the plans should hold more", rules)
	}
}
