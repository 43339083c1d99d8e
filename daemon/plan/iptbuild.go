package plan

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/daemon/model"
)

// IptPrefix starts every chain edgegate owns in iptables mode. iptables chain names hold 28
// characters, so kube-proxy's "KUBE-" becomes "EG-" and leaves room for the hashes.
const IptPrefix = "EG-"

// Fixed chains of the iptables layout: kube-proxy's, under edgegate's prefix.
const (
	IptServices         = IptPrefix + "SERVICES"
	IptExternalServices = IptPrefix + "EXTERNAL-SERVICES"
	IptNodePorts        = IptPrefix + "NODEPORTS"
	IptPostrouting      = IptPrefix + "POSTROUTING"
	IptMarkMasq         = IptPrefix + "MARK-MASQ"
	IptForward          = IptPrefix + "FORWARD"
	IptProxyFirewall    = IptPrefix + "PROXY-FIREWALL"
)

// IptHookComments are the comments of the rules edgegate adds to built-in chains; the
// backend finds its own rules there by them.
const (
	commentPortals   = "edgegate service portals"
	commentExternal  = "edgegate externally-visible service portals"
	commentFirewall  = "edgegate load balancer firewall"
	commentHealth    = "edgegate health check service ports"
	commentForward   = "edgegate forwarding rules"
	commentPostroute = "edgegate postrouting rules"
)

// IptHookComments lists every comment edgegate marks its built-in-chain rules with.
var IptHookComments = []string{commentPortals, commentExternal, commentFirewall, commentHealth, commentForward, commentPostroute}

func iptHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(h[:10]) // its first 16 characters: 10 bytes
}

func iptPortChain(kind string, n model.ServicePortName) string {
	return IptPrefix + kind + "-" + iptHash(n.String()+string(n.Protocol))
}

func iptEndpointChain(n model.ServicePortName, e model.Endpoint) string {
	return IptPrefix + "SEP-" + iptHash(n.String()+string(n.Protocol)+e.String())
}

type iptBuilder struct {
	f      model.Family
	cfg    Config
	mark   uint32
	nat    *IptTable
	filter *IptTable
}

func (b *iptBuilder) chain(t *IptTable, name string) *IptChain {
	c := &IptChain{Name: name}
	t.Chains = append(t.Chains, c)
	return c
}

func (c *IptChain) add(r IptRule) { c.Rules = append(c.Rules, r) }

func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func newState() IptMatch { return CtState{States: []string{"NEW"}} }

// IPT builds the iptables plan of one family from a Snapshot.
func IPT(snap *model.Snapshot, f model.Family, cfg Config) *IPTables {
	return (&IPTPlanner{Family: f}).Plan(snap, cfg)
}

// IPTPlanner plans one family's iptables tables as IPT does, but reuses what it planned for
// each service port that has not changed since its last plan: the tracker hands out the
// same *ServicePort for an unchanged port. A service port's part of the plan is its own
// chains (SVC, SVL, EXT, FW, SEP, in nat: only its rules jump to them) and the rules it adds
// to the fixed chains; the fixed chains are put together again at every plan, the port's
// own chains are the same *IptChain values as before, which the iptables backend's diff
// recognises without comparing their rules. At 10,000 Services planning everything for
// one changed endpoint took a third of a second.
//
// A planner is not safe for concurrent use.
type IPTPlanner struct {
	Family model.Family

	cfg   Config
	frags map[model.ServicePortName]*iptFragment // nil until the first plan with cfg
}

// iptFragment is what one service port adds to the plan.
type iptFragment struct {
	sp *model.ServicePort
	// fixed are its rules in the fixed chains.
	fixed []fixedRules
	// chains are its own chains in nat, in the order it made them, those nothing jumps to
	// left out.
	chains []*IptChain
}

type fixedRules struct {
	nat   bool // or filter
	chain string
	rules []IptRule
}

