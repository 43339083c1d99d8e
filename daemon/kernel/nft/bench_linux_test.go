package nft

import (
	"testing"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// BenchmarkFullSync is one full sync, planning and the transaction, at the sizes of issue
// 10: "first" into an empty namespace (a daemon's start), "again" over the table it made
// (the periodic full sync, which reads the kernel's objects first). With -cpuprofile it
// shows where edgegate's time goes; the kernel's share needs perf. peak-heap-MB is the
// largest heap seen during a sync.
func BenchmarkFullSync(b *testing.B) {
	cfg := plan.Config{NodeName: "gw"}
	kerneltest.FullSyncBenchmarks(b, [][2]int{{1000, 10}, {10000, 10}, {5000, 50}}, func(b *testing.B, snap *model.Snapshot, again bool) {
		inNetns(b, func(string) {
			k := New()
			reset := k.Cleanup
			if again {
				reset = nil
			}
			kerneltest.SyncLoop(b, reset, func() error {
				_, err := k.Apply((&nftplan.Shards{PerTable: nftplan.DefaultPerTable}).Split(nftplan.Build(snap, model.IPv4, cfg)), true)
				return err
			})
		})
	})
}

// BenchmarkOneEndpointChange is the sync after one endpoint of one Service changed, over a
// table holding the rest, as the daemon runs it: the tracker's snapshot, nftplan.Planner (which
// re-plans the changed service port only), the diff against the last apply and the few
// messages that differ.
func BenchmarkOneEndpointChange(b *testing.B) {
	kerneltest.OneChangeBenchmarks(b, [][2]int{{1000, 10}, {10000, 10}}, inNetns, func() func(*model.Snapshot, bool) error {
		k, p, cfg := New(), &nftplan.Planner{Family: model.IPv4}, plan.Config{NodeName: "gw"}
		s := &nftplan.Shards{PerTable: nftplan.DefaultPerTable} // as the daemon splits
		return func(snap *model.Snapshot, full bool) error {
			_, err := k.Apply(s.Split(p.Plan(snap, cfg)), full)
			return err
		}
	})
}
