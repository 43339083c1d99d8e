package nft

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// TableName is the name of edgegate's nftables table in each family.
const TableName = "edgegate"

// Fixed set, map and chain names of the nftables layout (kube-proxy's, under our table).
const (
	SetClusterIPs        = "cluster-ips"
	MapServiceIPs        = "service-ips"
	MapServiceNodePorts  = "service-nodeports"
	MapNoEndpointSvcs    = "no-endpoint-services"
	MapNoEndpointNodePts = "no-endpoint-nodeports"
	MapFirewallIPs       = "firewall-ips"
	SetHairpin           = "hairpin-endpoints"

	ChainServices        = "services"
	ChainMarkMasq        = "mark-for-masquerade"
	ChainMasquerading    = "masquerading"
	ChainReject          = "reject-chain"
	ChainFirewallCheck   = "firewall-check"
	ChainSvcEndpointsChk = "service-endpoints-check"
	ChainNPEndpointsChk  = "nodeport-endpoints-check"
	ChainClusterIPsCheck = "cluster-ips-check"
)

// Priorities of the base chains: filter checks run just before DNAT (dstnat = -100) so they
// see the original destination, or just after it for the node's own traffic; nat hooks at
// the standard dstnat/srcnat priorities.
const (
	PrioFilterPreDNAT = -110
	PrioDstNAT        = -100
	PrioSrcNAT        = 100
	PrioPostDNAT      = -90
)

// Build builds the nftables plan of one family from a Snapshot.
func Build(snap *model.Snapshot, f model.Family, cfg plan.Config) *Table {
	t := newTable(f)
	t.base(cfg)
	if AnyProtected(snap) {
		t.protectionBase(cfg)
	}
	for _, sp := range snap.Sorted() {
		if p, ok := plan.Policy(sp, f, cfg); ok {
			t.servicePort(&p, cfg)
		}
	}
	t.planned()
	return t
}

// planned drops what only planning needed: who holds each element, a map as large as all
// the sets together.
func (t *Table) planned() { t.owners = nil }

// AddChain adds a chain; hook makes it a base chain.
func (t *Table) AddChain(name string, hook *Hook, rules ...Rule) *Chain {
	c := &Chain{Name: name, Hook: hook, Rules: rules, Dispatch: t.owner}
	t.Chains[name] = c
	return c
}

// AddSet declares a set, or a verdict map when isMap.
func (t *Table) AddSet(name string, key KeyKind, isMap bool) {
	t.Sets[name] = &Set{Name: name, Key: key, Map: isMap}
}

// AddElem adds a set or map element. Two services claiming the same key (the same IP and port,
// or the same node port) would make the kernel refuse the whole batch; the first service in
// sorted order keeps the key and the clash is reported in Conflicts.
func (t *Table) AddElem(set string, k Key, v Verdict, owner model.ServicePortName) {
	if t.record != nil {
		*t.record = append(*t.record, elemCall{set: set, key: k, v: v, owner: owner})
		return
	}
	s := t.Sets[set]
	if t.owners == nil {
		t.owners = map[string]map[Key]ownedElem{}
	}
	if t.owners[set] == nil {
		t.owners[set] = map[Key]ownedElem{}
	}
	if prev, ok := t.owners[set][k]; ok {
		if !sharedSets[set] && (prev.verdict != v || prev.owner != owner) {
			t.Conflicts = append(t.Conflicts, fmt.Sprintf("%s and %s both claim %s in %s; %s keeps it",
				prev.owner, owner, k.format(s.Key), set, prev.owner))
		}
		return
	}
	for _, sib := range siblingMaps[set] {
		if prev, ok := t.owners[sib][k]; ok && prev.owner != owner {
			t.Conflicts = append(t.Conflicts, fmt.Sprintf("%s and %s both claim %s in %s; %s keeps it",
				prev.owner, owner, k.format(s.Key), sib, prev.owner))
			return
		}
	}
	t.owners[set][k] = ownedElem{owner: owner, verdict: v}
	s.Elems = append(s.Elems, Elem{Key: k, Verdict: v})
}