// Plan returns the plan for snap; it equals a new planner's.
func (p *IPTPlanner) Plan(snap *model.Snapshot, cfg Config) *IPTables {
	if p.frags == nil || !reflect.DeepEqual(cfg, p.cfg) {
		p.frags, p.cfg = map[model.ServicePortName]*iptFragment{}, cfg
	}
	b := newIptBuilder(p.Family, cfg)
	b.base()
	var scratch *iptBuilder
	frags := make(map[model.ServicePortName]*iptFragment, len(p.frags))
	var own []*IptChain
	for _, sp := range snap.Sorted() {
		f := p.frags[sp.Name]
		if f == nil || f.sp != sp {
			if scratch == nil {
				scratch = &iptBuilder{f: b.f, cfg: b.cfg, mark: b.mark, nat: &IptTable{Name: "nat"}, filter: &IptTable{Name: "filter"}}
			}
			f = scratch.fragment(sp)
		}
		frags[sp.Name] = f
		for _, r := range f.fixed {
			t := b.filter
			if r.nat {
				t = b.nat
			}
			c := t.Chain(r.chain)
			c.Rules = append(c.Rules, r.rules...)
		}
		own = append(own, f.chains...)
	}
	p.frags = frags
	// Node ports come last: the destination of a node port is a local address, which any
	// earlier, more specific service rule must win over.
	services := b.nat.Chain(IptServices)
	services.Rules = append(services.Rules, b.nodePortJumps()...)
	b.nat.Chains = append(b.nat.Chains, own...)
	return &IPTables{Family: p.Family, Tables: []*IptTable{b.filter, b.nat}}
}

func newIptBuilder(f model.Family, cfg Config) *iptBuilder {
	return &iptBuilder{f: f, cfg: cfg, mark: cfg.MasqueradeMark(),
		nat:    &IptTable{Name: "nat", Builtin: map[string][]IptRule{}},
		filter: &IptTable{Name: "filter", Builtin: map[string][]IptRule{}}}
}

// iptFixedNat are the nat table's fixed chains that service ports fill.
var iptFixedNat = []string{IptServices, IptNodePorts}

// fragment plans one service port alone, on b's tables emptied to only their fixed
// chains, so that what the port adds to those is all they hold afterwards.
func (b *iptBuilder) fragment(sp *model.ServicePort) *iptFragment {
	f := &iptFragment{sp: sp}
	pol, ok := Policy(sp, b.f, b.cfg)
	if !ok {
		return f
	}
	b.filter.Chains, b.nat.Chains = b.filter.Chains[:0], b.nat.Chains[:0]
	for _, name := range iptFixedFilter {
		b.chain(b.filter, name)
	}
	for _, name := range iptFixedNat {
		b.chain(b.nat, name)
	}
	b.servicePort(&pol, b.nat.Chain(IptServices), b.nat.Chain(IptNodePorts))
	b.nat.pruneServiceChains()
	for _, c := range b.filter.Chains {
		if len(c.Rules) > 0 {
			f.fixed = append(f.fixed, fixedRules{chain: c.Name, rules: c.Rules})
		}
	}
	for _, c := range b.nat.Chains {
		switch {
		case !slices.Contains(iptFixedNat, c.Name):
			f.chains = append(f.chains, c)
		case len(c.Rules) > 0:
			f.fixed = append(f.fixed, fixedRules{nat: true, chain: c.Name, rules: c.Rules})
		}
	}
	return f
}

// servicePrefixes name the per-service chains: built for a service port, used only where
// something jumps to them.
var servicePrefixes = []string{IptPrefix + "SVC-", IptPrefix + "SVL-", IptPrefix + "EXT-", IptPrefix + "FW-", IptPrefix + "SEP-"}

// pruneServiceChains drops per-service chains nothing jumps to (an endpoint set used only
// by a path the policy closed, such as a LoadBalancer IP whose source ranges are all of
// the other family), and then what only they jumped to: dead chains would only confuse
// an operator reading iptables-save.
func (t *IptTable) pruneServiceChains() {
	for {
		used := map[string]bool{}
		mark := func(rules []IptRule) {
			for _, r := range rules {
				if j, ok := r.Target.(JumpTo); ok {
					used[j.Chain] = true
				}
			}
		}
		for _, rules := range t.Builtin {
			mark(rules)
		}
		for _, c := range t.Chains {
			mark(c.Rules)
		}
		kept := t.Chains[:0]
		for _, c := range t.Chains {
			if used[c.Name] || !slices.ContainsFunc(servicePrefixes, func(p string) bool { return strings.HasPrefix(c.Name, p) }) {
				kept = append(kept, c)
			}
		}
		if len(kept) == len(t.Chains) {
			return
		}
		t.Chains = kept
	}
}

// iptFixedFilter are the filter table's chains: all fixed, filled by every service port.
var iptFixedFilter = []string{IptNodePorts, IptServices, IptExternalServices, IptForward, IptProxyFirewall}

