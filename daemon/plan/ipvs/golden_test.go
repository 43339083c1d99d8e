package ipvs_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// ipvsGoldenCfg is the IPVS goldens' configuration: the nftables goldens' node "gw" with the
// demo's cluster CIDRs (so the cluster-IP masquerade rule shows), its addresses (one
// link-local and the loopback ones, which never carry node ports).
func ipvsGoldenCfg() ipvs.Config {
	return ipvs.Config{
		Config: plan.Config{NodeName: "gw", ClusterCIDRs: pt.MustPrefixes("10.200.2.0/24", "fd00:200:2::/64")},
		NodeAddrs: []netip.Addr{netip.MustParseAddr("10.200.1.1"), netip.MustParseAddr("127.0.0.1"),
			netip.MustParseAddr("fd00:200:1::1"), netip.MustParseAddr("fe80::1"), netip.MustParseAddr("::1")},
	}
}

// scheduled sets a Service's SchedulerAnnotation.
func scheduled(scheduler string) func(*v1.Service) {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[ipvs.SchedulerAnnotation] = scheduler
	}
}

// ipvsGoldenFixtures are plantest.GoldenFixtures plus what only IPVS mode shows:
//
//	itp          ClusterIP 10.96.0.40:80 with internalTrafficPolicy Local; endpoints
//	             10.200.2.41 on "gw" (local) and 10.200.2.42 on backend-2
//	terminating  ClusterIP 10.96.0.50:80 -> 8080: 10.200.2.51 ready, .52 serving-terminating,
//	             .53 terminating and not serving (both weight 0, kept for their connections);
//	             ClusterIP 10.96.0.51:80 with only serving-terminating .54 (the fallback:
//	             weight 1); UDP 10.96.0.52:53 with .55 ready and .56 terminating (no
//	             graceful termination for UDP: .56 is left out)
//	scheduler    hash (10.96.0.60:80, annotation sh), bogus (10.96.0.61:80, annotation
//	             "fastest": a problem, and the default rr)
func ipvsGoldenFixtures() map[string][]any {
	fx := pt.GoldenFixtures()
	itp := mt.Service("default", "itp", "10.96.0.40", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), mt.InternalLocal())
	itpEPs := mt.Slice("default", "itp-v4", "itp", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.200.2.41", mt.OnNode("gw")), mt.EP("10.200.2.42", mt.OnNode("backend-2")))
	fx["itp"] = []any{itp, itpEPs}

	term := mt.Service("default", "term", "10.96.0.50", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0))
	termEPs := mt.Slice("default", "term-v4", "term", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.200.2.51"), mt.EP("10.200.2.52", mt.Terminating(true)), mt.EP("10.200.2.53", mt.Terminating(false)))
	fallback := mt.Service("default", "fallback", "10.96.0.51", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0))
	fallbackEPs := mt.Slice("default", "fallback-v4", "fallback", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.200.2.54", mt.Terminating(true)))
	udp := mt.Service("default", "udp", "10.96.0.52", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	udpEPs := mt.Slice("default", "udp-v4", "udp", "dns", v1.ProtocolUDP, 5353,
		mt.EP("10.200.2.55"), mt.EP("10.200.2.56", mt.Terminating(true)))
	fx["terminating"] = []any{term, termEPs, fallback, fallbackEPs, udp, udpEPs}

	hash := mt.Service("default", "hash", "10.96.0.60", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), scheduled("sh"))
	hashEPs := mt.Slice("default", "hash-v4", "hash", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.61"), mt.EP("10.200.2.62"))
	bogus := mt.Service("default", "bogus", "10.96.0.61", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0), scheduled("fastest"))
	bogusEPs := mt.Slice("default", "bogus-v4", "bogus", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.63"))
	fx["scheduler"] = []any{hash, hashEPs, bogus, bogusEPs}
	return fx
}

// buildIPVS plans one family and proves the auxiliary table is one the kernel would take.
func buildIPVS(t *testing.T, cfg ipvs.Config, f model.Family, objs ...any) *ipvs.Plan {
	t.Helper()
	p := ipvs.Build(mt.Snapshot(objs...), f, cfg)
	if err := p.Aux.Validate(); err != nil {
		t.Fatalf("Validate: %v\n%s", err, p.Dump())
	}
	return p
}

// TestIPVSGoldenDumps keeps testdata/*.golden: the IPVS plans of the fixtures above,
// in ipvsadm -Ln's format followed by the dummy interface and the auxiliary table.
func TestIPVSGoldenDumps(t *testing.T) {
	pt.GoldenDumps(t, ipvsGoldenFixtures(), func(t *testing.T, f model.Family, objs ...any) string {
		return buildIPVS(t, ipvsGoldenCfg(), f, objs...).Dump()
	})
}

// vsOf finds a virtual server of a plan by its ipvsadm spelling ("TCP 10.96.0.10:80").
func vsOf(t *testing.T, p *ipvs.Plan, key string) *ipvs.VirtualServer {
	t.Helper()
	for i := range p.Servers {
		if strings.Join(strings.Fields(p.Servers[i].VSKey.String()), " ") == key {
			return &p.Servers[i]
		}
	}
	t.Fatalf("no virtual server %s in\n%s", key, p.Dump())
	return nil
}

func realsOf(vs *ipvs.VirtualServer) []string {
	var out []string
	for _, r := range vs.Reals {
		out = append(out, r.AddrPort().String()+"/"+string(rune('0'+r.Weight)))
	}
	return out
}

func TestIPVSAffinityIsPersistence(t *testing.T) {
	p := buildIPVS(t, ipvsGoldenCfg(), model.IPv4, ipvsGoldenFixtures()["web"]...)
	for _, key := range []string{"TCP 10.96.0.10:80", "TCP 203.0.113.10:80", "TCP 10.200.1.1:30080"} {
		if vs := vsOf(t, p, key); !vs.Persistent() || vs.Timeout != 300 {
			t.Errorf("%s: persistent %v timeout %d, want persistent 300", key, vs.Persistent(), vs.Timeout)
		}
	}
	p = buildIPVS(t, ipvsGoldenCfg(), model.IPv4, ipvsGoldenFixtures()["dns"]...)
	if vs := vsOf(t, p, "UDP 10.96.0.53:53"); vs.Persistent() {
		t.Errorf("dns without affinity is persistent: %+v", vs)
	}
	// Kubernetes' default timeout when ClientIP affinity gives none.
	svc := pt.Web(func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityClientIP })
	p = buildIPVS(t, ipvsGoldenCfg(), model.IPv4, svc, pt.WebV4Ready())
	if vs := vsOf(t, p, "TCP 10.96.0.10:80"); vs.Timeout != model.DefaultAffinityTimeout {
		t.Errorf("default affinity timeout %d, want %d", vs.Timeout, model.DefaultAffinityTimeout)
	}
}

