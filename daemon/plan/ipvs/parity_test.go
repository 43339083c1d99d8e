package ipvs_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
)

// TestScenarios runs the scenarios of every mode (plantest.RunScenarios) through IPVS
// plans with the IPVS tracer.
func TestScenarios(t *testing.T) {
	pt.RunScenarios(t, pt.Mode{Mode: plan.ModeIPVS,
		Plan: func(t *testing.T, cfg plan.Config, f model.Family, objs ...any) (pt.Tracer, func() string) {
			p := buildIPVS(t, pt.IPVSConfig(cfg), f, objs...)
			return pt.NewIPVSTracer(t, p, pt.NodeAddrs...), p.Dump
		}})
}
