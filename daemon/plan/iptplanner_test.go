package plan

import (
	"fmt"
	"math/rand"
	"net/netip"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/google/go-cmp/cmp"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// TestIPTPlannerReusesOnlyUnchanged: through a run of random changes (services added,
// changed and removed; endpoints added, removed, moved between nodes, terminating; the
// config changed now and then) a long-lived planner's plan is the one a new planner makes,
// chain for chain in order; a service port the tracker hands out unchanged keeps its very
// chains, and the plan holds those.
func TestIPTPlannerReusesOnlyUnchanged(t *testing.T) {
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.200.0.0/20"), netip.MustParsePrefix("fd00:200::/60")}
	configs := []Config{{NodeName: "gw"}, {NodeName: "gw", MasqueradeAll: true}, {NodeName: "gw", ClusterCIDRs: cidrs}}
	for _, f := range []model.Family{model.IPv4, model.IPv6} {
		r := rand.New(rand.NewSource(int64(f)))
		tr := model.NewTracker()
		for _, objs := range goldenFixtures() {
			for _, o := range objs {
				upsert(tr, o)
			}
		}
		p := &IPTPlanner{Family: f}
		cfg := configs[0]
		prevSP := map[model.ServicePortName]*model.ServicePort{}
		prevChains := map[model.ServicePortName][]*IptChain{}
		reused, replanned := 0, 0
		for step := range 120 {
			if r.Intn(12) == 0 {
				cfg = configs[r.Intn(len(configs))]
			}
			sameCfg := reflect.DeepEqual(cfg, p.cfg)
			randomChange(r, tr)
			snap, _ := tr.Snapshot()
			got := p.Plan(snap, cfg)
			want := (&IPTPlanner{Family: f}).Plan(snap, cfg)
			if diff := cmp.Diff(want.Dump(), got.Dump()); diff != "" {
				t.Fatalf("%v step %d: the planner's plan differs from a new planner's (-new +long-lived):\n%s", f, step, diff)
			}
			for i, tab := range want.Tables {
				if g, w := chainNames(got.Tables[i]), chainNames(tab); !cmp.Equal(g, w) {
					t.Fatalf("%v step %d: %s chains in another order:\n%v\nwant\n%v", f, step, tab.Name, g, w)
				}
			}
			inPlan := map[*IptChain]bool{}
			for _, c := range got.Table("nat").Chains {
				inPlan[c] = true
			}
			for _, sp := range snap.Sorted() {
				frag := p.frags[sp.Name]
				if sameCfg && prevSP[sp.Name] == sp {
					if !slicesSame(frag.chains, prevChains[sp.Name]) {
						t.Fatalf("%v step %d: %s did not change but its chains were planned again", f, step, sp.Name)
					}
					reused++
				} else {
					replanned++
				}
				for _, c := range frag.chains {
					if !inPlan[c] {
						t.Fatalf("%v step %d: chain %s of %s is not the plan's", f, step, c.Name, sp.Name)
					}
				}
				prevSP[sp.Name], prevChains[sp.Name] = sp, frag.chains
			}
		}
		if reused < 200 || replanned < 50 {
			t.Errorf("%v: %d service ports reused, %d planned again: the changes did not exercise both", f, reused, replanned)
		}
	}
}

func chainNames(t *IptTable) []string {
	var out []string
	for _, c := range t.Chains {
		out = append(out, c.Name)
	}
	return out
}

func slicesSame(a, b []*IptChain) bool {
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

// randomChange upserts or deletes one of a few services or their EndpointSlices.
func randomChange(r *rand.Rand, tr *model.Tracker) {
	i := r.Intn(6)
	name := fmt.Sprintf("rnd%d", i)
	proto := []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}[i%3]
	switch r.Intn(5) {
	case 0:
		tr.DeleteService("ns", name)
	case 1, 2:
		mods := []func(*v1.Service){mt.Port("p", proto, int32(80+i), 8080, int32(30100+i)), mt.DualStack(fmt.Sprintf("fd00:96::%x", 0x100+i))}
		switch r.Intn(4) {
		case 0:
			mods = append(mods, mt.LoadBalancerIPs(fmt.Sprintf("203.0.113.%d", 100+i), fmt.Sprintf("2001:db8:113::%x", 0x100+i)))
			if r.Intn(2) == 0 {
				mods = append(mods, mt.SourceRanges("10.0.0.0/8", "2001:db8::/32"))
			}
		case 1:
			mods = append(mods, mt.Type(v1.ServiceTypeNodePort))
		case 2:
			mods = append(mods, mt.ExternalIPs(fmt.Sprintf("198.51.100.%d", 100+i)))
		}
		if r.Intn(3) == 0 {
			mods = append(mods, mt.ExternalLocal(int32(32100+i)))
		}
		if r.Intn(3) == 0 {
			mods = append(mods, mt.Affinity(int32(60*(1+r.Intn(3)))))
		}
		if r.Intn(4) == 0 {
			mods = append(mods, mt.InternalLocal())
		}
		tr.UpsertService(mt.Service("ns", name, fmt.Sprintf("10.96.1.%d", 10+i), mods...))
	default:
		var v4, v6 []discovery.Endpoint
		for e := range 4 {
			if r.Intn(2) == 0 {
				continue
			}
			mods := []func(*discovery.Endpoint){mt.OnNode([]string{"gw", "other"}[r.Intn(2)])}
			if r.Intn(5) == 0 {
				mods = append(mods, mt.Terminating(r.Intn(2) == 0))
			}
			v4 = append(v4, mt.EP(fmt.Sprintf("10.200.%d.%d", 10+i, 10+e), mods...))
			v6 = append(v6, mt.EP(fmt.Sprintf("fd00:200:%x::%x", 0x10+i, 0x10+e), mods...))
		}
		tr.UpsertSlice(mt.Slice("ns", name+"-v4", name, "p", proto, 8080, v4...))
		tr.UpsertSlice(mt.Slice("ns", name+"-v6", name, "p", proto, 8080, v6...))
	}
}