func TestIPVSTrafficPolicies(t *testing.T) {
	cfg := ipvsGoldenCfg()
	oneLocal := pt.WebV4(mt.EP("10.200.2.11", mt.OnNode("backend-1")), mt.EP("10.200.2.12", mt.OnNode("gw")),
		mt.EP("10.200.2.13", mt.OnNode("backend-3")))
	p := buildIPVS(t, cfg, model.IPv4, pt.Web(mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalLocal(32000), mt.ExternalIPs("192.0.2.7")), oneLocal)
	every := []string{pt.Ep1 + "/1", pt.Ep2 + "/1", pt.Ep3 + "/1"}
	for key, want := range map[string][]string{
		"TCP 10.96.0.10:80":    every,
		"TCP 203.0.113.10:80":  {pt.Ep2 + "/1"},
		"TCP 192.0.2.7:80":     {pt.Ep2 + "/1"},
		"TCP 10.200.1.1:30080": {pt.Ep2 + "/1"},
	} {
		if got := realsOf(vsOf(t, p, key)); !cmp.Equal(want, got) {
			t.Errorf("eTP Local %s: real servers %v, want %v", key, got, want)
		}
	}
	p = buildIPVS(t, cfg, model.IPv4, pt.Web(mt.InternalLocal(), mt.LoadBalancerIPs("203.0.113.10")), oneLocal)
	for key, want := range map[string][]string{
		"TCP 10.96.0.10:80":   {pt.Ep2 + "/1"},
		"TCP 203.0.113.10:80": every,
	} {
		if got := realsOf(vsOf(t, p, key)); !cmp.Equal(want, got) {
			t.Errorf("iTP Local %s: real servers %v, want %v", key, got, want)
		}
	}
	// eTP Local with no local endpoint: the external virtual servers exist (a VIP must
	// answer on its port) without real servers, and the auxiliary table drops.
	p = buildIPVS(t, cfg, model.IPv4, pt.Web(mt.LoadBalancerIPs("203.0.113.10"), mt.ExternalLocal(32000)), pt.WebV4Ready())
	if got := realsOf(vsOf(t, p, "TCP 203.0.113.10:80")); got != nil {
		t.Errorf("eTP Local without local endpoints: real servers %v", got)
	}
	if d := p.Aux.Dump(); !strings.Contains(d, "element 203.0.113.10 . tcp . 80 : drop") || !strings.Contains(d, "element tcp . 30080 : drop") {
		t.Errorf("no drop for eTP Local without local endpoints:\n%s", d)
	}
}

