package ipt_test

import (
	"math/rand"
	"net/netip"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/ipt"
)

// TestIPTPlannerReusesOnlyUnchanged: through a run of random changes (services added,
// changed and removed; endpoints added, removed, moved between nodes, terminating; the
// config changed now and then) a long-lived planner's plan is the one a new planner makes,
// chain for chain in order; a service port the tracker hands out unchanged keeps its very
// chains, and the plan holds those.
func TestIPTPlannerReusesOnlyUnchanged(t *testing.T) {
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.200.0.0/20"), netip.MustParsePrefix("fd00:200::/60")}
	configs := []plan.Config{{NodeName: "gw"}, {NodeName: "gw", MasqueradeAll: true}, {NodeName: "gw", ClusterCIDRs: cidrs}}
	for _, f := range []model.Family{model.IPv4, model.IPv6} {
		r := rand.New(rand.NewSource(int64(f)))
		tr := model.NewTracker()
		for _, objs := range pt.GoldenFixtures() {
			for _, o := range objs {
				mt.Upsert(tr, o)
			}
		}
		p := &ipt.Planner{Family: f}
		cfg := configs[0]
		prevSP := map[model.ServicePortName]*model.ServicePort{}
		prevChains := map[model.ServicePortName][]*ipt.Chain{}
		reused, replanned := 0, 0
		for step := range 120 {
			if r.Intn(12) == 0 {
				cfg = configs[r.Intn(len(configs))]
			}
			sameCfg := reflect.DeepEqual(cfg, ipt.PlannedWith(p))
			pt.RandomChange(r, tr)
			snap, _ := tr.Snapshot()
			got := p.Plan(snap, cfg)
			want := (&ipt.Planner{Family: f}).Plan(snap, cfg)
			if diff := cmp.Diff(want.Dump(), got.Dump()); diff != "" {
				t.Fatalf("%v step %d: the planner's plan differs from a new planner's (-new +long-lived):\n%s", f, step, diff)
			}
			for i, tab := range want.Tables {
				if g, w := chainNames(got.Tables[i]), chainNames(tab); !cmp.Equal(g, w) {
					t.Fatalf("%v step %d: %s chains in another order:\n%v\nwant\n%v", f, step, tab.Name, g, w)
				}
			}
			inPlan := map[*ipt.Chain]bool{}
			for _, c := range got.Table("nat").Chains {
				inPlan[c] = true
			}
			for _, sp := range snap.Sorted() {
				chains, _ := ipt.OwnChains(p, sp.Name)
				if sameCfg && prevSP[sp.Name] == sp {
					if !slicesSame(chains, prevChains[sp.Name]) {
						t.Fatalf("%v step %d: %s did not change but its chains were planned again", f, step, sp.Name)
					}
					reused++
				} else {
					replanned++
				}
				for _, c := range chains {
					if !inPlan[c] {
						t.Fatalf("%v step %d: chain %s of %s is not the plan's", f, step, c.Name, sp.Name)
					}
				}
				prevSP[sp.Name], prevChains[sp.Name] = sp, chains
			}
		}
		if reused < 200 || replanned < 50 {
			t.Errorf("%v: %d service ports reused, %d planned again: the changes did not exercise both", f, reused, replanned)
		}
	}
}

func chainNames(t *ipt.Table) []string {
	var out []string
	for _, c := range t.Chains {
		out = append(out, c.Name)
	}
	return out
}

func slicesSame(a, b []*ipt.Chain) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
