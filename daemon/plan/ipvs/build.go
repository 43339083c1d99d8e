package ipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// Priority of the auxiliary table's input filter: IPVS takes packets at LOCAL_IN priority
// 98/99 (NF_IP_PRI_NAT_SRC - 2/1) and the node's own at LOCAL_OUT -98, so these checks run
// before IPVS schedules a connection. The output filter uses nft.PrioFilterPreDNAT (-110).
const prioInput = 0

// Build builds IPVS mode's plan of one family from a Snapshot: a virtual server per
// (address, protocol, port) of every cluster IP, external IP, ipMode VIP LoadBalancer IP
// and node port on each node-port address, with the real servers the service's policy
// allows, and the auxiliary nftables rules IPVS itself cannot express (masquerade, source
// ranges, refusals, the ports a VIP answers on).
func Build(snap *model.Snapshot, f model.Family, cfg Config) *Plan {
	p := &Plan{
		Family:        f,
		NodePortAddrs: nodePortAddrs(cfg, f),
		Aux:           &nft.Table{Family: f, Name: TableName, Chains: map[string]*nft.Chain{}, Sets: map[string]*nft.Set{}},
	}
	b := &builder{plan: p, cfg: cfg, t: p.Aux, owners: map[VSKey]model.ServicePortName{},
		nodePorts: map[nodePortKey]model.ServicePortName{}, vips: map[netip.Addr]bool{}, hairpin: map[netip.Addr]bool{},
		sched: map[model.ServiceName]string{}}
	b.base()
	for _, sp := range snap.Sorted() {
		if pol, ok := plan.Policy(sp, f, cfg.Config); ok {
			b.servicePort(&pol)
		}
	}
	b.finish()
	return p
}

// Planner plans one family as Build does. IPVS planning keeps nothing between plans; the
// planner gives IPVS mode the shape of the other modes' planners (New, then Plan).
type Planner struct {
	Family model.Family
}

// New returns a planner for family f.
func New(f model.Family) *Planner { return &Planner{Family: f} }

// Plan returns the plan for snap: Build(snap, p.Family, cfg).
func (p *Planner) Plan(snap *model.Snapshot, cfg Config) *Plan { return Build(snap, p.Family, cfg) }

type nodePortKey struct {
	proto model.Protocol
	port  uint16
}

type builder struct {
	plan      *Plan
	cfg       Config
	t         *nft.Table
	owners    map[VSKey]model.ServicePortName
	nodePorts map[nodePortKey]model.ServicePortName
	vips      map[netip.Addr]bool
	hairpin   map[netip.Addr]bool
	sched     map[model.ServiceName]string
}

