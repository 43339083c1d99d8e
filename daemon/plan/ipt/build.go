package ipt

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Prefix starts every chain edgegate owns in iptables mode. iptables chain names hold 28
// characters, so kube-proxy's "KUBE-" becomes "EG-" and leaves room for the hashes.
const Prefix = "EG-"

// Fixed chains of the iptables layout: kube-proxy's, under edgegate's prefix.
const (
	ChainServices         = Prefix + "SERVICES"
	ChainExternalServices = Prefix + "EXTERNAL-SERVICES"
	ChainNodePorts        = Prefix + "NODEPORTS"
	ChainPostrouting      = Prefix + "POSTROUTING"
	ChainMarkMasq         = Prefix + "MARK-MASQ"
	ChainForward          = Prefix + "FORWARD"
	ChainProxyFirewall    = Prefix + "PROXY-FIREWALL"
)

// HookComments are the comments of the rules edgegate adds to built-in chains; the
// backend finds its own rules there by them.
const (
	commentPortals   = "edgegate service portals"
	commentExternal  = "edgegate externally-visible service portals"
	commentFirewall  = "edgegate load balancer firewall"
	commentHealth    = "edgegate health check service ports"
	commentForward   = "edgegate forwarding rules"
	commentPostroute = "edgegate postrouting rules"
)

// HookComments lists every comment edgegate marks its built-in-chain rules with.
var HookComments = []string{commentPortals, commentExternal, commentFirewall, commentHealth, commentForward, commentPostroute}

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(h[:10]) // its first 16 characters: 10 bytes
}

func portChain(kind string, n model.ServicePortName) string {
	return Prefix + kind + "-" + hash(n.String()+string(n.Protocol))
}

func endpointChain(n model.ServicePortName, e model.Endpoint) string {
	return Prefix + "SEP-" + hash(n.String()+string(n.Protocol)+e.String())
}

type builder struct {
	f      model.Family
	cfg    plan.Config
	mark   uint32
	nat    *Table
	filter *Table
}

func (b *builder) chain(t *Table, name string) *Chain {
	c := &Chain{Name: name}
	t.Chains = append(t.Chains, c)
	return c
}

func (c *Chain) add(r Rule) { c.Rules = append(c.Rules, r) }

func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func newState() Match { return CtState{States: []string{"NEW"}} }

// Build builds the iptables plan of one family from a Snapshot.
func Build(snap *model.Snapshot, f model.Family, cfg plan.Config) *Tables {
	return New(f).Plan(snap, cfg)
}

// Planner plans one family's iptables tables as Build does, but reuses what it planned for
// each service port that has not changed since its last plan: the tracker hands out the
// same *ServicePort for an unchanged port. A service port's part of the plan is its own
// chains (SVC, SVL, EXT, FW, SEP, in nat: only its rules jump to them) and the rules it adds
// to the fixed chains; the fixed chains are put together again at every plan, the port's
// own chains are the same *Chain values as before, which the iptables backend's diff
// recognises without comparing their rules. At 10,000 Services planning everything for
// one changed endpoint took a third of a second.
//
// A planner is not safe for concurrent use.
type Planner struct {
	Family model.Family

	cfg   plan.Config
	frags map[model.ServicePortName]*fragment // nil until the first plan with cfg
}

// New returns a planner for family f.
func New(f model.Family) *Planner { return &Planner{Family: f} }

// fragment is what one service port adds to the plan.
type fragment struct {
	sp *model.ServicePort
	// fixed are its rules in the fixed chains.
	fixed []fixedRules
	// chains are its own chains in nat, in the order it made them, those nothing jumps to
	// left out.
	chains []*Chain
}

type fixedRules struct {
	nat   bool // or filter
	chain string
	rules []Rule
}

