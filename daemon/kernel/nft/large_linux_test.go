package nft

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// TestLargeMapsComplete: every element of a large map reaches the kernel. A batch of
// thousands of verdict-map elements once left all but the first 255 out of service-ips,
// with Apply reporting success.
func TestLargeMapsComplete(t *testing.T) {
	const services = 1000
	var objs []any
	for i := range services {
		name := fmt.Sprintf("svc-%05d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		objs = append(objs, mt.Service("default", name, ip, mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)),
			mt.Slice("default", name+"-1", name, "http", v1.ProtocolTCP, 8080,
				mt.EP(fmt.Sprintf("10.200.%d.%d", i/250, i%250+1))))
	}
	snap := mt.Snapshot(objs...)
	inNetns(t, func(ns string) {
		k := New()
		cfg := plan.Config{NodeName: "gw"}
		if _, err := k.Apply([]*nftplan.Table{nftplan.Build(mt.Snapshot(), model.IPv4, cfg)}, true); err != nil {
			t.Fatalf("apply an empty plan: %v", err)
		}
		tables := []*nftplan.Table{nftplan.Build(snap, model.IPv4, cfg)}
		// A partial apply adds the elements to existing maps, a full one rewrites them.
		for _, full := range []bool{false, true} {
			if _, err := k.Apply(tables, full); err != nil {
				t.Fatalf("apply (full %v): %v", full, err)
			}
			for name, s := range tables[0].Sets {
				if s.Dynamic {
					continue
				}
				if len(s.Elems) < 2 {
					continue
				}
				kind := "set"
				if s.Map {
					kind = "map"
				}
				out := kerneltest.NFT(t, ns, "list", kind, "ip", nftplan.TableName, name)
				// nft prints the elements separated by commas.
				got := strings.Count(out, ",") + 1
				if got < len(s.Elems) {
					t.Errorf("%s: %d elements in the kernel (counted by commas), the plan has %d", name, got, len(s.Elems))
				}
			}
		}
	})
}
