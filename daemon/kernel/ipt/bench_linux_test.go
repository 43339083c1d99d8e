package ipt

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// BenchmarkFullSync is iptables mode's full sync into an empty namespace (a daemon's
// start; "first") and over the same rules (the periodic full sync; "again"): planning both
// tables and the transaction. Besides the CPU it reports the largest heap seen during the
// sync (peak-heap-MB, sampled every millisecond), what drives the daemon's peak RSS;
// -memprofile says what allocated it.
func BenchmarkFullSync(b *testing.B) {
	cfg := plan.Config{NodeName: "gw"}
	kerneltest.FullSyncBenchmarks(b, [][2]int{{1000, 10}, {10000, 10}}, func(b *testing.B, snap *model.Snapshot, again bool) {
		inNetns(b, func(string) {
			// The daemon's planner lives as long as it: a periodic full sync reuses
			// every unchanged service port's chains.
			k, p := New(), &iptplan.Planner{Family: model.IPv4}
			apply := func() error {
				if !again {
					p = &iptplan.Planner{Family: model.IPv4}
				}
				_, err := k.Apply([]*iptplan.Tables{p.Plan(snap, cfg)}, true)
				return err
			}
			reset := k.Cleanup
			if again {
				if err := apply(); err != nil {
					b.Fatal(err)
				}
				reset = nil
			}
			kerneltest.SyncLoop(b, reset, apply)
		})
	})
}

// BenchmarkOneEndpointChange is the sync after one endpoint of one Service changed, over
// tables holding the rest, as the daemon runs it: the tracker's snapshot, iptplan.Planner (which
// re-plans the changed service port only), the diff against the last apply (chains the
// planner reused are not compared) and the chains that differ.
func BenchmarkOneEndpointChange(b *testing.B) {
	kerneltest.OneChangeBenchmarks(b, [][2]int{{1000, 10}, {10000, 10}}, inNetns, func() func(*model.Snapshot, bool) error {
		k, p, cfg := New(), &iptplan.Planner{Family: model.IPv4}, plan.Config{NodeName: "gw"}
		return func(snap *model.Snapshot, full bool) error {
			_, err := k.Apply([]*iptplan.Tables{p.Plan(snap, cfg)}, full)
			return err
		}
	})
}
