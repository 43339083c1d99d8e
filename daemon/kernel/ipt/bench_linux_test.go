package ipt

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
)

// benchSnapshot is services ClusterIP Services of endpoints endpoints each, every endpoint
// on another node: the shape make bench creates in the apiserver.
func benchSnapshot(services, endpoints int) *model.Snapshot {
	objs := make([]any, 0, 2*services)
	for i := range services {
		name := fmt.Sprintf("svc-%05d", i)
		eps := make([]discovery.Endpoint, endpoints)
		for j := range eps {
			n := i*endpoints + j
			eps[j] = mt.EP(fmt.Sprintf("10.%d.%d.%d", 64+n>>16, n>>8&255, n&255), mt.OnNode("other"))
		}
		objs = append(objs, mt.Service("bench", name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)),
			mt.Slice("bench", name+"-0", name, "http", v1.ProtocolTCP, 8080, eps...))
	}
	return mt.Snapshot(objs...)
}

// BenchmarkFullSync is iptables mode's full sync into an empty namespace (a daemon's
// start): planning both tables and the transaction. Besides the CPU it reports the
// largest heap seen during the sync (peak-heap-MB, sampled every millisecond), what
// drives the daemon's peak RSS; -memprofile says what allocated it.
func BenchmarkFullSync(b *testing.B) {
	for _, size := range []struct{ services, endpoints int }{{1000, 10}, {10000, 10}} {
		snap := benchSnapshot(size.services, size.endpoints)
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
