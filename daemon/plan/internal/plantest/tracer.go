// Package plantest is the shared test support of the proxy modes' plans: the demo lab's
// address plan and fixtures, a packet-flow tracer per mode (NewNFTTracer, NewIPTTracer,
// NewIPVSTracer) behind one Tracer interface, the scenario table every mode runs
// (Scenarios, RunScenarios) and the fuzz world of every mode's FuzzPlan.
package plantest

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// Tracer is one mode's packet-flow tracer over its plan of one family.
type Tracer interface {
	// Results lists the distinct results a packet can have, sorted, with the masquerade
	// marker: "10.200.2.11:8080 (masqueraded)", "REJECT".
	Results(Packet) []string
	// All returns every outcome, with the rules that fired, in choice order.
	All(Packet) []Outcome
}

// Trails renders outcomes with the rules that fired, for failure messages.
func Trails(os []Outcome) string {
	var b strings.Builder
	for _, o := range os {
		b.WriteString(o.String() + ":\n\t" + strings.Join(o.Matched, "\n\t") + "\n")
	}
	return b.String()
}

// distinct lists the distinct results of outcomes, sorted, with the masquerade marker.
func distinct(os []Outcome) []string {
	var out []string
	for _, o := range os {
		out = append(out, o.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// node is what every tracer knows of the node: its addresses, and how to fail.
type node struct {
	t testing.TB
	// local are the node's addresses: local-address matches match them, and a packet to
	// one of them is delivered (input) rather than forwarded.
	local []netip.Addr
	// fail reports a tracer or plan error; it must not return. Defaults to t.Fatalf.
	fail func(format string, args ...any)
}

func newNode(t testing.TB, local []string) node {
	n := node{t: t, fail: func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format, args...)
	}}
	for _, a := range local {
		n.local = append(n.local, netip.MustParseAddr(a))
	}
	return n
}

func (n *node) isLocal(a netip.Addr) bool { return slices.Contains(n.local, a) }

// packetState is what a tracer's walk knows of its packet: the packet, and what the rules
// did to it so far.
type packetState struct {
	p       Packet
	mark    uint32
	dnat    netip.AddrPort
	masq    bool
	matched []string
}

// dst is the destination address the packet has now, after any DNAT.
func (s *packetState) dst() netip.Addr {
	if s.dnat.IsValid() {
		return s.dnat.Addr()
	}
	return s.p.dst
}

// dport is the destination port the packet has now, after any DNAT.
func (s *packetState) dport() uint16 {
	if s.dnat.IsValid() {
		return s.dnat.Port()
	}
	return s.p.dport
}

func (s *packetState) outcome(result string) Outcome {
	return Outcome{Result: result, Masq: s.masq, Matched: s.matched}
}

// addrSets is the state packets leave for the packets after them: named sets of client
// addresses (nftables' dynamic sets, iptables' recent lists).
type addrSets map[string]map[netip.Addr]bool

func (s addrSets) add(name string, a netip.Addr) {
	if s[name] == nil {
		s[name] = map[netip.Addr]bool{}
	}
	s[name][a] = true
}

func (s addrSets) clone() addrSets {
	out := make(addrSets, len(s))
	for k, v := range s {
		out[k] = maps.Clone(v)
	}
	return out
}
