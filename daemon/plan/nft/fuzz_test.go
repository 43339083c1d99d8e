package nft_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// FuzzPlan plans both families of plantest's fuzz world in nftables mode and checks that
// planning never panics, that every plan Validates, that the tracer can walk it, and,
// where no two services clash, that traffic to each cluster IP and node port goes where
// Policy says.
func FuzzPlan(f *testing.F) {
	pt.FuzzSeeds(f, "edgegate", 7)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, cfg, snap := pt.FuzzWorld(data, pt.FuzzMode{})
		for _, fam := range []model.Family{model.IPv4, model.IPv6} {
			tab := nft.Build(snap, fam, cfg)
			if err := tab.Validate(); err != nil {
				t.Fatalf("%v plan does not validate: %v\n%s", fam, err, tab.Dump())
			}
			_ = plan.UDP(snap, fam, cfg)
			pt.CheckFlows(t, snap, cfg, pt.ModePlan{Mode: plan.ModeNFTables, Family: fam, Conflicts: len(tab.Conflicts) > 0,
				Dump: tab.Dump, Tracer: func(node string) pt.Tracer { return pt.NewNFTTracer(t, tab, node) }})
		}
	})
}
