package nft

import (
	"bytes"
	"fmt"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
)

// TestRuleMessagesMatchGoogle: every rule of a variety of plans (both families, affinity,
// LoadBalancer source ranges, local and cluster policies, UDP and SCTP, masquerade
// settings) encodes to the very bytes google/nftables' AddRule queues for the rule's
// expressions (encoder.rule) and comment; flags differ only in the acknowledgement and
// echo the library asks for, which nlbatch clears anyway.
func TestRuleMessagesMatchGoogle(t *testing.T) {
	var sent []netlink.Message
	lib, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		if req != nil {
			sent = append(sent, req[1:len(req)-1]...)
		}
		return []netlink.Message{{Header: netlink.Header{Type: netlink.Error}, Data: make([]byte, 20)}}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.200.0.0/16"), netip.MustParsePrefix("fd00:200::/32")}
	configs := []plan.Config{{NodeName: "gw"}, {NodeName: "gw", MasqueradeAll: true}, {NodeName: "gw", ClusterCIDRs: cidrs}}
	snaps := []*model.Snapshot{demoSnapshot(), demoSnapshot(mt.ExternalLocal(32000))}
	for seed := range 4 {
		snaps = append(snaps, mt.Snapshot(randomObjects(rand.New(rand.NewSource(int64(seed))), seed%2 == 0)...))
	}
	sctp := mt.Service("ns", "sctp", "10.96.9.9", mt.Port("s", v1.ProtocolSCTP, 9, 9, 0), mt.InternalLocal())
	snaps = append(snaps, mt.Snapshot(sctp, mt.Slice("ns", "sctp-1", "sctp", "s", v1.ProtocolSCTP, 9, mt.EP("10.200.9.1", mt.OnNode("gw")))))
	rules := 0
	for _, snap := range snaps {
		for _, cfg := range configs {
			for _, f := range []model.Family{model.IPv4, model.IPv6} {
				tab := plan.NFT(snap, f, cfg)
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
						if err := lib.Flush(); err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						want := sent[len(sent)-1]
						got, err := w.message(name, r)
						if err != nil {
							t.Fatalf("%s: %v", where, err)
						}
						if got.Header.Type != want.Header.Type || got.Header.Flags != want.Header.Flags&^(netlink.Acknowledge|netlink.Echo) {
							t.Errorf("%s: header %+v, the library's %+v", where, got.Header, want.Header)
						}
						if !bytes.Equal(got.Data, want.Data) {
							t.Fatalf("%s: message differs from the library's\ngot:  %x\nwant: %x", where, got.Data, want.Data)
						}
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
