package ipvs_test

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// FuzzPlan draws Services and EndpointSlices from plantest's fuzz world, plans both
// families in IPVS mode and checks that planning never panics, that the auxiliary table
// validates, that virtual servers are unique and sorted with real servers of their own
// family, and, where no two services clash, that traffic to each cluster IP and node port
// goes where Policy says (the node's own traffic to a node port meets the external policy:
// IPVS has one virtual server for both).
func FuzzPlan(f *testing.F) {
	pt.FuzzSeeds(f, "edgegate ipvs", 11)
	f.Fuzz(func(t *testing.T, data []byte) {
		var cfg ipvs.Config
		_, common, snap := pt.FuzzWorld(data, pt.FuzzMode{
			Config: func(in *pt.FuzzInput) {
				cfg = ipvs.Config{Scheduler: in.Pick("", "rr", "sh"),
					NodeAddrs: []netip.Addr{netip.MustParseAddr("10.200.1.1"), netip.MustParseAddr("fd00:200:1::1"),
						netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("fe80::1")}}
			},
			// The scheduler annotation: valid, invalid (a problem, the default used) or none.
			Annotate: func(in *pt.FuzzInput, svc *v1.Service) {
				if sched := in.Pick("lc", "bogus", ""); sched != "" {
					svc.Annotations = map[string]string{ipvs.SchedulerAnnotation: sched}
				}
			},
		})
		cfg.Config = common
		for _, fam := range []model.Family{model.IPv4, model.IPv6} {
			p := ipvs.Build(snap, fam, cfg)
			if err := p.Aux.Validate(); err != nil {
				t.Fatalf("%v auxiliary table does not validate: %v\n%s", fam, err, p.Dump())
			}
			checkIPVSShape(t, p)
			// Where two service ports clash, ownership is a matter of order: not checked.
			if len(p.Conflicts) == 0 {
				pt.CheckFlows(t, snap, cfg.Config, pt.ModePlan{Mode: plan.ModeIPVS, Family: fam, Dump: p.Dump,
					Tracer: func(node string) pt.Tracer { return pt.NewIPVSTracer(t, p, node) }, NodeMeetsExternalPolicy: true})
			}
		}
	})
}

func checkIPVSShape(t *testing.T, p *ipvs.Plan) {
	t.Helper()
	for i, vs := range p.Servers {
		if i > 0 && p.Servers[i-1].VSKey.Compare(vs.VSKey) >= 0 {
			t.Fatalf("virtual servers not sorted and unique at %s\n%s", vs.VSKey, p.Dump())
		}
		if model.FamilyOf(vs.Addr) != p.Family || !ipvs.ValidScheduler(vs.Scheduler) {
			t.Fatalf("virtual server %s: family or scheduler %q wrong\n%s", vs.VSKey, vs.Scheduler, p.Dump())
		}
		if vs.Kind != ipvs.FrontendNodePort && !slices.Contains(p.VIPs, vs.Addr) {
			t.Fatalf("virtual server %s: address not on the dummy interface\n%s", vs.VSKey, p.Dump())
		}
		for j, r := range vs.Reals {
			if model.FamilyOf(r.Addr) != p.Family || r.Weight < 0 || r.Weight > 1 ||
				j > 0 && vs.Reals[j-1].AddrPort().Compare(r.AddrPort()) >= 0 {
				t.Fatalf("virtual server %s: real servers wrong: %+v\n%s", vs.VSKey, vs.Reals, p.Dump())
			}
		}
	}
}
