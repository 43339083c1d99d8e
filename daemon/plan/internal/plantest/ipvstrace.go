package plantest

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/plan/ipvs"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// A packet-flow tracer for IPVS plans: it walks a new connection's first packet through
// the auxiliary table's base chains with the nftables tracer's interpreter and puts IPVS
// where the kernel has it:
//
//   - from outside, the packet passes prerouting and is routed; to a local address (a node
//     address or a VIP on the dummy interface) it passes the input filter chains, then IPVS
//     at LOCAL_IN (priority 98/99). A virtual server without a weighted real server answers
//     ICMP port unreachable (ip_vs_leave): REJECT. Otherwise IPVS rewrites the destination
//     and sends the packet out through LOCAL_OUT, where only the filter chains run (the
//     connection's destination NAT was settled in prerouting), then postrouting.
//   - from the node, the packet passes the output chains below IPVS's LOCAL_OUT priority
//     (-98), then IPVS, then postrouting.
//
// A packet that matches no virtual server goes on as the nftables tracer would take it.

// IPVS's hook priorities.
const (
	ipvsLocalInPrio  = 99
	ipvsLocalOutPrio = -98
)

// IPVSTracer runs packets through one family's IPVS plan.
type IPVSTracer struct {
	t    testing.TB
	plan *ipvs.Plan
	aux  *NFTTracer
}

// NewIPVSTracer returns a tracer over p for a node with the addresses local.
func NewIPVSTracer(t testing.TB, p *ipvs.Plan, local ...string) *IPVSTracer {
	aux := NewNFTTracer(t, p.Aux, local...)
	// The dummy interface's addresses are local too: that is how traffic to a VIP reaches
	// IPVS at all.
	aux.local = append(aux.local, p.VIPs...)
	return &IPVSTracer{t: t, plan: p, aux: aux}
}

// Results lists the distinct results over every weighted real server, sorted, with the
// masquerade marker, as NFTTracer.Results does for numgen choices.
func (it *IPVSTracer) Results(p Packet) []string {
	it.t.Helper()
	return distinct(it.All(p))
}

// All returns one outcome per weighted real server (or the single outcome of a packet
// that IPVS does not schedule).
func (it *IPVSTracer) All(p Packet) []Outcome {
	it.t.Helper()
	it.aux.checkBaseChains()
	r := &run{packetState: packetState{p: p}, tr: it.aux, choose: func(uint32) uint32 { return 0 }, dynamic: addrSets{}}
	// IPVS schedules at LOCAL_IN what arrives for a local address, and at LOCAL_OUT what
	// the node sends.
	scheduled := p.fromNode || it.aux.isLocal(p.dst)
	var before []string
	var keep func(*nft.Chain) bool
	switch {
	case p.fromNode:
		before, keep = []string{"output"}, func(c *nft.Chain) bool { return c.Hook.Priority < ipvsLocalOutPrio }
	case scheduled:
		before, keep = []string{"prerouting", "input"}, func(c *nft.Chain) bool { return c.Hook.Hook != "input" || c.Hook.Priority < ipvsLocalInPrio }
	default:
		before, keep = []string{"prerouting"}, func(*nft.Chain) bool { return true }
	}
	for _, h := range before {
		if res, done := it.hook(r, h, keep); done {
			return []Outcome{r.outcome(res)}
		}
	}
	var vs *ipvs.VirtualServer
	if scheduled {
		vs = it.lookup(p)
	}
	if vs == nil {
		return []Outcome{it.unscheduled(r)}
	}
	// After IPVS: from outside, the packet leaves through LOCAL_OUT, where only filter
	// chains still run; from the node, IPVS ran inside LOCAL_OUT, so only the chains
	// after it do.
	after := func(c *nft.Chain) bool { return c.Hook.Hook != "output" || c.Hook.Type == "filter" }
	if p.fromNode {
		after = func(c *nft.Chain) bool { return c.Hook.Hook != "output" || c.Hook.Priority > ipvsLocalOutPrio }
	}
	var out []Outcome
	for _, real := range vs.Reals {
		if real.Weight == 0 {
			continue
		}
		rr := *r
		rr.matched = append(slices.Clone(r.matched), "ipvs: "+vs.VSKey.String()+" -> "+real.AddrPort().String())
		rr.dnat = real.AddrPort()
		res := rr.dnat.String()
		for _, h := range []string{"output", "postrouting"} {
			if end, done := it.hook(&rr, h, after); done {
				res = end
				break
			}
		}
		out = append(out, rr.outcome(res))
	}
	if len(out) == 0 {
		r.matched = append(r.matched, "ipvs: "+vs.VSKey.String()+" has no weighted real server")
		return []Outcome{r.outcome(Reject)}
	}
	return out
}

// hook runs the base chains of one hook that keep selects; done when one dropped or
// rejected the packet.
func (it *IPVSTracer) hook(r *run, hook string, keep func(*nft.Chain) bool) (string, bool) {
	for _, c := range it.aux.baseChains(hook) {
		if !keep(c) {
			continue
		}
		switch r.base(c) {
		case endDrop:
			return Drop, true
		case endReject:
			return Reject, true
		}
	}
	return "", false
}

// unscheduled finishes a packet IPVS did not take: the rest of its hooks, as the
// nftables tracer walks them.
func (it *IPVSTracer) unscheduled(r *run) Outcome {
	p := r.p
	var rest []string
	keep := func(*nft.Chain) bool { return true }
	switch {
	case p.fromNode:
		rest = []string{"output", "postrouting"}
		keep = func(c *nft.Chain) bool { return c.Hook.Hook != "output" || c.Hook.Priority > ipvsLocalOutPrio }
		if it.aux.isLocal(p.dst) {
			rest = append(rest, "input")
		}
	case it.aux.isLocal(p.dst):
		rest = []string{"input"}
		keep = func(c *nft.Chain) bool { return c.Hook.Priority > ipvsLocalInPrio }
	default:
		rest = []string{"forward", "postrouting"}
	}
	for _, h := range rest {
		if res, done := it.hook(r, h, keep); done {
			return r.outcome(res)
		}
	}
	return r.outcome(Accept)
}

// lookup finds the virtual server of a packet, as IPVS matches: exact address, protocol
// and port.
func (it *IPVSTracer) lookup(p Packet) *ipvs.VirtualServer {
	k := ipvs.VSKey{Addr: p.dst, Proto: p.proto, Port: p.dport}
	for i := range it.plan.Servers {
		if it.plan.Servers[i].VSKey == k {
			return &it.plan.Servers[i]
		}
	}
	return nil
}

// IPVSConfig is cfg with the node's addresses (NodeAddrs) for IPVS mode.
func IPVSConfig(cfg plan.Config) ipvs.Config {
	c := ipvs.Config{Config: cfg}
	for _, a := range NodeAddrs {
		c.NodeAddrs = append(c.NodeAddrs, netip.MustParseAddr(a))
	}
	return c
}
