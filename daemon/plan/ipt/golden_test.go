package ipt_test

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
)

// TestIPTGoldenDumps keeps testdata/*.golden: the iptables plans, in iptables-save's
// format, of plantest.GoldenFixtures (the nftables mode's config and families), so a layout
// change in iptables mode shows up as a readable diff beside the nftables one.
func TestIPTGoldenDumps(t *testing.T) {
	cfg := plan.Config{NodeName: "gw"}
	pt.GoldenDumps(t, pt.GoldenFixtures(), func(t *testing.T, f model.Family, objs ...any) string {
		return buildIPT(t, cfg, f, objs...).Dump()
	})
}