// siblingMaps share a key space: a destination that one service port forwards must not be
// refused or filtered for another, or the service that sorts first would not keep it.
var siblingMaps = map[string][]string{
	MapServiceIPs:        {MapNoEndpointSvcs, MapFirewallIPs},
	MapNoEndpointSvcs:    {MapServiceIPs, MapFirewallIPs},
	MapFirewallIPs:       {MapServiceIPs, MapNoEndpointSvcs},
	MapServiceNodePorts:  {MapNoEndpointNodePts},
	MapNoEndpointNodePts: {MapServiceNodePorts},
}

// sharedSets hold elements that several service ports may add without a conflict: two
// Services selecting the same Pod both hairpin it.
var sharedSets = map[string]bool{SetHairpin: true}

type ownedElem struct {
	owner   model.ServicePortName
	verdict Verdict
}

// AddDispatchMaps declares the verdict maps that dispatch new connections by destination:
// the services, node ports, refusals and firewalls. IPVS mode's auxiliary table declares
// the same maps with the same meaning.
func (t *Table) AddDispatchMaps() {
	t.AddSet(MapServiceIPs, KeyAddrProtoPort, true)
	t.AddSet(MapServiceNodePorts, KeyProtoPort, true)
	t.AddSet(MapNoEndpointSvcs, KeyAddrProtoPort, true)
	t.AddSet(MapNoEndpointNodePts, KeyProtoPort, true)
	t.AddSet(MapFirewallIPs, KeyAddrProtoPort, true)
}

// Jump is the statement that continues in chain c and comes back.
func Jump(c string) Stmt { return Do{Verdict{Kind: VerdictJump, Chain: c}} }

// Goto is the statement that continues in chain c for good.
func Goto(c string) Stmt { return Do{Verdict{Kind: VerdictGoto, Chain: c}} }

// base adds the fixed part of the layout: hooks, dispatch maps, masquerade and reject.
func (t *Table) base(cfg plan.Config) {
	mark := cfg.MasqueradeMark()
	t.AddSet(SetClusterIPs, KeyAddr, false)
	t.AddDispatchMaps()
	t.AddSet(SetHairpin, KeyHairpin, false)

	// Traffic from outside meets the no-endpoint verdicts before routing, while its
	// destination is still the service address: a gateway need not have a route to a
	// ClusterIP or LoadBalancer IP for its REJECT to answer at once.
	t.AddChain("filter-prerouting", &Hook{"filter", "prerouting", PrioFilterPreDNAT},
		Rule{CtStateNew{}, Jump(ChainFirewallCheck)},
		Rule{CtStateNew{}, Jump(ChainSvcEndpointsChk)},
		Rule{CtStateNew{}, Jump(ChainNPEndpointsChk)})
	t.AddChain("filter-forward", &Hook{"filter", "forward", PrioFilterPreDNAT},
		Rule{CtStateNew{}, Jump(ChainClusterIPsCheck)})
	// The node's own traffic meets the no-endpoint verdicts after DNAT: traffic to a Local
	// service that was short-circuited to a cluster endpoint must not be dropped for
	// lacking a local one (kube-proxy #131765).
	t.AddChain("filter-output", &Hook{"filter", "output", PrioFilterPreDNAT},
		Rule{CtStateNew{}, Jump(ChainFirewallCheck)})
	t.AddChain("filter-output-post-dnat", &Hook{"filter", "output", PrioPostDNAT},
		Rule{CtStateNew{}, Jump(ChainSvcEndpointsChk)},
		Rule{CtStateNew{}, Jump(ChainNPEndpointsChk)},
		Rule{CtStateNew{}, Jump(ChainClusterIPsCheck)})
	t.AddChain("nat-prerouting", &Hook{"nat", "prerouting", PrioDstNAT}, Rule{Jump(ChainServices)})
	t.AddChain("nat-output", &Hook{"nat", "output", PrioDstNAT}, Rule{Jump(ChainServices)})
	t.AddChain("nat-postrouting", &Hook{"nat", "postrouting", PrioSrcNAT}, Rule{Jump(ChainMasquerading)})

	t.AddChain(ChainFirewallCheck, nil, Rule{VMap{KeyAddrProtoPort, MapFirewallIPs}})
	t.AddChain(ChainSvcEndpointsChk, nil, Rule{VMap{KeyAddrProtoPort, MapNoEndpointSvcs}})
	t.AddChain(ChainNPEndpointsChk, nil, nodePortRule(t.Family, cfg, VMap{KeyProtoPort, MapNoEndpointNodePts})...)
	t.AddChain(ChainClusterIPsCheck, nil, Rule{MatchAddrSet{Set: SetClusterIPs}, RejectStmt{}})
	t.AddChain(ChainReject, nil, Rule{RejectStmt{TCPReset: true}}, Rule{RejectStmt{}})
	t.AddChain(ChainMarkMasq, nil, Rule{SetMark{mark}})
	// Hairpin: an endpoint whose connection to its own service was sent back to itself
	// must see the node as the source, or it would answer itself directly.
	t.AddChain(ChainMasquerading, nil,
		Rule{CtStatusDNAT{}, MatchKeySet{Key: KeyHairpin, Set: SetHairpin}, Jump(ChainMarkMasq)},
		Rule{MatchMarkClear{mark}, Do{Verdict{Kind: VerdictReturn}}},
		Rule{ClearMark{mark}},
		Rule{Masquerade{}})
	t.AddChain(ChainServices, nil, append([]Rule{{VMap{KeyAddrProtoPort, MapServiceIPs}}},
		nodePortRule(t.Family, cfg, VMap{KeyProtoPort, MapServiceNodePorts})...)...)
}

