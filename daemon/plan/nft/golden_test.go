package nft_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
)

// TestGoldenDumps keeps testdata/*.golden: the nftables plans of plantest.GoldenFixtures.
func TestGoldenDumps(t *testing.T) {
	cfg := plan.Config{NodeName: "gw"}
	pt.GoldenDumps(t, pt.GoldenFixtures(), func(t *testing.T, f model.Family, objs ...any) string {
		return build(t, cfg, f, objs...).Dump()
	})
}
