package nft

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
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
				_, err := k.Apply([]*plan.Table{plan.NFT(snap, model.IPv4, cfg)}, true)
				return err
			})
		})
	})
}

// BenchmarkOneEndpointChange is the sync after one endpoint of one Service changed, over a
// table holding the rest, as the daemon runs it: the tracker's snapshot, NFTPlanner (which
// re-plans the changed service port only), the diff against the last apply and the few
// messages that differ.
func BenchmarkOneEndpointChange(b *testing.B) {
	for _, size := range []struct{ services, endpoints int }{{1000, 10}, {10000, 10}} {
		b.Run(fmt.Sprintf("%dx%d", size.services, size.endpoints), func(b *testing.B) {
			tr := model.NewTracker()
			for _, o := range mt.BenchObjects(size.services, size.endpoints) {
				switch o := o.(type) {
				case *v1.Service:
					tr.UpsertService(o)
				case *discovery.EndpointSlice:
					tr.UpsertSlice(o)
				}
			}
			cfg := plan.Config{NodeName: "gw"}
			p := &plan.NFTPlanner{Family: model.IPv4}
			inNetns(b, func(string) {
				k := New()
				snap, _ := tr.Snapshot()
				if _, err := k.Apply([]*plan.Table{p.Plan(snap, cfg)}, true); err != nil {
					b.Fatal(err)
				}
				i := 0
				cpu := kerneltest.CPUTime(b)
				for b.Loop() {
					i++
					tr.UpsertSlice(mt.BenchSlice(size.services-1, size.endpoints, i%2))
					snap, _ := tr.Snapshot()
					if _, err := k.Apply([]*plan.Table{p.Plan(snap, cfg)}, false); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu, i)
			})
		})
	}
}

func reportCPU(b *testing.B, since time.Duration, ops int) {
	if ops > 0 {
		b.ReportMetric(float64(kerneltest.CPUTime(b)-since)/float64(ops)/1e6, "cpu-ms/op")
	}
}