// nodePortRule guards a node-port lookup: the destination must be a local address, and
// either inside --nodeport-addresses or, by default, not loopback.
func nodePortRule(f model.Family, cfg plan.Config, lookup Stmt) []Rule {
	prefixes := plan.FamilyPrefixes(cfg.NodePortAddresses, f)
	if len(prefixes) == 0 {
		lo := netip.MustParsePrefix("127.0.0.0/8")
		if f == model.IPv6 {
			lo = netip.MustParsePrefix("::1/128")
		}
		return []Rule{{MatchFibLocal{}, MatchAddr{Not: true, Prefix: lo}, lookup}}
	}
	var out []Rule
	for _, p := range prefixes {
		out = append(out, Rule{MatchFibLocal{}, MatchAddr{Prefix: p}, lookup})
	}
	return out
}

// ChainBase is the readable suffix of a service port's chains, as kube-proxy spells it:
// a short hash (unique even where names are truncated or ambiguous) then ns/name/proto/port.
func ChainBase(n model.ServicePortName) string {
	id := fmt.Sprintf("%s/%s/%s/%s", n.Namespace, n.Name, n.Protocol.Lower(), n.Port)
	return hash8(id) + "-" + id
}

// EndpointChain names the chain of one endpoint of a service port (and its counter). A
// plan names every endpoint: this is ChainBase's id and hash, built without fmt.
func EndpointChain(n model.ServicePortName, e model.Endpoint) string {
	id := make([]byte, 0, 64)
	id = append(append(append(append(id, n.Namespace...), '/'), n.Name...), '/')
	id = append(append(append(append(id, n.Protocol.Lower()...), '/'), n.Port...), "__"...)
	id = strconv.AppendUint(append(e.Addr.AppendTo(id), '/'), uint64(e.Port), 10)
	h := sha256.Sum256(id)
	name := make([]byte, 0, len("endpoint-")+9+len(id))
	name = base32.StdEncoding.AppendEncode(append(name, "endpoint-"...), h[:5]) // 8 characters
	return string(append(append(name, '-'), id...))
}

// AffinitySet names the ClientIP affinity set of one endpoint.
func AffinitySet(n model.ServicePortName, e model.Endpoint) string {
	return "affinity-" + strings.TrimPrefix(EndpointChain(n, e), "endpoint-")
}

func hash8(s string) string {
	h := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(h[:])[:8]
}

// VerdictFor is the verdict of new traffic to a frontend without usable endpoints.
func VerdictFor(o plan.Outcome) Verdict {
	if o == plan.Drop {
		return Verdict{Kind: VerdictDrop}
	}
	return Verdict{Kind: VerdictGoto, Chain: ChainReject}
}

