package plan

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

func BenchmarkTmpPlanAll(b *testing.B) {
	tr := model.NewTracker()
	for i := range 10000 {
		name := fmt.Sprintf("svc-%05d", i)
		tr.UpsertService(mt.Service("bench", name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
		eps := make([]discovery.Endpoint, 10)
		for j := range eps {
			n := i*10 + j
			eps[j] = mt.EP(fmt.Sprintf("10.%d.%d.%d", 64+n>>16, n>>8&255, n&255), mt.OnNode("other"))
		}
		tr.UpsertSlice(mt.Slice("bench", name+"-0", name, "http", v1.ProtocolTCP, 8080, eps...))
	}
	cfg := Config{NodeName: "gw"}
	snap, _ := tr.Snapshot()
	b.ReportAllocs()
	for b.Loop() {
		p := &NFTPlanner{Family: model.IPv4}
		p.Plan(snap, cfg)
	}
}
