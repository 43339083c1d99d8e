package kernelview

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
	"github.com/edgegate/edgegate/daemon/view"
)

type fakeCounters map[model.Family]map[string]view.BackendTraffic

func (f fakeCounters) Counters(fam model.Family, tables, _ func(string) bool) (map[string]view.BackendTraffic, error) {
	if !tables(nftplan.TableName) {
		return nil, nil
	}
	return f[fam], nil
}

func TestNFTTrafficByPlanNames(t *testing.T) {
	snap := mt.Snapshot(
		mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), mt.DualStack("fd00:96::10")),
		mt.Slice("default", "web-4", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.0.1.1"), mt.EP("10.0.1.2")),
		mt.Slice("default", "web-6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:1::1")))
	sp := snap.Sorted()[0]
	svc := "service-" + nftplan.ChainBase(sp.Name)
	ep := func(i int) string { return nftplan.EndpointChain(sp.Name, sp.Endpoints[i]) }
	c := fakeCounters{
		model.IPv4: {svc: {Packets: 5, Bytes: 300}, ep(0): {Packets: 3, Bytes: 180}, ep(1): {Packets: 2, Bytes: 120}, "unrelated": {Packets: 99}},
		model.IPv6: {svc: {Packets: 1, Bytes: 80}, ep(2): {Packets: 1, Bytes: 80}},
	}
	tr := &NFTTraffic{Counters: c, Families: []model.Family{model.IPv4, model.IPv6}}
	got, err := tr.Traffic(snap)
	if err != nil {
		t.Fatal(err)
	}
	web := got["default/web:http"]
	if web.Packets != 6 || web.Bytes != 380 || len(web.Backends) != 3 ||
		web.Backends["10.0.1.1:8080"].Packets != 3 || web.Backends["10.0.1.2:8080"].Packets != 2 || web.Backends["[fd00:1::1]:8080"].Packets != 1 {
		t.Errorf("traffic %+v, want both families summed per service and split per backend", got)
	}

	// A full sync recreated the IPv4 table: its counters restart; the totals go on.
	c[model.IPv4] = map[string]view.BackendTraffic{svc: {Packets: 1, Bytes: 60}, ep(0): {Packets: 1, Bytes: 60}, ep(1): {}}
	got, err = tr.Traffic(snap)
	if err != nil {
		t.Fatal(err)
	}
	web = got["default/web:http"]
	if web.Packets != 7 || web.Bytes != 440 || web.Backends["10.0.1.1:8080"].Packets != 4 || web.Backends["10.0.1.2:8080"].Packets != 2 {
		t.Errorf("after a counter restart: %+v, want the counts carried over (7 packets, backend 1 at 4)", web)
	}
}
