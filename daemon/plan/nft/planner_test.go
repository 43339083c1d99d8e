package nft_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// TestPlannerMatchesNFT: through a run of changes (endpoints moved, services added and
// removed, two services claiming one IP and then not, also across sibling maps, the node's
// config changed) the planner's table is the one NFT plans from scratch, and an unchanged
// service port keeps its chains (the same pointers) from one plan to the next.
func TestPlannerMatchesNFT(t *testing.T) {
	tr := model.NewTracker()
	for _, objs := range pt.GoldenFixtures() {
		for _, o := range objs {
			mt.Upsert(tr, o)
		}
	}
	steps := []struct {
		name   string
		change func()
		cfg    plan.Config
	}{
		{"the fixtures", func() {}, plan.Config{NodeName: "gw"}},
		{"nothing changed", func() {}, plan.Config{NodeName: "gw"}},
		{"an endpoint moved", func() {
			mt.Upsert(tr, mt.Slice("default", "dns-v4", "dns", "dns", v1.ProtocolUDP, 5353,
				mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.99", mt.OnNode("gw"))))
		}, plan.Config{NodeName: "gw"}},
		{"a service claims web's cluster IP", func() {
			mt.Upsert(tr, mt.Service("default", "aaa", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
			mt.Upsert(tr, mt.Slice("default", "aaa-1", "aaa", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.3.1")))
		}, plan.Config{NodeName: "gw"}},
		{"the claimant goes", func() { tr.DeleteService("default", "aaa"); tr.DeleteSlice("default", "aaa-1") },
			plan.Config{NodeName: "gw"}},
		// A claim in a sibling map only: aab has no endpoints, and its external IP's REJECT
		// in no-endpoint-services takes web's cluster IP and port first.
		{"a service without endpoints claims web's cluster IP as external IP", func() {
			mt.Upsert(tr, mt.Service("default", "aab", "10.96.0.98", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), mt.ExternalIPs("10.96.0.10")))
		}, plan.Config{NodeName: "gw"}},
		{"that claimant goes", func() { tr.DeleteService("default", "aab") }, plan.Config{NodeName: "gw"}},
		{"a service goes", func() { tr.DeleteService("default", "empty") }, plan.Config{NodeName: "gw"}},
		// Hairpin elements (of endpoints on this node) are shared: one stays while any
		// service port still uses it.
		{"a second service selects dns's endpoints", func() {
			mt.Upsert(tr, mt.Service("default", "bbb", "10.96.0.77", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
			mt.Upsert(tr, mt.Slice("default", "bbb-1", "bbb", "http", v1.ProtocolTCP, 8080,
				mt.EP("10.200.2.99", mt.OnNode("gw")), mt.EP("10.200.4.1", mt.OnNode("gw"))))
		}, plan.Config{NodeName: "gw"}},
		{"dns drops the endpoint it shares", func() {
			mt.Upsert(tr, mt.Slice("default", "dns-v4", "dns", "dns", v1.ProtocolUDP, 5353, mt.EP("10.200.2.11")))
		}, plan.Config{NodeName: "gw"}},
		{"the second service goes", func() { tr.DeleteService("default", "bbb"); tr.DeleteSlice("default", "bbb-1") },
			plan.Config{NodeName: "gw"}},
		{"the node is another", func() {}, plan.Config{NodeName: "backend-2"}},
		{"the masquerade config changed", func() {}, plan.Config{NodeName: "backend-2", MasqueradeAll: true}},
	}
	for _, f := range []model.Family{model.IPv4, model.IPv6} {
		p := &nft.Planner{Family: f}
		var prev *nft.Table
		listed := 0 // plans whose delta listed hairpin element changes
		for _, st := range steps {
			st.change()
			snap, changes := tr.Snapshot()
			got := p.Plan(snap, st.cfg)
			want := nft.Build(snap, f, st.cfg)
			if diff := cmp.Diff(want.Dump(), got.Dump()); diff != "" {
				t.Fatalf("%v, %s: planner differs from NFT (-NFT +planner):\n%s", f, st.name, diff)
			}
			if !slices.Equal(want.Conflicts, got.Conflicts) {
				t.Errorf("%v, %s: conflicts %q, NFT says %q", f, st.name, got.Conflicts, want.Conflicts)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("%v, %s: %v", f, st.name, err)
			}
			if prev != nil && prev.Family == f && st.name != "the node is another" && st.name != "the masquerade config changed" {
				for name, c := range got.Chains {
					old, ok := prev.Chains[name]
					if ok && c != old && portChain(name) && !touches(changes, name) {
						t.Errorf("%v, %s: chain %s planned anew though its service port did not change", f, st.name, name)
					}
				}
			}
			if prev != nil && prev.Delta != nil {
				t.Errorf("%v, %s: the table before still holds its delta (and so every table before it)", f, st.name)
			}
			if d := got.Delta; d != nil {
				if d.From != prev {
					t.Errorf("%v, %s: delta from another table than the last plan", f, st.name)
				}
				checkDelta(t, fmt.Sprintf("%v, %s", f, st.name), prev, got)
				if ch := d.Elems[nft.SetHairpin]; len(ch.Add)+len(ch.Del) > 0 {
					listed++
				}
			}
			prev = got
		}
		if f == model.IPv4 && listed < 3 {
			t.Errorf("IPv4: %d plans listed their hairpin element changes, want the 3 that changed them at least", listed)
		}
	}
}

// checkDelta: whatever differs between the table before and after is in the delta.
func checkDelta(t *testing.T, where string, before, after *nft.Table) {
	t.Helper()
	d := after.Delta
	for _, name := range slices.Concat(slices.Collect(maps.Keys(before.Chains)), slices.Collect(maps.Keys(after.Chains))) {
		if before.Chains[name] != after.Chains[name] && !d.Chains[name] {
			t.Errorf("%s: chain %s differs but is not in the delta", where, name)
		}
	}
	for _, name := range slices.Concat(slices.Collect(maps.Keys(before.Sets)), slices.Collect(maps.Keys(after.Sets))) {
		if before.Sets[name] != after.Sets[name] && !d.Sets[name] {
			t.Errorf("%s: set %s differs but is not in the delta", where, name)
		}
	}
	// Listed element changes are exact: before's elements, less Del, plus Add, are after's.
	for name, ch := range d.Elems {
		have := map[nft.Key]bool{}
		for _, e := range before.Sets[name].Elems {
			have[e.Key] = true
		}
		for _, e := range ch.Del {
			if !have[e.Key] {
				t.Errorf("%s: set %s: delta removes %v, which it did not hold", where, name, e.Key)
			}
			delete(have, e.Key)
		}
		for _, e := range ch.Add {
			if have[e.Key] {
				t.Errorf("%s: set %s: delta adds %v, which it held", where, name, e.Key)
			}
			have[e.Key] = true
		}
		got := map[nft.Key]bool{}
		for _, e := range after.Sets[name].Elems {
			got[e.Key] = true
		}
		if !maps.Equal(have, got) || len(got) != len(after.Sets[name].Elems) {
			t.Errorf("%s: set %s: before and the delta make %v, the table holds %v", where, name, have, got)
		}
	}
}

var portChainPrefixes = []string{"service-", "local-", "external-", "firewall-", "endpoint-"}

// portChain reports whether a chain is a service port's: the layout's own chains (those
// of a table without services) are planned each time.
func portChain(name string) bool {
	if _, ok := nft.Build(&model.Snapshot{}, model.IPv4, plan.Config{}).Chains[name]; ok {
		return false
	}
	for _, prefix := range portChainPrefixes {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// touches reports whether a chain belongs to one of the changed service ports.
func touches(ch model.Changes, chain string) bool {
	for n := range ch.Ports {
		base := nft.ChainBase(n)
		for _, prefix := range portChainPrefixes {
			if strings.HasPrefix(chain, prefix+base) {
				return true
			}
		}
		// An endpoint chain's hash is the endpoint's; the port's name follows it.
		if _, port, ok := strings.Cut(base, "-"); ok && strings.Contains(chain, "-"+port+"__") {
			return true
		}
	}
	return false
}

// TestPlannerSkippedSnapshots: the planner looks only at a snapshot's changed ports when
// it planned the snapshot they changed from, of the same tracker. A snapshot it never saw
// in between, or another tracker's with the same generations, is planned in full.
func TestPlannerSkippedSnapshots(t *testing.T) {
	cfg := plan.Config{NodeName: "gw"}
	dns := func(tr *model.Tracker, last string) {
		mt.Upsert(tr, mt.Slice("default", "dns-v4", "dns", "dns", v1.ProtocolUDP, 5353, mt.EP("10.200.2.11"), mt.EP(last)))
	}
	a, b := model.NewTracker(), model.NewTracker()
	for _, tr := range []*model.Tracker{a, b} {
		for _, objs := range pt.GoldenFixtures() {
			for _, o := range objs {
				mt.Upsert(tr, o)
			}
		}
	}
	p := &nft.Planner{Family: model.IPv4}
	check := func(step string, snap *model.Snapshot) {
		t.Helper()
		if diff := cmp.Diff(nft.Build(snap, model.IPv4, cfg).Dump(), p.Plan(snap, cfg).Dump()); diff != "" {
			t.Fatalf("%s: planner differs from NFT (-NFT +planner):\n%s", step, diff)
		}
	}
	snap, _ := a.Snapshot()
	check("first", snap)
	dns(a, "10.200.2.12")
	a.Snapshot() // made, never planned
	a.DeleteService("default", "empty")
	snap, _ = a.Snapshot()
	check("after a snapshot the planner skipped", snap)
	// b's generations run as a's did, 1 to 3, with other endpoints, and its fourth
	// changes another service.
	b.Snapshot()
	dns(b, "10.200.2.52")
	b.Snapshot()
	dns(b, "10.200.2.53")
	b.Snapshot()
	b.DeleteService("default", "web")
	snap, _ = b.Snapshot()
	if snap.From != 3 {
		t.Fatalf("b's snapshot follows generation %d, the test wants a's last (3)", snap.From)
	}
	check("another tracker's snapshot", snap)
}
