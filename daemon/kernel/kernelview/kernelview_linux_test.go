package kernelview

import (
	"maps"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/kernel/nft"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// TestReadBackProgrammedTable programs the nftables mode's table in a throwaway namespace
// and reads its counters, links and conntrack table back the way the dashboard does.
func TestReadBackProgrammedTable(t *testing.T) {
	kerneltest.NeedRoot(t)
	kerneltest.InNetns(t, "egdash", func(string) {
		snap := mt.Snapshot(
			mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)),
			mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.0.1.1"), mt.EP("10.0.1.2"), mt.EP("10.0.1.3")))
		// The dispatch split over tables (one endpoint a table): the counters are read from
		// all of them, and the connection below is DNATed by a shard's chains.
		table := nftplan.Build(snap, model.IPv4, plan.Config{NodeName: "gw"})
		tables := (&nftplan.Shards{PerTable: 1}).Split(table)
		if len(tables) < 3 {
			t.Fatalf("split into %d tables, want the main table and shards", len(tables))
		}
		if _, err := nft.New().Apply(tables, true); err != nil {
			t.Fatal(err)
		}
		k := Kernel{}
		n, err := k.Network()
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Links) != 1 || n.Links[0].Name != "lo" {
			t.Errorf("links of a fresh namespace: %+v, want lo only", n.Links)
		}
		if lines, err := k.Conntrack(model.IPv4); err != nil || len(lines) != 0 {
			t.Errorf("conntrack of a fresh namespace: %q %v, want no entries and no error", lines, err)
		}
		// One connection attempt to the ClusterIP: the nat output chain counts its first
		// packet in the service's counter and in the counter of the endpoint it picked.
		if out, err := exec.Command("sh", "-c", "ip link set lo up && ip route add 10.0.0.0/8 dev lo").CombinedOutput(); err != nil {
			t.Fatalf("ip route: %v: %s", err, out)
		}
		if conn, err := net.DialTimeout("tcp", "10.96.0.10:80", 100*time.Millisecond); err == nil {
			conn.Close()
		}
		got, err := k.Counters(model.IPv4, nftplan.ModeTable, allChains)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, c := range table.Chains {
			for _, r := range c.Rules {
				if name, ok := r.Comment(); ok {
					want = append(want, name)
				}
			}
		}
		if slices.Sort(want); !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
			t.Errorf("counters read back %v, want the plan's %v", slices.Sorted(maps.Keys(got)), want)
		}
		svc, picked := got["service-"+nftplan.ChainBase(snap.Sorted()[0].Name)], 0
		for name, c := range got {
			if strings.HasPrefix(name, "endpoint-") && c.Packets > 0 {
				picked++
			}
		}
		if svc.Packets == 0 || svc.Bytes == 0 || picked != 1 {
			t.Errorf("after one connection: service counter %+v, %d endpoint counters counted; want the service's and one endpoint's (%v)", svc, picked, got)
		}
		if none, err := k.Counters(model.IPv6, nftplan.ModeTable, allChains); err != nil || len(none) != 0 {
			t.Errorf("a family without the table: %v %v, want no counters and no error", none, err)
		}
		tr, err := (&NFTTraffic{Counters: k, Families: []model.Family{model.IPv4, model.IPv6}}).Traffic(snap)
		if err != nil || len(tr["default/web:http"].Backends) != 3 {
			t.Errorf("traffic %+v %v, want default/web:http with its 3 backends", tr, err)
		}

	})
}

func allChains(string) bool { return true }
