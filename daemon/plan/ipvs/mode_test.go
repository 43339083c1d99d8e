package ipvs_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// ipvsMode is IPVS mode as plantest's scenarios drive it: the node's addresses are
// plantest.NodeAddrs, and every auxiliary table must Validate.
var ipvsMode = pt.Mode[*ipvs.Plan]{Mode: plan.ModeIPVS,
	Plan: func(snap *model.Snapshot, f model.Family, cfg plan.Config) *ipvs.Plan {
		return ipvs.Build(snap, f, pt.IPVSConfig(cfg))
	},
	Check:  func(p *ipvs.Plan) error { return p.Aux.Validate() },
	Tracer: func(t *testing.T, p *ipvs.Plan, local ...string) pt.Tracer { return pt.NewIPVSTracer(t, p, local...) },
}

// TestScenarios runs the scenarios of every mode (plantest.RunScenarios) through IPVS
// plans with the IPVS tracer.
func TestScenarios(t *testing.T) { pt.RunScenarios(t, ipvsMode) }
