package ipvs

import (
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/kernel/nft"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// The auxiliary tables are real nftables the kernel takes: applied full and
// incrementally through the nftables backend, read back with the stock nft, and deleted
// without touching nftables mode's table.
func TestAuxTablesInTheKernel(t *testing.T) {
	kerneltest.InNetns(t, "egaux", func(ns string) {
		cfg := ipvsplan.Config{Config: plan.Config{NodeName: "gw", ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.200.2.0/24")}},
			NodeAddrs: []netip.Addr{netip.MustParseAddr("10.200.1.1"), netip.MustParseAddr("fd00:200:1::1")}}
		plans := func(objs ...any) []*nftplan.Table {
			snap := mt.Snapshot(objs...)
			return []*nftplan.Table{ipvsplan.Build(snap, model.IPv4, cfg).Aux, ipvsplan.Build(snap, model.IPv6, cfg).Aux}
		}
		svc := web(mt.SourceRanges("10.200.1.0/24"), mt.ExternalLocal(32000))
		empty := mt.Service("default", "empty", "10.96.0.30", mt.Port("", v1.ProtocolTCP, 443, 8443, 30443), mt.Type(v1.ServiceTypeNodePort))
		aux := NewKernelAux()
		// hp's endpoint runs on this node: only a local endpoint has a hairpin chain.
		hp := mt.Service("default", "hp", "10.96.0.40", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0))
		hpEPs := mt.Slice("default", "hp-1", "hp", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.15", mt.OnNode("gw")))
		if _, err := aux.Apply(plans(svc, ready3(), webV6(), empty, hp, hpEPs), true); err != nil {
			t.Fatalf("full apply: %v", err)
		}
		out := kerneltest.NFT(t, ns, "list", "ruleset")
		for _, want := range []string{
			"table ip edgegate-ipvs", "table ip6 edgegate-ipvs",
			"type filter hook input priority filter; policy accept;",
			"ct state new ip daddr @vips jump vip-check",
			"10.96.0.30 . tcp . 443 : goto reject-chain",
			"203.0.113.10 . tcp . 80 : drop", "tcp . 30080 : drop",
			"hairpin-endpoints {\n\t\ttype ipv4_addr : verdict\n\t\telements = { 10.200.2.15 : goto hairpin-10.200.2.15 }",
			"ip saddr != 10.200.2.0/24 jump mark-for-masquerade",
			"ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports",
			"10.96.0.10 . tcp . 80 : return",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("nft list ruleset lacks %q:\n%s", want, out)
			}
		}
		if _, err := aux.Apply(plans(web(), webV4(mt.EP("10.200.2.14", mt.OnNode("gw")))), false); err != nil {
			t.Fatalf("incremental apply: %v", err)
		}
		if out := kerneltest.NFT(t, ns, "list", "ruleset"); !strings.Contains(out, "hairpin-10.200.2.14") || strings.Contains(out, "hairpin-10.200.2.15") ||
			strings.Contains(out, "10.96.0.30") {
			t.Errorf("incremental apply did not converge:\n%s", out)
		}
		// nftables mode's table must survive IPVS mode's cleanup.
		if _, err := nft.New().Apply([]*nftplan.Table{nftplan.Build(mt.Snapshot(web(), ready3()), model.IPv4, cfg.Config)}, true); err != nil {
			t.Fatal(err)
		}
		if err := aux.DeleteTables(); err != nil {
			t.Fatal(err)
		}
		out = kerneltest.NFT(t, ns, "list", "ruleset")
		if strings.Contains(out, "edgegate-ipvs") || !strings.Contains(out, "table ip edgegate {") {
			t.Errorf("after DeleteTables:\n%s", out)
		}
		if err := aux.DeleteTables(); err != nil {
			t.Errorf("DeleteTables without tables: %v", err)
		}
	})
}
