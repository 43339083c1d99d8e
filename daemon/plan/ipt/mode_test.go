package ipt_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/ipt"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// iptMode is iptables mode as plantest's shared tests drive it: every plan must pass
// checkIPT, the proof that iptables would take it. The iptables plan has no conflict
// report; the clash the nftables plan reports is the same one.
var iptMode = pt.Mode[*ipt.Tables]{Mode: plan.ModeIPTables, Plan: ipt.Build, Check: checkIPT,
	Tracer: func(t *testing.T, p *ipt.Tables, local ...string) pt.Tracer { return pt.NewIPTTracer(t, p, local...) },
	Conflicts: func(snap *model.Snapshot, f model.Family, cfg plan.Config, _ *ipt.Tables) bool {
		return len(nft.Build(snap, f, cfg).Conflicts) > 0
	},
}

// TestScenarios runs the scenarios of every mode (plantest.RunScenarios) through iptables
// plans with the iptables tracer.
func TestScenarios(t *testing.T) { pt.RunScenarios(t, iptMode) }

// TestIPTGoldenDumps keeps testdata/*.golden: the iptables plans, in iptables-save's
// format, of plantest.GoldenFixtures (the nftables mode's config and families), so a layout
// change in iptables mode shows up as a readable diff beside the nftables one.
func TestIPTGoldenDumps(t *testing.T) {
	pt.GoldenDumps(t, pt.GoldenFixtures(), iptMode.Dumps(plan.Config{NodeName: "gw"}))
}

// TestIPTNoDataPlane: plantest.NoDataPlane.
func TestIPTNoDataPlane(t *testing.T) { pt.NoDataPlane(t, iptMode) }

// FuzzPlan plans both families of plantest's fuzz world in iptables mode and checks that
// planning never panics, that every plan passes checkIPT, that the tracer can walk it,
// and, where no two services clash, that traffic to each cluster IP and node port goes
// where Policy says.
func FuzzPlan(f *testing.F) { pt.FuzzPlan(f, iptMode, "edgegate", 7) }
