package nft_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
)

// TestScenarios runs the scenarios of every mode (plantest.RunScenarios) through nftables
// plans with the nft tracer: nftables mode is their reference.
func TestScenarios(t *testing.T) {
	pt.RunScenarios(t, pt.Mode{Mode: plan.ModeNFTables,
		Plan: func(t *testing.T, cfg plan.Config, f model.Family, objs ...any) (pt.Tracer, func() string) {
			tab := build(t, cfg, f, objs...)
			return pt.NewNFTTracer(t, tab, pt.NodeAddrs...), tab.Dump
		}})
}