func (b *iptBuilder) base() {
	jump := func(comment, chain string, matches ...IptMatch) IptRule {
		return IptRule{Matches: append(matches, Comment{comment}), Target: JumpTo{chain}}
	}
	b.filter.Builtin["INPUT"] = []IptRule{
		jump(commentFirewall, IptProxyFirewall, newState()),
		jump(commentHealth, IptNodePorts),
		jump(commentExternal, IptExternalServices, newState()),
	}
	b.filter.Builtin["FORWARD"] = []IptRule{
		jump(commentFirewall, IptProxyFirewall, newState()),
		jump(commentForward, IptForward),
		jump(commentPortals, IptServices, newState()),
		jump(commentExternal, IptExternalServices, newState()),
	}
	// The node's own traffic meets the refusals for external and LoadBalancer IPs too, as
	// in nftables mode: no rule routes it out toward an address nothing serves.
	b.filter.Builtin["OUTPUT"] = []IptRule{
		jump(commentFirewall, IptProxyFirewall, newState()),
		jump(commentPortals, IptServices, newState()),
		jump(commentExternal, IptExternalServices, newState()),
	}
	b.nat.Builtin["PREROUTING"] = []IptRule{jump(commentPortals, IptServices)}
	b.nat.Builtin["OUTPUT"] = []IptRule{jump(commentPortals, IptServices)}
	b.nat.Builtin["POSTROUTING"] = []IptRule{jump(commentPostroute, IptPostrouting)}

	for _, name := range iptFixedFilter {
		b.chain(b.filter, name)
	}
	fwd := b.filter.Chain(IptForward)
	fwd.add(IptRule{Matches: []IptMatch{Comment{commentForward}, MarkMatch{Value: b.mark, Mask: b.mark}}, Target: Standard{"ACCEPT"}})
	fwd.add(IptRule{Matches: []IptMatch{Comment{"edgegate forwarding conntrack rule"}, CtState{States: []string{"RELATED", "ESTABLISHED"}}},
		Target: Standard{"ACCEPT"}})

	for _, name := range []string{IptServices, IptNodePorts, IptPostrouting, IptMarkMasq} {
		b.chain(b.nat, name)
	}
	b.nat.Chain(IptMarkMasq).add(IptRule{Target: MarkTarget{Mark: b.mark}})
	post := b.nat.Chain(IptPostrouting)
	post.add(IptRule{Matches: []IptMatch{MarkMatch{Not: true, Value: b.mark, Mask: b.mark}}, Target: Standard{"RETURN"}})
	post.add(IptRule{Target: MarkTarget{Xor: true, Mark: b.mark}})
	post.add(IptRule{Matches: []IptMatch{Comment{"edgegate service traffic requiring SNAT"}}, Target: MasqueradeTarget{}})
}

// nodePortDestinations are rules, one per destination guard, matching where node ports
// answer: every local address but loopback, or only those inside --nodeport-addresses.
// Callers add the addrtype LOCAL match.
func (b *iptBuilder) nodePortDestinations() []IptRule {
	prefixes := familyPrefixes(b.cfg.NodePortAddresses, b.f)
	if len(prefixes) == 0 {
		lo := netip.MustParsePrefix("127.0.0.0/8")
		if b.f == model.IPv6 {
			lo = netip.MustParsePrefix("::1/128")
		}
		return []IptRule{{Dst: lo, DstNot: true}}
	}
	var out []IptRule
	for _, p := range prefixes {
		out = append(out, IptRule{Dst: p})
	}
	return out
}

// nodePortJumps sends node-port destinations to the node-port chain.
func (b *iptBuilder) nodePortJumps() []IptRule {
	comment := Comment{"edgegate service nodeports; NOTE: this must be the last rule in this chain"}
	out := b.nodePortDestinations()
	for i := range out {
		out[i].Matches = []IptMatch{comment, AddrType{}}
		out[i].Target = JumpTo{IptNodePorts}
	}
	return out
}

func rejectWith(f model.Family) IptTarget {
	if f == model.IPv6 {
		return RejectTarget{"icmp6-port-unreachable"}
	}
	return RejectTarget{"icmp-port-unreachable"}
}

// filterVerdict is the filter-table target for a frontend that is not forwarded.
func (b *iptBuilder) filterVerdict(o Outcome) IptTarget {
	if o == Drop {
		return Standard{"DROP"}
	}
	return rejectWith(b.f)
}

