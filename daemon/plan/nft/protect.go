package nft

import (
	"net/netip"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Protection of exposed addresses (model.Protection): SYN proxying and per-source limits
// for the LoadBalancer IPs, external IPs and node ports of the service ports that ask
// for it. The layout exists only in a table where some service port is protected, so
// every other table, and every packet through it, pays nothing for it.
//
// SYN proxying (nftables synproxy, with the DNAT to the backend after it):
//
//   - raw-prerouting (priority raw) takes a protected frontend's handshake SYNs out of
//     connection tracking: a SYN flood costs no conntrack entry;
//   - syn-proxy-input and syn-proxy-forward send untracked, invalid and new packets for a
//     protected frontend to the port's syn-proxy chain, which checks the firewall
//     (loadBalancerSourceRanges) and answers SYNs with a SYN cookie; the client's ACK,
//     once its cookie checks out, makes the kernel open the connection itself with a SYN
//     sent through the output path, where nat-output's dispatch DNATs it to an endpoint;
//     the rest of the connection is ordinary conntrack with sequence adjustment;
//   - that ACK arrives with no conntrack entry. The kernel's loose TCP tracking (the
//     default, which lets a gateway pick up a flow that another gateway or a rehash
//     moved here) would make it a new connection and DNAT it to a backend, which would
//     reset it: nat-prerouting-syn-proxy, one priority before the dispatch, binds such a
//     packet's destination NAT to its own destination, so it reaches the synproxy
//     unchanged. The one cost is the one synproxy always has: a flow picked up in
//     mid-stream to a SYN-proxied frontend fails its cookie check and is dropped, so
//     connections moved here by a rehash or a failover survive only where their
//     conntrack entries came with them.
//
// Per-source limits: protect-check, from filter-prerouting for new connections arriving
// and from filter-output for the ones the synproxy opens, jumps to the port's protect
// chain, which refuses (TCP reset, ICMP port unreachable) a connection whose source opens
// them faster than the rate, or already holds the maximum. A source is an IPv4 address or
// an IPv6 /64. Flows picked up in mid-stream are not new connections and are not counted.

// Names of the protection layout.
const (
	SetSynProxiedIPs       = "syn-proxied-ips"
	SetSynProxiedNodePorts = "syn-proxied-nodeports"
	MapSynProxyIPs         = "syn-proxy-ips"
	MapSynProxyNodePorts   = "syn-proxy-nodeports"
	MapProtectedIPs        = "protected-ips"
	MapProtectedNodePorts  = "protected-nodeports"

	ChainRawPrerouting      = "raw-prerouting"
	ChainNATSynProxy        = "nat-prerouting-syn-proxy"
	ChainSynProxyInput      = "syn-proxy-input"
	ChainSynProxyForward    = "syn-proxy-forward"
	ChainProtectCheck       = "protect-check"
	SynProxyChainPrefix     = "syn-proxy-"
	ProtectChainPrefix      = "protect-"
	RefusedRateCounterPref  = "refused-rate-"
	RefusedConnsCounterPref = "refused-conns-"
)

// Priorities of the protection's base chains.
const (
	PrioRaw         = -300
	PrioNATSynProxy = PrioDstNAT - 1
	PrioSynProxy    = 0
)

// SourceBits6 is how much of an IPv6 source address the per-source limits key on.
const SourceBits6 = 64

// Sizes of the per-source sets: the sources a port tracks at once, and how long a
// source's rate state outlives its last new connection.
const (
	sourceSetSize    = 65535
	rateStateSeconds = 60
)

// Protected reports whether the service port's protection applies: it asks for some, and
// it has frontends reachable from outside.
func Protected(sp *model.ServicePort) bool {
	return sp.Protection.Any() && (sp.NodePort != 0 || len(sp.ExternalIPs) > 0 || len(sp.LoadBalancerIPs) > 0)
}

// AnyProtected reports whether some service port of snap is protected.
func AnyProtected(snap *model.Snapshot) bool {
	for _, sp := range snap.Ports.All() {
		if Protected(sp) {
			return true
		}
	}
	return false
}

// protectionBase adds the layout's base chains, sets and maps.
func (t *Table) protectionBase(cfg plan.Config) {
	t.AddSet(SetSynProxiedIPs, KeyAddrProtoPort, false)
	t.AddSet(SetSynProxiedNodePorts, KeyProtoPort, false)
	t.AddSet(MapSynProxyIPs, KeyAddrProtoPort, true)
	t.AddSet(MapSynProxyNodePorts, KeyProtoPort, true)
	t.AddSet(MapProtectedIPs, KeyAddrProtoPort, true)
	t.AddSet(MapProtectedNodePorts, KeyProtoPort, true)

	nodePorts := func(pre Rule, lookup Stmt, post ...Stmt) []Rule {
		var out []Rule
		for _, r := range nodePortRule(t.Family, cfg, lookup) {
			out = append(out, append(append(append(Rule{}, pre...), r...), post...))
		}
		return out
	}
	syn := Rule{MatchSynOnly{}}
	t.AddChain(ChainRawPrerouting, &Hook{"filter", "prerouting", PrioRaw}, append([]Rule{
		{MatchSynOnly{}, MatchKeySet{KeyAddrProtoPort, SetSynProxiedIPs}, Notrack{}}},
		nodePorts(syn, MatchKeySet{KeyProtoPort, SetSynProxiedNodePorts}, Notrack{})...)...)
	notSyn := Rule{MatchProto{6}, MatchNotSyn{}}
	t.AddChain(ChainNATSynProxy, &Hook{"nat", "prerouting", PrioNATSynProxy}, append([]Rule{
		append(append(Rule{}, notSyn...), MatchKeySet{KeyAddrProtoPort, SetSynProxiedIPs}, DNATSelf{})},
		nodePorts(notSyn, MatchKeySet{KeyProtoPort, SetSynProxiedNodePorts}, DNATSelf{})...)...)
	unsure := Rule{MatchCtState{CtInvalid | CtNew | CtUntracked}}
	toSynProxy := Rule{unsure[0], VMap{KeyAddrProtoPort, MapSynProxyIPs}}
	t.AddChain(ChainSynProxyInput, &Hook{"filter", "input", PrioSynProxy},
		append([]Rule{toSynProxy}, nodePorts(unsure, VMap{KeyProtoPort, MapSynProxyNodePorts})...)...)
	t.AddChain(ChainSynProxyForward, &Hook{"filter", "forward", PrioSynProxy}, toSynProxy)

	t.AddChain(ChainProtectCheck, nil, append([]Rule{
		append(append(Rule{}, notSyn...), Do{Verdict{Kind: VerdictReturn}}),
		{VMap{KeyAddrProtoPort, MapProtectedIPs}}},
		nodePortRule(t.Family, cfg, VMap{KeyProtoPort, MapProtectedNodePorts})...)...)
	for _, name := range []string{"filter-prerouting", "filter-output"} {
		c := t.Chains[name]
		c.Rules = append(c.Rules, Rule{CtStateNew{}, Jump(ChainProtectCheck)})
	}
}

// protect adds a protected service port's chains, sets and elements. Only frontends that
// forward are protected: one without endpoints refuses its traffic anyway.
func (t *Table) protect(p *plan.PortPolicy) {
	sp := p.SP
	pr := sp.Protection
	if !Protected(sp) || p.External != plan.Forward {
		return
	}
	base := ChainBase(sp.Name)
	proto := sp.Name.Protocol.Number()
	synProxy := pr.SynProxy && sp.Name.Protocol == model.TCP
	bits := 0
	if t.Family == model.IPv6 {
		bits = SourceBits6
	}
	// The chains and sets live with the filter hooks that use them, in the main table of
	// a split (Chain.Dispatch).
	var synChain, protChain string
	if synProxy {
		synChain = SynProxyChainPrefix + base
		c := t.AddChain(synChain, nil,
			Rule{Jump(ChainFirewallCheck)},
			Rule{SynProxy{MSS: pr.MSS(t.Family), WScale: pr.WindowScale()}},
			Rule{Do{Verdict{Kind: VerdictDrop}}})
		c.Dispatch = model.ServiceName{}
	}
	if pr.Limits() {
		protChain = ProtectChainPrefix + base
		c := t.AddChain(protChain, nil)
		c.Dispatch = model.ServiceName{}
		if pr.NewConnsPerSecond != 0 {
			set := "rate-" + base
			t.Sets[set] = &Set{Name: set, Key: KeyAddr, Dynamic: true, Timeout: rateStateSeconds, Size: sourceSetSize}
			c.Rules = append(c.Rules, Rule{OverSourceRate{Set: set, Rate: pr.NewConnsPerSecond, Burst: pr.Burst(), SourceBits: bits},
				Counter{RefusedRateCounterPref + base}, Goto(ChainReject)})
		}
		if pr.MaxConnsPerSource != 0 {
			set := "conns-" + base
			t.Sets[set] = &Set{Name: set, Key: KeyAddr, Dynamic: true, Size: sourceSetSize}
			c.Rules = append(c.Rules, Rule{OverSourceConns{Set: set, Max: pr.MaxConnsPerSource, SourceBits: bits},
				Counter{RefusedConnsCounterPref + base}, Goto(ChainReject)})
		}
	}
	add := func(set, mapName, protMap string, k Key) {
		if synProxy {
			t.AddElem(set, k, Verdict{}, sp.Name)
			t.AddElem(mapName, k, Verdict{Kind: VerdictGoto, Chain: synChain}, sp.Name)
		}
		if protChain != "" {
			t.AddElem(protMap, k, Verdict{Kind: VerdictJump, Chain: protChain}, sp.Name)
		}
	}
	for _, a := range append(append([]netip.Addr(nil), p.ExternalIPs...), p.LBIPs...) {
		add(SetSynProxiedIPs, MapSynProxyIPs, MapProtectedIPs, Key{Addr: a, Proto: proto, Port: sp.Port})
	}
	if sp.NodePort != 0 {
		add(SetSynProxiedNodePorts, MapSynProxyNodePorts, MapProtectedNodePorts, Key{Proto: proto, Port: sp.NodePort})
	}
}
