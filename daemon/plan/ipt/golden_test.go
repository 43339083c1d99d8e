package ipt_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current plans")

// TestIPTGoldenDumps keeps testdata/*.golden: the iptables plans, in iptables-save's
// format, of golden_test.go's fixtures (same config, same families), so a layout change in
// iptables mode shows up as a readable diff beside the nftables one. -update rewrites them.
func TestIPTGoldenDumps(t *testing.T) {
	cfg := plan.Config{NodeName: "gw"}
	for name, objs := range pt.GoldenFixtures() {
		for _, f := range []model.Family{model.IPv4, model.IPv6} {
			if f == model.IPv6 && name != "web" {
				continue
			}
			file := filepath.Join("testdata", name+"-"+f.String()+".golden")
			t.Run(filepath.Base(file), func(t *testing.T) {
				got := buildIPT(t, cfg, f, objs...).Dump()
				if *update {
					if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatalf("%v (run go test ./daemon/plan/ipt -update to create it)", err)
				}
				if d := cmp.Diff(string(want), got); d != "" {
					t.Errorf("plan differs from %s (-want +got); if intended, run go test ./daemon/plan/ipt -update:\n%s", file, d)
				}
			})
		}
	}
}