// servicePort adds every chain, map element and counter of one ServicePort.
func (t *Table) servicePort(p *plan.PortPolicy, cfg plan.Config) {
	sp := p.SP
	t.owner = sp.Name.ServiceName
	defer func() { t.owner = model.ServiceName{} }()
	base := ChainBase(sp.Name)
	svcChain, localChain := "service-"+base, "local-"+base
	extChain, fwChain := "external-"+base, "firewall-"+base
	proto := sp.Name.Protocol.Number()

	t.AddElem(SetClusterIPs, Key{Addr: p.ClusterIP}, Verdict{}, model.ServicePortName{ServiceName: sp.Name.ServiceName})
	for _, e := range p.Reachable {
		t.endpoint(p, e, cfg)
	}
	// The chain ClusterIP traffic enters carries the ClusterIP masquerade rule.
	internalChain := svcChain
	if p.UsesLocalForInternal {
		internalChain = localChain
	}
	if len(p.Cluster) > 0 {
		t.dispatch(svcChain, p, p.Cluster, internalChain == svcChain, cfg)
	}
	if len(p.Local) > 0 {
		t.dispatch(localChain, p, p.Local, internalChain == localChain, cfg)
	}

	cipKey := Key{Addr: p.ClusterIP, Proto: proto, Port: sp.Port}
	if p.Internal == plan.Forward {
		t.AddElem(MapServiceIPs, cipKey, Verdict{Kind: VerdictGoto, Chain: internalChain}, sp.Name)
	} else {
		t.AddElem(MapNoEndpointSvcs, cipKey, VerdictFor(p.Internal), sp.Name)
	}
	if !p.IsExternal() {
		return
	}

	// The external chain exists whenever the service has endpoints somewhere, even when
	// external traffic is dropped (eTP Local, none local): the node's own traffic still
	// short-circuits through it to the cluster endpoints.
	captured := p.External != plan.Reject
	if captured {
		ext := t.AddChain(extChain, nil)
		if p.UsesClusterForExternal {
			ext.Rules = append(ext.Rules, Rule{Jump(ChainMarkMasq)}, Rule{Goto(svcChain)})
		} else {
			// Traffic from the node itself to a Local service is not "external": it is
			// masqueraded and may use any endpoint, as in kube-proxy.
			if len(p.Cluster) > 0 {
				ext.Rules = append(ext.Rules,
					Rule{MatchFibLocal{Source: true}, Jump(ChainMarkMasq)},
					Rule{MatchFibLocal{Source: true}, Goto(svcChain)})
			}
			if p.External == plan.Forward {
				ext.Rules = append(ext.Rules, Rule{Goto(localChain)})
			}
		}
	}
	extVerdict := Verdict{Kind: VerdictGoto, Chain: extChain}
	for _, a := range append(append([]netip.Addr(nil), p.ExternalIPs...), p.LBIPs...) {
		k := Key{Addr: a, Proto: proto, Port: sp.Port}
		if captured {
			t.AddElem(MapServiceIPs, k, extVerdict, sp.Name)
		}
		if p.External != plan.Forward {
			t.AddElem(MapNoEndpointSvcs, k, VerdictFor(p.External), sp.Name)
		}
	}
	if sp.NodePort != 0 {
		k := Key{Proto: proto, Port: sp.NodePort}
		if captured {
			t.AddElem(MapServiceNodePorts, k, extVerdict, sp.Name)
		}
		if p.External != plan.Forward {
			t.AddElem(MapNoEndpointNodePts, k, VerdictFor(p.External), sp.Name)
		}
	}
	t.protect(p)
	// Source ranges of the other family only still close this family's LoadBalancer IPs:
	// an operator who restricted sources never gets an open IPv6 door by accident. Ranges
	// that could not be understood (SourcesClosed) close them to everyone.
	if len(p.LBIPs) > 0 && sp.Firewalled() {
		fw := t.AddChain(fwChain, nil)
		fw.Dispatch = model.ServiceName{} // the filter hooks' firewall-ips map goes to it
		for _, r := range plan.FamilyPrefixes(sp.SourceRanges, p.Family) {
			fw.Rules = append(fw.Rules, Rule{MatchAddr{Source: true, Prefix: r}, Do{Verdict{Kind: VerdictReturn}}})
		}
		fw.Rules = append(fw.Rules, Rule{Do{Verdict{Kind: VerdictDrop}}})
		for _, a := range p.LBIPs {
			t.AddElem(MapFirewallIPs, Key{Addr: a, Proto: proto, Port: sp.Port}, Verdict{Kind: VerdictGoto, Chain: fwChain}, sp.Name)
		}
	}
}