func TestIPVSTerminatingEndpoints(t *testing.T) {
	p := buildIPVS(t, ipvsGoldenCfg(), model.IPv4, ipvsGoldenFixtures()["terminating"]...)
	for key, want := range map[string][]string{
		// Ready first; the terminating ones drain at weight 0.
		"TCP 10.96.0.50:80": {"10.200.2.51:8080/1", "10.200.2.52:8080/0", "10.200.2.53:8080/0"},
		// Nothing ready: serving-terminating endpoints take new connections.
		"TCP 10.96.0.51:80": {"10.200.2.54:8080/1"},
		// UDP has no graceful termination.
		"UDP 10.96.0.52:53": {"10.200.2.55:5353/1"},
	} {
		if got := realsOf(vsOf(t, p, key)); !cmp.Equal(want, got) {
			t.Errorf("%s: real servers %v, want %v", key, got, want)
		}
	}
	// Local scope keeps only local terminating endpoints.
	svc := pt.Web(mt.InternalLocal())
	eps := pt.WebV4(mt.EP("10.200.2.11", mt.OnNode("gw")), mt.EP("10.200.2.12", mt.OnNode("gw"), mt.Terminating(false)),
		mt.EP("10.200.2.13", mt.OnNode("backend-3"), mt.Terminating(false)))
	p = buildIPVS(t, ipvsGoldenCfg(), model.IPv4, svc, eps)
	if got, want := realsOf(vsOf(t, p, "TCP 10.96.0.10:80")), []string{pt.Ep1 + "/1", pt.Ep2 + "/0"}; !cmp.Equal(want, got) {
		t.Errorf("iTP Local terminating: %v, want %v", got, want)
	}
}

func TestIPVSSchedulers(t *testing.T) {
	cfg := ipvsGoldenCfg()
	cfg.Scheduler = "wlc"
	p := buildIPVS(t, cfg, model.IPv4, ipvsGoldenFixtures()["scheduler"]...)
	if s := vsOf(t, p, "TCP 10.96.0.60:80").Scheduler; s != "sh" {
		t.Errorf("annotated scheduler: %s, want sh", s)
	}
	if s := vsOf(t, p, "TCP 10.96.0.61:80").Scheduler; s != "wlc" {
		t.Errorf("invalid annotation: scheduler %s, want the default wlc", s)
	}
	if len(p.Problems) != 1 || !strings.Contains(p.Problems[0], "default/bogus") ||
		!strings.Contains(p.Problems[0], ipvs.SchedulerAnnotation) || !strings.Contains(p.Problems[0], `"fastest"`) {
		t.Errorf("problems %q: want one naming the service, the annotation and the value", p.Problems)
	}
	if got, want := p.Schedulers(), []string{"sh", "wlc"}; !cmp.Equal(want, got) {
		t.Errorf("Schedulers() = %v, want %v", got, want)
	}
	for _, s := range ipvs.Schedulers {
		if !ipvs.ValidScheduler(s) {
			t.Errorf("ValidScheduler(%q) = false", s)
		}
	}
	if ipvs.ValidScheduler("") || ipvs.ValidScheduler("RR") || ipvs.ValidScheduler("fo") {
		t.Error("ValidScheduler accepts a non-scheduler")
	}
}