func (b *iptBuilder) servicePort(p *PortPolicy, services, nodePorts *IptChain) {
	sp := p.SP
	name := sp.Name.String()
	proto := sp.Name.Protocol.Number()
	svc, svl := iptPortChain("SVC", sp.Name), iptPortChain("SVL", sp.Name)
	ext, fw := iptPortChain("EXT", sp.Name), iptPortChain("FW", sp.Name)
	frontend := func(dst netip.Addr, comment string, target IptTarget) IptRule {
		return IptRule{Dst: host(dst), Proto: proto, Matches: []IptMatch{Comment{comment}, DPort{proto, sp.Port}}, Target: target}
	}
	filterServices := b.filter.Chain(IptServices)
	filterExternal := b.filter.Chain(IptExternalServices)

	for _, e := range p.Reachable {
		b.endpoint(p, e)
	}
	internal := svc
	if p.UsesLocalForInternal {
		internal = svl
	}
	if len(p.Cluster) > 0 {
		b.dispatch(b.chain(b.nat, svc), p, p.Cluster, internal == svc)
	}
	if len(p.Local) > 0 {
		b.dispatch(b.chain(b.nat, svl), p, p.Local, internal == svl)
	}

	if p.Internal == Forward {
		services.add(frontend(p.ClusterIP, name+" cluster IP", JumpTo{internal}))
	} else {
		filterServices.add(frontend(p.ClusterIP, name+" has no "+noEndpointsWhat(p.Internal), b.filterVerdict(p.Internal)))
	}
	if !p.IsExternal() {
		return
	}
	captured := p.External != Reject
	firewalled := len(p.LBIPs) > 0 && sp.Firewalled()
	ranges := familyPrefixes(sp.SourceRanges, p.Family)
	// Source ranges of the other family only close this family's LoadBalancer IPs (as in
	// the other modes): nothing of theirs is translated, and there is no firewall chain
	// to pass anyone on.
	closed := firewalled && len(ranges) == 0
	// The external chain exists only where something jumps to it.
	if captured && (len(p.ExternalIPs) > 0 || sp.NodePort != 0 || len(p.LBIPs) > 0 && !closed) {
		b.external(b.chain(b.nat, ext), p, svc, svl)
	}
	for _, a := range p.ExternalIPs {
		if captured {
			services.add(frontend(a, name+" external IP", JumpTo{ext}))
		}
		if p.External != Forward {
			filterExternal.add(frontend(a, name+" has no "+noEndpointsWhat(p.External), b.filterVerdict(p.External)))
		}
	}
	if firewalled && captured && !closed {
		c := b.chain(b.nat, fw)
		for _, r := range ranges {
			c.add(IptRule{Src: r, Matches: []IptMatch{Comment{name + " loadbalancer IP"}}, Target: JumpTo{ext}})
		}
	}
	for _, a := range p.LBIPs {
		if captured && !closed {
			target := ext
			if firewalled {
				target = fw
			}
			services.add(frontend(a, name+" loadbalancer IP", JumpTo{target}))
		}
		if firewalled {
			if !captured {
				// Nothing is translated without endpoints: allowed sources go on to the
				// refusal in EG-EXTERNAL-SERVICES, the others are dropped as ever.
				for _, r := range ranges {
					allowed := frontend(a, name+" loadbalancer IP", Standard{"RETURN"})
					allowed.Src = r
					b.filter.Chain(IptProxyFirewall).add(allowed)
				}
			}
			// What the firewall chain did not pass on was not translated: drop it here.
			b.filter.Chain(IptProxyFirewall).add(frontend(a, name+" traffic not accepted by "+fw, Standard{"DROP"}))
		}
		if p.External != Forward {
			filterExternal.add(frontend(a, name+" has no "+noEndpointsWhat(p.External), b.filterVerdict(p.External)))
		}
	}
	if sp.NodePort != 0 {
		np := IptRule{Proto: proto, Matches: []IptMatch{Comment{name}, DPort{proto, sp.NodePort}}}
		if captured {
			r := np
			r.Target = JumpTo{ext}
			nodePorts.add(r)
		}
		if p.External != Forward {
			// Only where node ports answer: the same port on another local address, or on
			// loopback, is not this service's.
			for _, r := range b.nodePortDestinations() {
				r.Proto = proto
				r.Matches = []IptMatch{Comment{name + " has no " + noEndpointsWhat(p.External)}, AddrType{}, DPort{proto, sp.NodePort}}
				r.Target = b.filterVerdict(p.External)
				filterExternal.add(r)
			}
		}
	}
	if sp.HealthCheckPort != 0 {
		b.filter.Chain(IptNodePorts).add(IptRule{Proto: 6, Matches: []IptMatch{
			Comment{fmt.Sprintf("%s health check node port", sp.Name.ServiceName)}, DPort{6, sp.HealthCheckPort}},
			Target: Standard{"ACCEPT"}})
	}
}

