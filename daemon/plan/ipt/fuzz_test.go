package ipt_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/ipt"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// FuzzPlan plans both families of plantest's fuzz world in iptables mode and checks that
// planning never panics, that every plan passes checkIPT, that the tracer can walk it,
// and, where no two services clash, that traffic to each cluster IP and node port goes
// where Policy says.
func FuzzPlan(f *testing.F) {
	pt.FuzzSeeds(f, "edgegate", 7)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, cfg, snap := pt.FuzzWorld(data, pt.FuzzMode{})
		for _, fam := range []model.Family{model.IPv4, model.IPv6} {
			p := ipt.Build(snap, fam, cfg)
			if err := checkIPT(p); err != nil {
				t.Fatalf("%v iptables plan fails checkIPT: %v\n%s", fam, err, p.Dump())
			}
			// The iptables plan has no conflict report; the clash the nftables plan
			// reports is the same one.
			conflicts := len(nft.Build(snap, fam, cfg).Conflicts) > 0
			pt.CheckFlows(t, snap, cfg, pt.ModePlan{Mode: plan.ModeIPTables, Family: fam, Conflicts: conflicts,
				Dump: p.Dump, Tracer: func(node string) pt.Tracer { return pt.NewIPTTracer(t, p, node) }})
		}
	})
}
