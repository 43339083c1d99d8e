package ipt

import (
	"fmt"
	"testing"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
)

// BenchmarkFullSync is iptables mode's full sync into an empty namespace (a daemon's
// start): planning both tables and the transaction. Besides the CPU it reports the
// largest heap seen during the sync (peak-heap-MB, sampled every millisecond), what
// drives the daemon's peak RSS; -memprofile says what allocated it.
func BenchmarkFullSync(b *testing.B) {
	for _, size := range []struct{ services, endpoints int }{{1000, 10}, {10000, 10}} {
		snap := mt.Snapshot(mt.BenchObjects(size.services, size.endpoints)...)
		cfg := plan.Config{NodeName: "gw"}
		b.Run(fmt.Sprintf("%dx%d", size.services, size.endpoints), func(b *testing.B) {
			inNetns(b, func(string) {
				k := New()
				kerneltest.SyncLoop(b, k.Cleanup, func() error {
					_, err := k.Apply([]*plan.IPTables{plan.IPT(snap, model.IPv4, cfg)}, true)
					return err
				})
			})
		})
	}
}