func TestIPVSNodePortAddresses(t *testing.T) {
	cfg := ipvsGoldenCfg()
	cfg.NodeAddrs = append(cfg.NodeAddrs, netip.MustParseAddr("10.200.2.1"), netip.MustParseAddr("::ffff:10.200.3.1"))
	p := buildIPVS(t, cfg, model.IPv4, pt.Web(pt.NodePort), pt.WebV4Ready())
	if got, want := p.NodePortAddrs, []netip.Addr{netip.MustParseAddr("10.200.1.1"), netip.MustParseAddr("10.200.2.1"),
		netip.MustParseAddr("10.200.3.1")}; !cmp.Equal(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
		t.Errorf("default node-port addresses %v, want %v (no loopback)", got, want)
	}
	cfg.NodePortAddresses = pt.MustPrefixes("10.200.2.0/24", "127.0.0.0/8", "fd00:200:1::/64")
	p = buildIPVS(t, cfg, model.IPv4, pt.Web(pt.NodePort), pt.WebV4Ready())
	if len(p.NodePortAddrs) != 1 || p.NodePortAddrs[0] != netip.MustParseAddr("10.200.2.1") {
		t.Errorf("--nodeport-addresses 10.200.2.0/24: %v, want only 10.200.2.1 (loopback never)", p.NodePortAddrs)
	}
	p6 := buildIPVS(t, cfg, model.IPv6, pt.Web(pt.NodePort, mt.DualStack("fd00:96::10")), pt.WebV4Ready())
	if len(p6.NodePortAddrs) != 1 || p6.NodePortAddrs[0] != netip.MustParseAddr("fd00:200:1::1") {
		t.Errorf("IPv6 node-port addresses %v, want fd00:200:1::1 (no link-local)", p6.NodePortAddrs)
	}
	for _, vs := range p.Servers {
		if vs.Kind == ipvs.FrontendNodePort && vs.Addr != netip.MustParseAddr("10.200.2.1") {
			t.Errorf("node-port virtual server on %s", vs.VSKey)
		}
	}
}

func TestIPVSVIPsAndConflicts(t *testing.T) {
	cfg := ipvsGoldenCfg()
	svc := func(name string) *v1.Service {
		return mt.Service("default", name, "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
			mt.LoadBalancerIPs("203.0.113.10"), mt.ProxyModeIngress("203.0.113.11"), mt.ExternalIPs("10.200.1.1"))
	}
	alpha := mt.Slice("default", "alpha-1", "alpha", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"))
	p := buildIPVS(t, cfg, model.IPv4, svc("alpha"), alpha, svc("beta"))
	if got := len(p.Conflicts); got != 4 {
		t.Errorf("%d conflicts, want 4 (cluster IP, LoadBalancer IP, external IP, node port):\n%s", got, strings.Join(p.Conflicts, "\n"))
	}
	for _, vs := range p.Servers {
		if vs.Service.Name != "alpha" {
			t.Errorf("%s went to %s, want alpha (first in sorted order)", vs.VSKey, vs.Service)
		}
	}
	want := []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("10.200.1.1"), netip.MustParseAddr("203.0.113.10")}
	if !cmp.Equal(want, p.VIPs, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
		t.Errorf("VIPs %v, want %v (no ipMode Proxy address)", p.VIPs, want)
	}
	// The node's own address is on the dummy interface but never in the vips set, whose
	// port filter would close the node's other ports.
	for _, e := range p.Aux.Sets[ipvs.SetVIPs].Elems {
		if e.Key.Addr == netip.MustParseAddr("10.200.1.1") {
			t.Errorf("node address in the %s set:\n%s", ipvs.SetVIPs, p.Aux.Dump())
		}
	}
	if d := p.Dump(); strings.Contains(d, "203.0.113.11") {
		t.Errorf("ipMode Proxy address in the plan:\n%s", d)
	}
}