// nodePortAddrs picks the node-port addresses of a family: the node's addresses inside
// --nodeport-addresses, or all of them by default. Loopback and link-local addresses never
// qualify: IPVS cannot forward from them to a real server elsewhere.
func nodePortAddrs(cfg Config, f model.Family) []netip.Addr {
	prefixes := plan.FamilyPrefixes(cfg.NodePortAddresses, f)
	var out []netip.Addr
	for _, a := range cfg.NodeAddrs {
		a = a.Unmap()
		if model.FamilyOf(a) != f || a.IsLoopback() || a.IsLinkLocalUnicast() || a.Zone() != "" {
			continue
		}
		if len(prefixes) == 0 || slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// base adds the fixed part of the auxiliary table.
func (b *builder) base() {
	t, mark := b.t, b.cfg.MasqueradeMark()
	t.AddSet(SetVIPs, nft.KeyAddr, false)
	t.AddSet(SetNodePortIPs, nft.KeyAddr, false)
	t.AddSet(MapVIPPorts, nft.KeyAddrProtoPort, true)
	t.AddDispatchMaps()
	t.AddSet(MapHairpin, nft.KeyAddr, true)

	// New connections meet source ranges, refusals and the VIP port filter before IPVS
	// schedules them; traffic to a VIP arrives on input (the VIP is local), the node's own
	// on output.
	checks := []nft.Rule{
		{nft.CtStateNew{}, nft.Jump(nft.ChainFirewallCheck)},
		{nft.CtStateNew{}, nft.Jump(nft.ChainSvcEndpointsChk)},
		{nft.CtStateNew{}, nft.Jump(nft.ChainNPEndpointsChk)},
		{nft.CtStateNew{}, nft.MatchAddrSet{Set: SetVIPs}, nft.Jump(ChainVIPCheck)},
	}
	t.AddChain("filter-input", &nft.Hook{Type: "filter", Hook: "input", Priority: prioInput}, checks...)
	t.AddChain("filter-output", &nft.Hook{Type: "filter", Hook: "output", Priority: nft.PrioFilterPreDNAT}, checks...)
	t.AddChain("nat-prerouting", &nft.Hook{Type: "nat", Hook: "prerouting", Priority: nft.PrioDstNAT}, nft.Rule{nft.Jump(nft.ChainServices)})
	t.AddChain("nat-output", &nft.Hook{Type: "nat", Hook: "output", Priority: nft.PrioDstNAT}, nft.Rule{nft.Jump(nft.ChainServices)})
	t.AddChain("nat-postrouting", &nft.Hook{Type: "nat", Hook: "postrouting", Priority: nft.PrioSrcNAT}, nft.Rule{nft.Jump(ChainHairpin)}, nft.Rule{nft.Jump(nft.ChainMasquerading)})

	t.AddChain(nft.ChainFirewallCheck, nil, nft.Rule{nft.VMap{Key: nft.KeyAddrProtoPort, Map: nft.MapFirewallIPs}})
	t.AddChain(nft.ChainSvcEndpointsChk, nil, nft.Rule{nft.VMap{Key: nft.KeyAddrProtoPort, Map: nft.MapNoEndpointSvcs}})
	t.AddChain(nft.ChainNPEndpointsChk, nil, nft.Rule{nft.MatchAddrSet{Set: SetNodePortIPs}, nft.VMap{Key: nft.KeyProtoPort, Map: nft.MapNoEndpointNodePts}})
	// A VIP is an address of the node: without this, its other ports would reach the
	// node's own sockets (kube-proxy's KUBE-IPVS-FILTER).
	t.AddChain(ChainVIPCheck, nil, nft.Rule{nft.VMap{Key: nft.KeyAddrProtoPort, Map: MapVIPPorts}}, nft.Rule{nft.Goto(nft.ChainReject)})
	t.AddChain(nft.ChainReject, nil, nft.Rule{nft.RejectStmt{TCPReset: true}}, nft.Rule{nft.RejectStmt{}})
	t.AddChain(nft.ChainServices, nil,
		nft.Rule{nft.VMap{Key: nft.KeyAddrProtoPort, Map: nft.MapServiceIPs}},
		nft.Rule{nft.MatchAddrSet{Set: SetNodePortIPs}, nft.VMap{Key: nft.KeyProtoPort, Map: nft.MapServiceNodePorts}})

	// The node's own connection to a VIP leaves from the VIP itself (the kernel picks the
	// destination as source for a local route); an endpoint elsewhere would answer a VIP
	// of its own node, so such traffic is always masqueraded.
	fromVIP := nft.Rule{nft.MatchAddrSet{Source: true, Set: SetVIPs}, nft.Jump(nft.ChainMarkMasq)}
	cip := t.AddChain(ChainClusterIPMasq, nil, fromVIP)
	if b.cfg.MasqueradeAll {
		cip.Rules = append(cip.Rules, nft.Rule{nft.Jump(nft.ChainMarkMasq)})
	} else {
		for _, cidr := range plan.FamilyPrefixes(b.cfg.ClusterCIDRs, b.plan.Family) {
			cip.Rules = append(cip.Rules, nft.Rule{nft.MatchAddr{Source: true, Not: true, Prefix: cidr}, nft.Jump(nft.ChainMarkMasq)})
		}
	}
	t.AddChain(ChainExternalLocal, nil, fromVIP)
	t.AddChain(ChainHairpin, nil, nft.Rule{nft.VMap{Key: nft.KeyAddr, Map: MapHairpin}})
	t.AddChain(nft.ChainMarkMasq, nil, nft.Rule{nft.SetMark{Bit: mark}})
	t.AddChain(nft.ChainMasquerading, nil,
		nft.Rule{nft.MatchMarkClear{Bit: mark}, nft.Do{Verdict: nft.Verdict{Kind: nft.VerdictReturn}}},
		nft.Rule{nft.ClearMark{Bit: mark}},
		nft.Rule{nft.Masquerade{}})
}

// scheduler resolves a service's scheduler once: its annotation if valid, else the default.
// Every port of a Service carries the same annotation, so the first port decides.
func (b *builder) scheduler(sp *model.ServicePort) string {
	n := sp.Name.ServiceName
	if s, ok := b.sched[n]; ok {
		return s
	}
	def := b.cfg.Scheduler
	if def == "" {
		def = DefaultScheduler
	}
	s := def
	if v := sp.IPVSScheduler; v != "" {
		if ValidScheduler(v) {
			s = v
		} else {
			b.plan.Problems = append(b.plan.Problems, fmt.Sprintf("service %s: annotation %s: %q is not an IPVS scheduler (%s); using %s",
				n, SchedulerAnnotation, v, strings.Join(Schedulers, ", "), def))
		}
	}
	b.sched[n] = s
	return s
}

// servicePort adds the virtual servers and auxiliary elements of one ServicePort.
func (b *builder) servicePort(p *plan.PortPolicy) {
	sp := p.SP
	tmpl := VirtualServer{VSKey: VSKey{Proto: sp.Name.Protocol, Port: sp.Port},
		Scheduler: b.scheduler(sp), Timeout: sp.AffinityTimeout, Service: sp.Name}
	internal := b.reals(p, p.Internal, p.UsesLocalForInternal)
	b.frontend(tmpl, p.ClusterIP, FrontendClusterIP, internal, p.Internal, false)
	if !p.IsExternal() {
		return
	}
	local := !p.UsesClusterForExternal
	external := b.reals(p, p.External, local)
	for _, a := range p.ExternalIPs {
		b.frontend(tmpl, a, FrontendExternalIP, external, p.External, local)
	}
	var firewalled []netip.Addr
	for _, a := range p.LBIPs {
		if b.frontend(tmpl, a, FrontendLoadBalancer, external, p.External, local) {
			firewalled = append(firewalled, a)
		}
	}
	b.firewall(p, firewalled)
	b.nodePort(p, tmpl, external, local)
}

// reals lists the real servers of a frontend: the endpoints its policy sends new traffic
// to with weight 1, and the terminating endpoints of the same scope with weight 0 so
// that their TCP connections drain. UDP and SCTP get no weight-0 real servers: as in
// kube-proxy, they have no graceful termination (expire_nodest_conn ends their flows).
func (b *builder) reals(p *plan.PortPolicy, o plan.Outcome, local bool) []RealServer {
	var out []RealServer
	if o == plan.Forward {
		eps := p.Cluster
		if local {
			eps = p.Local
		}
		for _, e := range eps {
			out = append(out, RealServer{Addr: e.Addr, Port: e.Port, Weight: 1})
			if b.cfg.IsLocal(e) { // see nft.Table.endpoint
				b.hairpin[e.Addr] = true
			}
		}
	}
	if p.SP.Name.Protocol != model.TCP {
		return out
	}
	for _, e := range p.SP.Endpoints {
		if !e.Terminating || model.FamilyOf(e.Addr) != p.Family || local && (e.NodeName == "" || e.NodeName != b.cfg.NodeName) {
			continue
		}
		if !slices.ContainsFunc(out, func(r RealServer) bool { return r.Addr == e.Addr && r.Port == e.Port }) {
			out = append(out, RealServer{Addr: e.Addr, Port: e.Port})
		}
	}
	slices.SortFunc(out, func(x, y RealServer) int { return x.AddrPort().Compare(y.AddrPort()) })
	return out
}

// claim gives a frontend to the first service port that asks for it. Another service's
// later claim is a conflict; the same service's (an external IP equal to its own cluster
// IP) is quietly the first one's.
func (b *builder) claim(k VSKey, owner model.ServicePortName) bool {
	prev, ok := b.owners[k]
	if !ok {
		b.owners[k] = owner
		return true
	}
	if prev != owner {
		b.plan.Conflicts = append(b.plan.Conflicts, fmt.Sprintf("%s and %s both claim %s; %s keeps it",
			prev, owner, strings.Join(strings.Fields(k.String()), " "), prev))
	}
	return false
}

// frontend adds one virtual server on a VIP and its auxiliary elements; false when
// another service port owns the address and port already.
func (b *builder) frontend(tmpl VirtualServer, addr netip.Addr, kind FrontendKind, reals []RealServer, o plan.Outcome, local bool) bool {
	sp := tmpl.Service
	k := VSKey{Addr: addr, Proto: tmpl.Proto, Port: tmpl.Port}
	if !b.claim(k, sp) {
		return false
	}
	vs := tmpl
	vs.VSKey, vs.Kind, vs.Reals = k, kind, reals
	b.plan.Servers = append(b.plan.Servers, vs)
	b.vips[addr] = true
	key := nft.Key{Addr: addr, Proto: k.Proto.Number(), Port: k.Port}
	b.t.AddElem(MapVIPPorts, key, nft.Verdict{Kind: nft.VerdictReturn}, sp)
	switch {
	case o != plan.Forward:
		b.t.AddElem(nft.MapNoEndpointSvcs, key, nft.VerdictFor(o), sp)
	case kind == FrontendClusterIP:
		b.t.AddElem(nft.MapServiceIPs, key, nft.Verdict{Kind: nft.VerdictGoto, Chain: ChainClusterIPMasq}, sp)
	default:
		b.t.AddElem(nft.MapServiceIPs, key, externalVerdict(local), sp)
	}
	return true
}

// externalVerdict: external traffic under eTP Cluster is masqueraded so that replies come
// back through this node; under eTP Local it keeps its source (only the node's own
// traffic from a VIP is masqueraded).
func externalVerdict(local bool) nft.Verdict {
	if local {
		return nft.Verdict{Kind: nft.VerdictGoto, Chain: ChainExternalLocal}
	}
	return nft.Verdict{Kind: nft.VerdictGoto, Chain: nft.ChainMarkMasq}
}

// firewall closes the LoadBalancer IPs a service port won to sources outside its
// loadBalancerSourceRanges. Ranges of the other family only still close this family's
// addresses, as in nftables mode, and ranges that could not be understood close them to all.
func (b *builder) firewall(p *plan.PortPolicy, addrs []netip.Addr) {
	sp := p.SP
	if len(addrs) == 0 || !sp.Firewalled() {
		return
	}
	name := "firewall-" + nft.ChainBase(sp.Name)
	fw := b.t.AddChain(name, nil)
	for _, r := range plan.FamilyPrefixes(sp.SourceRanges, p.Family) {
		fw.Rules = append(fw.Rules, nft.Rule{nft.MatchAddr{Source: true, Prefix: r}, nft.Do{Verdict: nft.Verdict{Kind: nft.VerdictReturn}}})
	}
	fw.Rules = append(fw.Rules, nft.Rule{nft.Do{Verdict: nft.Verdict{Kind: nft.VerdictDrop}}})
	for _, a := range addrs {
		b.t.AddElem(nft.MapFirewallIPs, nft.Key{Addr: a, Proto: sp.Name.Protocol.Number(), Port: sp.Port}, nft.Verdict{Kind: nft.VerdictGoto, Chain: name}, sp.Name)
	}
}

// nodePort adds a virtual server on every node-port address. The node port is claimed as
// a whole (protocol and port), so that two services never split a node's addresses.
func (b *builder) nodePort(p *plan.PortPolicy, tmpl VirtualServer, reals []RealServer, local bool) {
	sp := p.SP
	if sp.NodePort == 0 {
		return
	}
	k := nodePortKey{sp.Name.Protocol, sp.NodePort}
	if prev, ok := b.nodePorts[k]; ok {
		if prev != sp.Name {
			b.plan.Conflicts = append(b.plan.Conflicts, fmt.Sprintf("%s and %s both claim node port %s %d; %s keeps it",
				prev, sp.Name, sp.Name.Protocol, sp.NodePort, prev))
		}
		return
	}
	b.nodePorts[k] = sp.Name
	for _, a := range b.plan.NodePortAddrs {
		vs := tmpl
		vs.VSKey = VSKey{Addr: a, Proto: sp.Name.Protocol, Port: sp.NodePort}
		if !b.claim(vs.VSKey, sp.Name) {
			continue
		}
		vs.Kind, vs.Reals = FrontendNodePort, reals
		b.plan.Servers = append(b.plan.Servers, vs)
	}
	key := nft.Key{Proto: sp.Name.Protocol.Number(), Port: sp.NodePort}
	if p.External != plan.Forward {
		b.t.AddElem(nft.MapNoEndpointNodePts, key, nft.VerdictFor(p.External), sp.Name)
		return
	}
	b.t.AddElem(nft.MapServiceNodePorts, key, externalVerdict(local), sp.Name)
}

// finish sorts the plan and fills the address sets and the hairpin chains.
func (b *builder) finish() {
	p := b.plan
	slices.SortFunc(p.Servers, func(x, y VirtualServer) int { return x.VSKey.Compare(y.VSKey) })
	for a := range b.vips {
		p.VIPs = append(p.VIPs, a)
	}
	slices.SortFunc(p.VIPs, netip.Addr.Compare)
	// A service address that is also one of the node's own (an external IP set to the
	// node's IP) still goes on the dummy interface, which makes its virtual servers
	// recognisably edgegate's, but stays out of the vips set: the VIP port filter must
	// never close the node's other ports (its SSH, its API) on its own address.
	for _, a := range p.VIPs {
		if !slices.Contains(b.cfg.NodeAddrs, a) {
			b.t.Sets[SetVIPs].Elems = append(b.t.Sets[SetVIPs].Elems, nft.Elem{Key: nft.Key{Addr: a}})
		}
	}
	for _, a := range p.NodePortAddrs {
		b.t.Sets[SetNodePortIPs].Elems = append(b.t.Sets[SetNodePortIPs].Elems, nft.Elem{Key: nft.Key{Addr: a}})
	}
	// After IPVS, a local endpoint that is also the client would answer itself directly:
	// masquerade it (one small chain per endpoint address, found through a map).
	var eps []netip.Addr
	for a := range b.hairpin {
		eps = append(eps, a)
	}
	slices.SortFunc(eps, netip.Addr.Compare)
	m := b.t.Sets[MapHairpin]
	for _, a := range eps {
		name := "hairpin-" + a.String()
		b.t.AddChain(name, nil, nft.Rule{nft.MatchAddr{Source: true, Prefix: netip.PrefixFrom(a, a.BitLen())}, nft.Jump(nft.ChainMarkMasq)})
		m.Elems = append(m.Elems, nft.Elem{Key: nft.Key{Addr: a}, Verdict: nft.Verdict{Kind: nft.VerdictGoto, Chain: name}})
	}
}