// dispatch fills a policy chain: count, masquerade ClusterIP traffic where configured,
// honour affinity, then pick an endpoint at random.
func (t *Table) dispatch(name string, p *plan.PortPolicy, eps []model.Endpoint, internal bool, cfg plan.Config) {
	sp := p.SP
	c := t.AddChain(name, nil, Rule{Counter{"service-" + ChainBase(sp.Name)}})
	if internal && p.MasqueradeCluster {
		dst := MatchAddr{Prefix: netip.PrefixFrom(p.ClusterIP, p.ClusterIP.BitLen())}
		if cfg.MasqueradeAll {
			c.Rules = append(c.Rules, Rule{dst, Jump(ChainMarkMasq)})
		} else {
			for _, cidr := range plan.FamilyPrefixes(cfg.ClusterCIDRs, p.Family) {
				c.Rules = append(c.Rules, Rule{dst, MatchAddr{Source: true, Not: true, Prefix: cidr}, Jump(ChainMarkMasq)})
			}
		}
	}
	chains := make([]string, len(eps))
	for i, e := range eps {
		chains[i] = EndpointChain(sp.Name, e)
		if sp.AffinityTimeout > 0 {
			c.Rules = append(c.Rules, Rule{MatchAddrSet{Source: true, Set: AffinitySet(sp.Name, e)}, Goto(chains[i])})
		}
	}
	// The endpoint choice is one rule per endpoint, each taking 1/n of what the rules
	// before it left, not a numgen map per service: the kernel (6.1 to 6.18) finds a
	// named set by walking the table's list of sets, so with a map per service every
	// map, element batch and rule lookup of a sync costs time in the number of services.
	// Without affinity the rule itself counts and DNATs (dnat ends the chain): an
	// endpoint chain each would be ten times the chains, and every commit that adds a
	// rule has the kernel validate every chain reachable from the hooks.
	for i, e := range eps {
		var pick Rule
		if left := uint32(len(eps) - i); left > 1 {
			pick = Rule{Pick{Mod: left}}
		}
		if sp.AffinityTimeout > 0 {
			c.Rules = append(c.Rules, append(pick, Goto(chains[i])))
		} else {
			c.Rules = append(c.Rules, append(pick, Counter{chains[i]}, dnatTo(sp, e)))
		}
	}
}

func dnatTo(sp *model.ServicePort, e model.Endpoint) DNAT {
	return DNAT{Proto: sp.Name.Protocol.Number(), To: netip.AddrPortFrom(e.Addr, e.Port)}
}

// endpoint adds the hairpin element of an endpoint on this node, and with ClientIP
// affinity the endpoint's chain and affinity set: the service chain looks the client up in
// every endpoint's set first, and the chosen endpoint's chain records the client.
//
// Only a local endpoint can meet itself through this node's DNAT, as in kube-proxy's
// nftables and IPVS modes: another node's pod reaches a ClusterIP through its own node,
// and traffic entering from outside (node ports, LoadBalancer IPs) is masqueraded unless
// its policy is Local, which only sends it to local endpoints. A dedicated gateway then
// has no hairpin elements at all, instead of one per endpoint of the cluster.
func (t *Table) endpoint(p *plan.PortPolicy, e model.Endpoint, cfg plan.Config) {
	sp := p.SP
	if cfg.IsLocal(e) {
		t.AddElem(SetHairpin, Key{Addr: e.Addr}, Verdict{}, sp.Name)
	}
	if sp.AffinityTimeout <= 0 {
		return
	}
	name, set := EndpointChain(sp.Name, e), AffinitySet(sp.Name, e)
	t.Sets[set] = &Set{Name: set, Key: KeyAddr, Dynamic: true, Timeout: sp.AffinityTimeout, Dispatch: t.owner}
	t.AddChain(name, nil, Rule{Counter{name}}, Rule{UpdateSource{Set: set}}, Rule{dnatTo(sp, e)})
}
