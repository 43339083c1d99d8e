package plan

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgegate/edgegate/daemon/model"
)

// TestIPTGoldenDumps keeps testdata/ipt-*.golden: the iptables plans, in iptables-save's
// format, of golden_test.go's fixtures (same config, same families), so a layout change in
// iptables mode shows up as a readable diff beside the nftables one. -update rewrites them.
func TestIPTGoldenDumps(t *testing.T) {
	cfg := Config{NodeName: "gw"}
	for name, objs := range goldenFixtures() {
		for _, f := range []model.Family{model.IPv4, model.IPv6} {
			if f == model.IPv6 && name != "web" {
				continue
			}
			file := filepath.Join("testdata", "ipt-"+name+"-"+f.String()+".golden")
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
					t.Fatalf("%v (run go test ./daemon/plan -update to create it)", err)
				}
				if d := cmp.Diff(string(want), got); d != "" {
					t.Errorf("plan differs from %s (-want +got); if intended, run go test ./daemon/plan -update:\n%s", file, d)
				}
			})
		}
	}
}
