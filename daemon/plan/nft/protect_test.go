package nft_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

func protected(protection string, mods ...func(*v1.Service)) *v1.Service {
	return pt.Web(append([]func(*v1.Service){mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalIPs("192.0.2.7"),
		mt.Annotate(model.ProtectionAnnotation, protection)}, mods...)...)
}

// A SYN-proxied Service: the handshake to its LoadBalancer IP, external IP and node port
// is the synproxy's (the SYN untracked, the ACK without a conntrack entry not DNATed on
// its way), and the connection the synproxy then opens from the node reaches an endpoint.
// Its ClusterIP, and every other Service, are untouched.
func TestFlowSynProxy(t *testing.T) {
	dns := mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0), mt.LoadBalancerIPs("203.0.113.53"))
	dnsEPs := mt.Slice("default", "dns-v4", "dns", "dns", v1.ProtocolUDP, 5353, mt.EP("10.200.2.11"))
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, protected("{synProxy: true}"), pt.WebV4Ready(), dns, dnsEPs)
	every := pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))
	runFlows(t, tab, []flow{
		{"SYN to the LoadBalancer IP", pt.Pkt(pt.Client, "203.0.113.10", 80), pt.All(pt.SynProxied)},
		{"its ACK", pt.Pkt(pt.Client, "203.0.113.10", 80).NotSyn(), pt.All(pt.SynProxied)},
		{"SYN to the external IP", pt.Pkt(pt.Client, "192.0.2.7", 80), pt.All(pt.SynProxied)},
		{"SYN to the node port", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(pt.SynProxied)},
		{"ACK to the node port", pt.Pkt(pt.Client, "10.200.1.1", 30080).NotSyn(), pt.All(pt.SynProxied)},
		{"the synproxy's SYN to the LoadBalancer IP", pt.Pkt(pt.Client, "203.0.113.10", 80).Local(), every},
		{"the synproxy's SYN to the node port", pt.Pkt(pt.Client, "10.200.1.1", 30080).Local(), every},
		{"the ClusterIP is not proxied", pt.Pkt(pt.Client, "10.96.0.10", 80), pt.All(pt.Ep1, pt.Ep2, pt.Ep3)},
		{"another port is not proxied", pt.Pkt(pt.Client, "203.0.113.10", 81), pt.All(pt.Accept)},
		{"UDP to an unprotected Service", pt.Pkt(pt.Client, "203.0.113.53", 53).UDP(), pt.All(pt.Masq("10.200.2.11:5353"))},
	})
}

// Source ranges still hold in front of the synproxy: a stranger's SYN is dropped before
// any cookie answers it.
func TestFlowSynProxyKeepsSourceRanges(t *testing.T) {
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, protected("{synProxy: true}", mt.SourceRanges("10.200.1.0/24")), pt.WebV4Ready())
	runFlows(t, tab, []flow{
		{"allowed source", pt.Pkt(pt.Client, "203.0.113.10", 80), pt.All(pt.SynProxied)},
		{"other source", pt.Pkt(pt.Stranger, "203.0.113.10", 80), pt.All(pt.Drop)},
	})
}

// Without endpoints a protected frontend refuses at once, as any: nothing is proxied.
func TestFlowProtectionWithoutEndpoints(t *testing.T) {
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, protected("{synProxy: true, maxConnsPerSource: 4}"))
	runFlows(t, tab, []flow{
		{"LoadBalancer IP", pt.Pkt(pt.Client, "203.0.113.10", 80), pt.All(pt.Reject)},
		{"node port", pt.Pkt(pt.Client, "10.200.1.1", 30080), pt.All(pt.Reject)},
	})
}

// Per-source limits sit on the new connection's path; under them it goes on as before.
func TestFlowSourceLimits(t *testing.T) {
	tab := nftMode.Build(t, pt.Cfg, model.IPv4, protected("{maxConnsPerSource: 64, newConnsPerSecond: 20}"), pt.WebV4Ready())
	every := pt.All(pt.Masq(pt.Ep1), pt.Masq(pt.Ep2), pt.Masq(pt.Ep3))
	runFlows(t, tab, []flow{
		{"LoadBalancer IP", pt.Pkt(pt.Client, "203.0.113.10", 80), every},
		{"node port", pt.Pkt(pt.Client, "10.200.1.1", 30080), every},
	})
	d := tab.Dump()
	for _, want := range []string{
		"update @rate-", "limit rate over 20/second burst 20 packets", "ct count over 64",
		"element 203.0.113.10 . tcp . 80 : jump protect-", "element tcp . 30080 : jump protect-",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("plan lacks %q:\n%s", want, d)
		}
	}
	if strings.Contains(d, "synproxy") {
		t.Errorf("a plan without synProxy proxies:\n%s", d)
	}
}