// Plan returns the plan for snap; it equals a new planner's.
func (p *Planner) Plan(snap *model.Snapshot, cfg plan.Config) *Tables {
	if p.frags == nil || !reflect.DeepEqual(cfg, p.cfg) {
		p.frags, p.cfg = map[model.ServicePortName]*fragment{}, cfg
	}
	b := newBuilder(p.Family, cfg)
	b.base()
	var scratch *builder
	frags := make(map[model.ServicePortName]*fragment, len(p.frags))
	var own []*Chain
	for _, sp := range snap.Sorted() {
		f := p.frags[sp.Name]
		if f == nil || f.sp != sp {
			if scratch == nil {
				scratch = &builder{f: b.f, cfg: b.cfg, mark: b.mark, nat: &Table{Name: "nat"}, filter: &Table{Name: "filter"}}
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
	services := b.nat.Chain(ChainServices)
	services.Rules = append(services.Rules, b.nodePortJumps()...)
	b.nat.Chains = append(b.nat.Chains, own...)
	return &Tables{Family: p.Family, Tables: []*Table{b.filter, b.nat}}
}

func newBuilder(f model.Family, cfg plan.Config) *builder {
	return &builder{f: f, cfg: cfg, mark: cfg.MasqueradeMark(),
		nat:    &Table{Name: "nat", Builtin: map[string][]Rule{}},
		filter: &Table{Name: "filter", Builtin: map[string][]Rule{}}}
}

// fixedNat are the nat table's fixed chains that service ports fill.
var fixedNat = []string{ChainServices, ChainNodePorts}

// fragment plans one service port alone, on b's tables emptied to only their fixed
// chains, so that what the port adds to those is all they hold afterwards.
func (b *builder) fragment(sp *model.ServicePort) *fragment {
	f := &fragment{sp: sp}
	pol, ok := plan.Policy(sp, b.f, b.cfg)
	if !ok {
		return f
	}
	b.filter.Chains, b.nat.Chains = b.filter.Chains[:0], b.nat.Chains[:0]
	for _, name := range fixedFilter {
		b.chain(b.filter, name)
	}
	for _, name := range fixedNat {
		b.chain(b.nat, name)
	}
	b.servicePort(&pol, b.nat.Chain(ChainServices), b.nat.Chain(ChainNodePorts))
	b.nat.pruneServiceChains()
	for _, c := range b.filter.Chains {
		if len(c.Rules) > 0 {
			f.fixed = append(f.fixed, fixedRules{chain: c.Name, rules: c.Rules})
		}
	}
	for _, c := range b.nat.Chains {
		switch {
		case !slices.Contains(fixedNat, c.Name):
			f.chains = append(f.chains, c)
		case len(c.Rules) > 0:
			f.fixed = append(f.fixed, fixedRules{nat: true, chain: c.Name, rules: c.Rules})
		}
	}
	return f
}

// servicePrefixes name the per-service chains: built for a service port, used only where
// something jumps to them.
var servicePrefixes = []string{Prefix + "SVC-", Prefix + "SVL-", Prefix + "EXT-", Prefix + "FW-", Prefix + "SEP-"}

// pruneServiceChains drops per-service chains nothing jumps to (an endpoint set used only
// by a path the policy closed, such as a LoadBalancer IP whose source ranges are all of
// the other family), and then what only they jumped to: dead chains would only confuse
// an operator reading iptables-save.
func (t *Table) pruneServiceChains() {
	for {
		used := map[string]bool{}
		mark := func(rules []Rule) {
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

// fixedFilter are the filter table's chains: all fixed, filled by every service port.
var fixedFilter = []string{ChainNodePorts, ChainServices, ChainExternalServices, ChainForward, ChainProxyFirewall}

func (b *builder) base() {
	jump := func(comment, chain string, matches ...Match) Rule {
		return Rule{Matches: append(matches, Comment{comment}), Target: JumpTo{chain}}
	}
	b.filter.Builtin["INPUT"] = []Rule{
		jump(commentFirewall, ChainProxyFirewall, newState()),
		jump(commentHealth, ChainNodePorts),
		jump(commentExternal, ChainExternalServices, newState()),
	}
	b.filter.Builtin["FORWARD"] = []Rule{
		jump(commentFirewall, ChainProxyFirewall, newState()),
		jump(commentForward, ChainForward),
		jump(commentPortals, ChainServices, newState()),
		jump(commentExternal, ChainExternalServices, newState()),
	}
	// The node's own traffic meets the refusals for external and LoadBalancer IPs too, as
	// in nftables mode: no rule routes it out toward an address nothing serves.
	b.filter.Builtin["OUTPUT"] = []Rule{
		jump(commentFirewall, ChainProxyFirewall, newState()),
		jump(commentPortals, ChainServices, newState()),
		jump(commentExternal, ChainExternalServices, newState()),
	}
	b.nat.Builtin["PREROUTING"] = []Rule{jump(commentPortals, ChainServices)}
	b.nat.Builtin["OUTPUT"] = []Rule{jump(commentPortals, ChainServices)}
	b.nat.Builtin["POSTROUTING"] = []Rule{jump(commentPostroute, ChainPostrouting)}

	for _, name := range fixedFilter {
		b.chain(b.filter, name)
	}
	fwd := b.filter.Chain(ChainForward)
	fwd.add(Rule{Matches: []Match{Comment{commentForward}, MarkMatch{Value: b.mark, Mask: b.mark}}, Target: Standard{"ACCEPT"}})
	fwd.add(Rule{Matches: []Match{Comment{"edgegate forwarding conntrack rule"}, CtState{States: []string{"RELATED", "ESTABLISHED"}}},
		Target: Standard{"ACCEPT"}})

	for _, name := range []string{ChainServices, ChainNodePorts, ChainPostrouting, ChainMarkMasq} {
		b.chain(b.nat, name)
	}
	b.nat.Chain(ChainMarkMasq).add(Rule{Target: MarkTarget{Mark: b.mark}})
	post := b.nat.Chain(ChainPostrouting)
	post.add(Rule{Matches: []Match{MarkMatch{Not: true, Value: b.mark, Mask: b.mark}}, Target: Standard{"RETURN"}})
	post.add(Rule{Target: MarkTarget{Xor: true, Mark: b.mark}})
	post.add(Rule{Matches: []Match{Comment{"edgegate service traffic requiring SNAT"}}, Target: MasqueradeTarget{}})
}

// nodePortDestinations are rules, one per destination guard, matching where node ports
// answer: every local address but loopback, or only those inside --nodeport-addresses.
// Callers add the addrtype LOCAL match.
func (b *builder) nodePortDestinations() []Rule {
	prefixes := plan.FamilyPrefixes(b.cfg.NodePortAddresses, b.f)
	if len(prefixes) == 0 {
		lo := netip.MustParsePrefix("127.0.0.0/8")
		if b.f == model.IPv6 {
			lo = netip.MustParsePrefix("::1/128")
		}
		return []Rule{{Dst: lo, DstNot: true}}
	}
	var out []Rule
	for _, p := range prefixes {
		out = append(out, Rule{Dst: p})
	}
	return out
}

// nodePortJumps sends node-port destinations to the node-port chain.
func (b *builder) nodePortJumps() []Rule {
	comment := Comment{"edgegate service nodeports; NOTE: this must be the last rule in this chain"}
	out := b.nodePortDestinations()
	for i := range out {
		out[i].Matches = []Match{comment, AddrType{}}
		out[i].Target = JumpTo{ChainNodePorts}
	}
	return out
}

func rejectWith(f model.Family) Target {
	if f == model.IPv6 {
		return RejectTarget{"icmp6-port-unreachable"}
	}
	return RejectTarget{"icmp-port-unreachable"}
}

// filterVerdict is the filter-table target for a frontend that is not forwarded.
func (b *builder) filterVerdict(o plan.Outcome) Target {
	if o == plan.Drop {
		return Standard{"DROP"}
	}
	return rejectWith(b.f)
}

func (b *builder) servicePort(p *plan.PortPolicy, services, nodePorts *Chain) {
	sp := p.SP
	name := sp.Name.String()
	proto := sp.Name.Protocol.Number()
	svc, svl := portChain("SVC", sp.Name), portChain("SVL", sp.Name)
	ext, fw := portChain("EXT", sp.Name), portChain("FW", sp.Name)
	frontend := func(dst netip.Addr, comment string, target Target) Rule {
		return Rule{Dst: host(dst), Proto: proto, Matches: []Match{Comment{comment}, DPort{proto, sp.Port}}, Target: target}
	}
	filterServices := b.filter.Chain(ChainServices)
	filterExternal := b.filter.Chain(ChainExternalServices)

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

	if p.Internal == plan.Forward {
		services.add(frontend(p.ClusterIP, name+" cluster IP", JumpTo{internal}))
	} else {
		filterServices.add(frontend(p.ClusterIP, name+" has no "+noEndpointsWhat(p.Internal), b.filterVerdict(p.Internal)))
	}
	if !p.IsExternal() {
		return
	}
	captured := p.External != plan.Reject
	firewalled := len(p.LBIPs) > 0 && sp.Firewalled()
	ranges := plan.FamilyPrefixes(sp.SourceRanges, p.Family)
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
		if p.External != plan.Forward {
			filterExternal.add(frontend(a, name+" has no "+noEndpointsWhat(p.External), b.filterVerdict(p.External)))
		}
	}
	if firewalled && captured && !closed {
		c := b.chain(b.nat, fw)
		for _, r := range ranges {
			c.add(Rule{Src: r, Matches: []Match{Comment{name + " loadbalancer IP"}}, Target: JumpTo{ext}})
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
					b.filter.Chain(ChainProxyFirewall).add(allowed)
				}
			}
			// What the firewall chain did not pass on was not translated: drop it here.
			b.filter.Chain(ChainProxyFirewall).add(frontend(a, name+" traffic not accepted by "+fw, Standard{"DROP"}))
		}
		if p.External != plan.Forward {
			filterExternal.add(frontend(a, name+" has no "+noEndpointsWhat(p.External), b.filterVerdict(p.External)))
		}
	}
	if sp.NodePort != 0 {
		np := Rule{Proto: proto, Matches: []Match{Comment{name}, DPort{proto, sp.NodePort}}}
		if captured {
			r := np
			r.Target = JumpTo{ext}
			nodePorts.add(r)
		}
		if p.External != plan.Forward {
			// Only where node ports answer: the same port on another local address, or on
			// loopback, is not this service's.
			for _, r := range b.nodePortDestinations() {
				r.Proto = proto
				r.Matches = []Match{Comment{name + " has no " + noEndpointsWhat(p.External)}, AddrType{}, DPort{proto, sp.NodePort}}
				r.Target = b.filterVerdict(p.External)
				filterExternal.add(r)
			}
		}
	}
	if sp.HealthCheckPort != 0 {
		b.filter.Chain(ChainNodePorts).add(Rule{Proto: 6, Matches: []Match{
			Comment{fmt.Sprintf("%s health check node port", sp.Name.ServiceName)}, DPort{6, sp.HealthCheckPort}},
			Target: Standard{"ACCEPT"}})
	}
}

func noEndpointsWhat(o plan.Outcome) string {
	if o == plan.Drop {
		return "local endpoints"
	}
	return "endpoints"
}

// external fills the EXT chain: masquerade and spread over the cluster (eTP Cluster), or
// keep outside traffic on local endpoints while the node's own traffic may use any.
func (b *builder) external(c *Chain, p *plan.PortPolicy, svc, svl string) {
	name := p.SP.Name.String()
	if p.UsesClusterForExternal {
		c.add(Rule{Matches: []Match{Comment{"masquerade traffic for " + name + " external destinations"}}, Target: JumpTo{ChainMarkMasq}})
		c.add(Rule{Target: JumpTo{svc}})
		return
	}
	// Only the node's own traffic is let off the Local policy: pods elsewhere reach this
	// gateway as outside traffic, as Policy and nftables mode have it.
	if len(p.Cluster) > 0 {
		c.add(Rule{Matches: []Match{Comment{"masquerade LOCAL traffic for " + name + " external destinations"}, AddrType{Source: true}},
			Target: JumpTo{ChainMarkMasq}})
		c.add(Rule{Matches: []Match{Comment{"route LOCAL traffic for " + name + " external destinations"}, AddrType{Source: true}},
			Target: JumpTo{svc}})
	}
	if len(p.Local) > 0 {
		c.add(Rule{Target: JumpTo{svl}})
	}
}

// dispatch fills an SVC or SVL chain: ClusterIP masquerade, affinity, then endpoints chosen
// with decreasing probabilities 1/n, 1/(n-1), ..., the last one unconditionally.
func (b *builder) dispatch(c *Chain, p *plan.PortPolicy, eps []model.Endpoint, internal bool) {
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
		r := Rule{Dst: host(p.ClusterIP), Proto: proto, Matches: []Match{Comment{name + " cluster IP"}, DPort{proto, sp.Port}},
			Target: JumpTo{ChainMarkMasq}}
		if b.cfg.MasqueradeAll {
			c.add(r)
		} else {
			for _, cidr := range plan.FamilyPrefixes(b.cfg.ClusterCIDRs, p.Family) {
				r.Src, r.SrcNot = cidr, true
				c.add(r)
			}
		}
	}
	if sp.AffinityTimeout > 0 {
		for _, e := range eps {
			sep := endpointChain(sp.Name, e)
			c.add(Rule{Matches: []Match{Comment{name + " -> " + e.String()}, Recent{Name: sep, Seconds: sp.AffinityTimeout}},
				Target: JumpTo{sep}})
		}
	}
	for i, e := range eps {
		m := append(make([]Match, 0, 2), Comment{name + " -> " + e.String()})
		if left := len(eps) - i; left > 1 {
			m = append(m, Statistic{Probability: 1 / float64(left)})
		}
		c.add(Rule{Matches: m, Target: JumpTo{endpointChain(sp.Name, e)}})
	}
}

// endpoint adds an SEP chain: hairpin masquerade, affinity record, DNAT.
func (b *builder) endpoint(p *plan.PortPolicy, e model.Endpoint) {
	sp := p.SP
	name := sp.Name.String()
	proto := sp.Name.Protocol.Number()
	sep := endpointChain(sp.Name, e)
	c := b.chain(b.nat, sep)
	c.Rules = make([]Rule, 0, 2)
	comment := Match(Comment{name}) // boxed once for both rules
	c.add(Rule{Src: host(e.Addr), Matches: []Match{comment}, Target: JumpTo{ChainMarkMasq}})
	m := append(make([]Match, 0, 3), comment)
	if sp.AffinityTimeout > 0 {
		m = append(m, Recent{Name: sep, Set: true})
	}
	m = append(m, DPort{Proto: proto})
	c.add(Rule{Proto: proto, Matches: m, Target: DNATTarget{To: netip.AddrPortFrom(e.Addr, e.Port)}})
}
