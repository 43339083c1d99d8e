package plan

import (
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
)

// FuzzIPVSPlan draws Services and EndpointSlices from FuzzPlan's small world, plans both
// families in IPVS mode and checks that planning never panics, that the auxiliary table
// validates, that virtual servers are unique and sorted with real servers of their own
// family, and, where no two services clash, that traffic to each cluster IP and node port
// goes where Policy says (the node's own traffic to a node port meets the external policy:
// IPVS has one virtual server for both).
func FuzzIPVSPlan(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("edgegate ipvs"))
	f.Add([]byte{3, 2, 1, 1, 0, 1, 2, 0, 1, 1, 0, 1, 2, 3, 4, 0, 1, 0, 1, 1, 1, 5, 4, 3, 2, 1, 0, 2, 2, 2, 1, 0})
	seed := make([]byte, 256)
	for i := range seed {
		seed[i] = byte(i * 11)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		in := &fuzzInput{b: data}
		cfg := IPVSConfig{Config: in.config(), Scheduler: in.pick("", "rr", "sh"),
			NodeAddrs: []netip.Addr{netip.MustParseAddr("10.200.1.1"), netip.MustParseAddr("fd00:200:1::1"),
				netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("fe80::1")}}
		tr := model.NewTracker()
		var services []*v1.Service
		for range 1 + in.n(4) {
			svc := in.service()
			// The scheduler annotation: valid, invalid (a problem, the default used) or none.
			if sched := in.pick("lc", "bogus", ""); sched != "" {
				svc.Annotations = map[string]string{SchedulerAnnotation: sched}
			}
			services = append(services, svc)
			tr.UpsertService(svc)
		}
		for i := range 1 + in.n(8) {
			tr.UpsertSlice(in.slice(i, services))
		}
		snap, _ := tr.Snapshot()
		for _, fam := range []model.Family{model.IPv4, model.IPv6} {
			p := IPVS(snap, fam, cfg)
			if err := p.Aux.Validate(); err != nil {
				t.Fatalf("%v auxiliary table does not validate: %v\n%s", fam, err, p.Dump())
			}
			checkIPVSShape(t, p)
			checkIPVSFlows(t, snap, cfg, p)
		}
	})
}

func checkIPVSShape(t *testing.T, p *IPVSPlan) {
	t.Helper()
	for i, vs := range p.Servers {
		if i > 0 && p.Servers[i-1].VSKey.Compare(vs.VSKey) >= 0 {
			t.Fatalf("virtual servers not sorted and unique at %s\n%s", vs.VSKey, p.Dump())
		}
		if model.FamilyOf(vs.Addr) != p.Family || !ValidScheduler(vs.Scheduler) {
			t.Fatalf("virtual server %s: family or scheduler %q wrong\n%s", vs.VSKey, vs.Scheduler, p.Dump())
		}
		if vs.Kind != FrontendNodePort && !slices.Contains(p.VIPs, vs.Addr) {
			t.Fatalf("virtual server %s: address not on the dummy interface\n%s", vs.VSKey, p.Dump())
		}
		for j, r := range vs.Reals {
			if model.FamilyOf(r.Addr) != p.Family || r.Weight < 0 || r.Weight > 1 ||
				j > 0 && vs.Reals[j-1].AddrPort().Compare(r.AddrPort()) >= 0 {
				t.Fatalf("virtual server %s: real servers wrong: %+v\n%s", vs.VSKey, vs.Reals, p.Dump())
			}
		}
	}
}

// checkIPVSFlows traces each service port's cluster IP and node port through the IPVS
// tracer and compares with Policy, where no conflict makes ownership a matter of order.
func checkIPVSFlows(t *testing.T, snap *model.Snapshot, cfg IPVSConfig, p *IPVSPlan) {
	t.Helper()
	if len(p.Conflicts) > 0 {
		return
	}
	clientAddr, nodeAddr := "10.200.1.2", "10.200.1.1"
	if p.Family == model.IPv6 {
		clientAddr, nodeAddr = "fd00:200:1::2", "fd00:200:1::1"
	}
	// A cluster IP that is also an external or LoadBalancer IP is filtered as one.
	outer := map[netip.AddrPort]bool{}
	for _, sp := range snap.Ports.All() {
		for _, a := range sp.ExternalIPs {
			outer[netip.AddrPortFrom(a, sp.Port)] = true
		}
		for _, ing := range sp.LoadBalancerIPs {
			outer[netip.AddrPortFrom(ing.Addr, sp.Port)] = true
		}
	}
	for _, sp := range snap.Sorted() {
		pol, ok := Policy(sp, p.Family, cfg.Config)
		if !ok || outer[netip.AddrPortFrom(pol.ClusterIP, sp.Port)] {
			continue
		}
		tr := newIPVSTracer(t, p, nodeAddr)
		internal := packet{src: netip.MustParseAddr(clientAddr), dst: pol.ClusterIP, proto: sp.Name.Protocol, dport: sp.Port}
		fromNode := internal.local()
		fromNode.src = netip.MustParseAddr(nodeAddr)
		want := expected(pol.Internal, pol.UsesLocalForInternal, &pol)
		if got, local := unmasked(tr.results(internal)), unmasked(tr.results(fromNode)); !slices.Equal(want, got) || !slices.Equal(want, local) {
			t.Fatalf("%s %v cluster IP: want %v, got %v from outside and %v from the node\n%s", sp.Name, p.Family, want, got, local, p.Dump())
		}
		if sp.NodePort == 0 || !slices.Contains(p.NodePortAddrs, netip.MustParseAddr(nodeAddr)) {
			continue
		}
		want = expected(pol.External, !pol.UsesClusterForExternal, &pol)
		np := packet{src: netip.MustParseAddr(clientAddr), dst: netip.MustParseAddr(nodeAddr), proto: sp.Name.Protocol, dport: sp.NodePort}
		self := np
		self.fromNode, self.src = true, np.dst
		if got, local := unmasked(tr.results(np)), unmasked(tr.results(self)); !slices.Equal(want, got) || !slices.Equal(want, local) {
			t.Fatalf("%s %v node port: want %v, got %v from outside and %v from the node\n%s", sp.Name, p.Family, want, got, local, p.Dump())
		}
	}
}