// A table with no protected port has none of the protection's chains: its packets pay
// nothing for the feature.
func TestNoProtectionNoChains(t *testing.T) {
	d := nftMode.Build(t, pt.Cfg, model.IPv4, pt.Web(mt.LoadBalancerIPs("203.0.113.10")), pt.WebV4Ready()).Dump()
	for _, name := range []string{nft.ChainRawPrerouting, nft.ChainSynProxyInput, nft.ChainProtectCheck, nft.MapProtectedIPs} {
		if strings.Contains(d, name) {
			t.Errorf("unprotected plan has %s:\n%s", name, d)
		}
	}
}

// The planner adds the protection's base chains when the first port asks for protection
// and drops them with the last, and plans as Build does throughout.
func TestPlannerProtectionComesAndGoes(t *testing.T) {
	p := nft.New(model.IPv4)
	steps := [][]any{
		{pt.Web(mt.LoadBalancerIPs("203.0.113.10")), pt.WebV4Ready()},
		{protected("{synProxy: true}"), pt.WebV4Ready()},
		{protected("{synProxy: true, newConnsPerSecond: 5}"), pt.WebV4Ready()},
		{pt.Web(mt.LoadBalancerIPs("203.0.113.10")), pt.WebV4Ready()},
	}
	tr := model.NewTracker()
	for i, objs := range steps {
		for _, o := range objs {
			mt.Upsert(tr, o)
		}
		snap, _ := tr.Snapshot()
		got := p.Plan(snap, pt.Cfg).Dump()
		want := nft.Build(snap, model.IPv4, pt.Cfg).Dump()
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("step %d: planner differs from Build (-want +got):\n%s", i, d)
		}
		if has := strings.Contains(got, nft.ChainProtectCheck); has != (i == 1 || i == 2) {
			t.Errorf("step %d: protect-check present %v", i, has)
		}
	}
}

// TestGoldenProtected keeps testdata/protected-*.golden: a dual-stack LoadBalancer Service
// with every protection.
func TestGoldenProtected(t *testing.T) {
	svc := protected("{synProxy: true, synProxyMSS: 1400, maxConnsPerSource: 64, newConnsPerSecond: 20, newConnsBurst: 40}",
		mt.DualStack("fd00:96::10"), mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"), mt.SourceRanges("10.200.1.0/24", "fd00:200:1::/64"))
	v6eps := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080, mt.EP("fd00:200:2::11"))
	pt.GoldenDumps(t, map[string][]any{"protected": {svc, pt.WebV4Ready(), v6eps}}, nftMode.Dumps(plan.Config{NodeName: "gw"}))
}

// Split over shard tables, a protected cluster keeps the protection's chains, maps and
// sets with the filter hooks in the main table, and every table refers only to what it
// holds.
func TestProtectionSurvivesTheSplit(t *testing.T) {
	objs := []any{protected("{synProxy: true, maxConnsPerSource: 8, newConnsPerSecond: 4}"), pt.WebV4Ready()}
	for i := range 40 {
		name := fmt.Sprintf("svc-%02d", i)
		objs = append(objs, mt.Service("default", name, fmt.Sprintf("10.96.1.%d", i+1), mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)),
			mt.Slice("default", name+"-1", name, "http", v1.ProtocolTCP, 8080, mt.EP(fmt.Sprintf("10.200.3.%d", i+1)), mt.EP(fmt.Sprintf("10.200.4.%d", i+1))))
	}
	snap := mt.Snapshot(objs...)
	s := &nft.Shards{PerTable: 8}
	tables := s.Split(nft.Build(snap, model.IPv4, pt.Cfg))
	if len(tables) < 3 {
		t.Fatalf("split into %d tables, want a main table and shards", len(tables))
	}
	main := tables[0]
	for _, name := range []string{nft.ChainRawPrerouting, nft.ChainNATSynProxy, nft.ChainSynProxyInput, nft.ChainProtectCheck} {
		if main.Chains[name] == nil {
			t.Errorf("the main table lacks %s", name)
		}
	}
	for _, name := range []string{nft.MapSynProxyIPs, nft.MapProtectedIPs, nft.SetSynProxiedIPs} {
		if set := main.Sets[name]; set == nil || len(set.Elems) == 0 {
			t.Errorf("the main table's %s: %+v", name, set)
		}
	}
	for _, tab := range tables {
		if err := tab.Validate(); err != nil {
			t.Errorf("table %s: %v", tab.Name, err)
		}
	}
}
