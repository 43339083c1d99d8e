package nft_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// nftMode is nftables mode as plantest's shared tests drive it: every plan must Validate.
var nftMode = pt.Mode[*nft.Table]{Mode: plan.ModeNFTables, Plan: nft.Build, Check: (*nft.Table).Validate,
	Tracer: func(t *testing.T, tab *nft.Table, local ...string) pt.Tracer {
		return pt.NewNFTTracer(t, tab, local...)
	},
	Conflicts: func(_ *model.Snapshot, _ model.Family, _ plan.Config, tab *nft.Table) bool {
		return len(tab.Conflicts) > 0
	},
}

// TestScenarios runs the scenarios of every mode (plantest.RunScenarios) through nftables
// plans with the nft tracer: nftables mode is their reference.
func TestScenarios(t *testing.T) { pt.RunScenarios(t, nftMode) }

// TestGoldenDumps keeps testdata/*.golden: the nftables plans of plantest.GoldenFixtures.
func TestGoldenDumps(t *testing.T) {
	pt.GoldenDumps(t, pt.GoldenFixtures(), nftMode.Dumps(plan.Config{NodeName: "gw"}))
}

// TestNoDataPlane: plantest.NoDataPlane.
func TestNoDataPlane(t *testing.T) { pt.NoDataPlane(t, nftMode) }

// FuzzPlan plans both families of plantest's fuzz world in nftables mode and checks that
// planning never panics, that every plan Validates, that the tracer can walk it, and,
// where no two services clash, that traffic to each cluster IP and node port goes where
// Policy says.
func FuzzPlan(f *testing.F) { pt.FuzzPlan(f, nftMode, "edgegate", 7) }