func noEndpointsWhat(o Outcome) string {
	if o == Drop {
		return "local endpoints"
	}
	return "endpoints"
}

// external fills the EXT chain: masquerade and spread over the cluster (eTP Cluster), or
// keep outside traffic on local endpoints while the node's own traffic may use any.
func (b *iptBuilder) external(c *IptChain, p *PortPolicy, svc, svl string) {
	name := p.SP.Name.String()
	if p.UsesClusterForExternal {
		c.add(IptRule{Matches: []IptMatch{Comment{"masquerade traffic for " + name + " external destinations"}}, Target: JumpTo{IptMarkMasq}})
		c.add(IptRule{Target: JumpTo{svc}})
		return
	}
	// Only the node's own traffic is let off the Local policy: pods elsewhere reach this
	// gateway as outside traffic, as Policy and nftables mode have it.
	if len(p.Cluster) > 0 {
		c.add(IptRule{Matches: []IptMatch{Comment{"masquerade LOCAL traffic for " + name + " external destinations"}, AddrType{Source: true}},
			Target: JumpTo{IptMarkMasq}})
		c.add(IptRule{Matches: []IptMatch{Comment{"route LOCAL traffic for " + name + " external destinations"}, AddrType{Source: true}},
			Target: JumpTo{svc}})
	}
	if len(p.Local) > 0 {
		c.add(IptRule{Target: JumpTo{svl}})
	}
}

// dispatch fills an SVC or SVL chain: ClusterIP masquerade, affinity, then endpoints chosen
// with decreasing probabilities 1/n, 1/(n-1), ..., the last one unconditionally.
func (b *iptBuilder) dispatch(c *IptChain, p *PortPolicy, eps []model.Endpoint, internal bool) {
	sp := p.SP
	name := sp.Name.String()
	proto := sp.Name.Protocol.Number()
	// The chain's rules are counted first: a plan at 10,000 Services holds 300,000 rules,
	// and a chain of 10 grown by appending kept room for 16.
	n := len(eps)
	if sp.AffinityTimeout > 0 {
		n += len(eps)
	}
	if internal && p.MasqueradeCluster {
		n += max(1, len(b.cfg.ClusterCIDRs))
	}
	c.Rules = slices.Grow(c.Rules, n)
	if internal && p.MasqueradeCluster {
		r := IptRule{Dst: host(p.ClusterIP), Proto: proto, Matches: []IptMatch{Comment{name + " cluster IP"}, DPort{proto, sp.Port}},
			Target: JumpTo{IptMarkMasq}}
		if b.cfg.MasqueradeAll {
			c.add(r)
		} else {
			for _, cidr := range familyPrefixes(b.cfg.ClusterCIDRs, p.Family) {
				r.Src, r.SrcNot = cidr, true
				c.add(r)
			}
		}
	}
	if sp.AffinityTimeout > 0 {
		for _, e := range eps {
			sep := iptEndpointChain(sp.Name, e)
			c.add(IptRule{Matches: []IptMatch{Comment{name + " -> " + e.String()}, Recent{Name: sep, Seconds: sp.AffinityTimeout}},
				Target: JumpTo{sep}})
		}
	}
	for i, e := range eps {
		m := append(make([]IptMatch, 0, 2), Comment{name + " -> " + e.String()})
		if left := len(eps) - i; left > 1 {
			m = append(m, Statistic{Probability: 1 / float64(left)})
		}
		c.add(IptRule{Matches: m, Target: JumpTo{iptEndpointChain(sp.Name, e)}})
	}
}

// endpoint adds an SEP chain: hairpin masquerade, affinity record, DNAT.
func (b *iptBuilder) endpoint(p *PortPolicy, e model.Endpoint) {
	sp := p.SP
	name := sp.Name.String()
	proto := sp.Name.Protocol.Number()
	sep := iptEndpointChain(sp.Name, e)
	c := b.chain(b.nat, sep)
	c.Rules = make([]IptRule, 0, 2)
	comment := IptMatch(Comment{name}) // boxed once for both rules
	c.add(IptRule{Src: host(e.Addr), Matches: []IptMatch{comment}, Target: JumpTo{IptMarkMasq}})
	m := append(make([]IptMatch, 0, 3), comment)
	if sp.AffinityTimeout > 0 {
		m = append(m, Recent{Name: sep, Set: true})
	}
	m = append(m, DPort{Proto: proto})
	c.add(IptRule{Proto: proto, Matches: m, Target: DNATTarget{To: netip.AddrPortFrom(e.Addr, e.Port)}})
}
