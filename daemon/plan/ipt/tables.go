// Package ipt plans iptables mode: edgegate's chains in the nat and filter tables of each
// family (Tables), planned whole (Build) or incrementally (Planner).
package ipt

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Tables is the iptables plan of one family: edgegate's chains in the nat and filter
// tables and the jumps it adds to their built-in chains. The kernel/ipt backend writes it
// through netlink in iptables-nft's encoding; Dump prints it as iptables-save does, so a
// golden file, `iptables-nft-save` and this plan can be compared line by line.
type Tables struct {
	Family model.Family
	Tables []*Table // "filter" then "nat", as iptables-save prints them
}

// Table is one iptables table.
type Table struct {
	Name string
	// Builtin holds, per built-in chain (PREROUTING, INPUT, ...), the rules edgegate puts
	// there: they jump to edgegate's chains and are recognised by their comment.
	Builtin map[string][]Rule
	// Chains are edgegate's own chains, in the order they are declared.
	Chains []*Chain
}

// Chain is a user-defined chain.
type Chain struct {
	Name  string
	Rules []Rule
}

// Rule is one rule: the ipt_entry fields first (addresses, protocol), then matches in
// order, then the target — the order iptables-save prints them in.
type Rule struct {
	Src, Dst       netip.Prefix // invalid = any
	SrcNot, DstNot bool
	Proto          uint8 // 0 = any
	Matches        []Match
	Target         Target
}

// Match is a -m match.
type Match interface{ save(f model.Family) string }

// Target is a -j target.
type Target interface{ save(f model.Family) string }

type (
	// Comment is -m comment --comment.
	Comment struct{ Text string }
	// DPort is -m tcp/udp/sctp --dport; with Port 0 it is the bare protocol match kube-proxy
	// puts before a DNAT.
	DPort struct {
		Proto uint8
		Port  uint16
	}
	// AddrType is -m addrtype --src-type/--dst-type LOCAL.
	AddrType struct {
		Source bool
		Not    bool
	}
	// CtState is -m conntrack --ctstate.
	CtState struct{ States []string }
	// MarkMatch is -m mark [!] --mark value/mask.
	MarkMatch struct {
		Not         bool
		Value, Mask uint32
	}
	// Statistic is -m statistic --mode random --probability.
	Statistic struct{ Probability float64 }
	// Recent is -m recent for ClientIP affinity: --set records the source, --rcheck with
	// --seconds and --reap tests it.
	Recent struct {
		Name    string
		Set     bool
		Seconds uint32
	}
)

type (
	// JumpTo is -j CHAIN.
	JumpTo struct{ Chain string }
	// Standard is -j ACCEPT, DROP or RETURN.
	Standard struct{ Verdict string }
	// RejectTarget is -j REJECT --reject-with.
	RejectTarget struct{ With string }
	// DNATTarget is -j DNAT --to-destination.
	DNATTarget struct{ To netip.AddrPort }
	// MasqueradeTarget is -j MASQUERADE --random-fully.
	MasqueradeTarget struct{}
	// MarkTarget is -j MARK --or-mark or --xor-mark.
	MarkTarget struct {
		Xor  bool
		Mark uint32
	}
)

func (c Comment) save(model.Family) string {
	return fmt.Sprintf("-m comment --comment %s", quoteComment(c.Text))
}
func (d DPort) save(model.Family) string {
	if d.Port == 0 {
		return "-m " + plan.ProtoName(d.Proto)
	}
	return fmt.Sprintf("-m %s --dport %d", plan.ProtoName(d.Proto), d.Port)
}
func (a AddrType) save(model.Family) string {
	dir := "--dst-type"
	if a.Source {
		dir = "--src-type"
	}
	not := ""
	if a.Not {
		not = "! "
	}
	return fmt.Sprintf("-m addrtype %s%s LOCAL", not, dir)
}
func (c CtState) save(model.Family) string {
	return "-m conntrack --ctstate " + strings.Join(c.States, ",")
}
func (m MarkMatch) save(model.Family) string {
	not := ""
	if m.Not {
		not = "! "
	}
	return fmt.Sprintf("-m mark %s--mark 0x%x/0x%x", not, m.Value, m.Mask)
}
func (s Statistic) save(model.Family) string {
	return fmt.Sprintf("-m statistic --mode random --probability %.11f", StatisticProbability(s.Probability))
}

// save prints the mask the kernel holds, the family's all-ones address (every client address
// counts on its own); iptables 1.8.9 prints it, later versions leave this default out.
func (r Recent) save(f model.Family) string {
	mask := "255.255.255.255"
	if f == model.IPv6 {
		mask = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}
	if r.Set {
		return fmt.Sprintf("-m recent --set --name %s --mask %s --rsource", r.Name, mask)
	}
	return fmt.Sprintf("-m recent --rcheck --seconds %d --reap --name %s --mask %s --rsource", r.Seconds, r.Name, mask)
}

func (j JumpTo) save(model.Family) string       { return "-j " + j.Chain }
func (s Standard) save(model.Family) string     { return "-j " + s.Verdict }
func (r RejectTarget) save(model.Family) string { return "-j REJECT --reject-with " + r.With }
func (d DNATTarget) save(model.Family) string {
	return "-j DNAT --to-destination " + d.To.String()
}
func (MasqueradeTarget) save(model.Family) string { return "-j MASQUERADE --random-fully" }

// save prints what iptables-save prints for the kernel's MARK target, which keeps a value
// and a mask for both: --or-mark M is --set-xmark M/M, --xor-mark M is --set-xmark M/0.
func (m MarkTarget) save(model.Family) string {
	if m.Xor {
		return fmt.Sprintf("-j MARK --set-xmark 0x%x/0x0", m.Mark)
	}
	return fmt.Sprintf("-j MARK --set-xmark 0x%x/0x%x", m.Mark, m.Mark)
}

// StatisticProbability is the probability the kernel really uses for p: xt_statistic keeps
// it as a fraction of 2^31, and iptables-save prints that fraction.
func StatisticProbability(p float64) float64 {
	return float64(StatisticFraction(p)) / 0x80000000
}

// StatisticFraction is p as the 32-bit value xt_statistic_info holds.
func StatisticFraction(p float64) uint32 { return uint32(math.Round(0x80000000 * p)) }

// quoteComment quotes like iptables-save: always in double quotes, with quotes escaped.
func quoteComment(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

// Save renders a rule as iptables-save prints it, after "-A CHAIN ".
func (r Rule) Save(f model.Family) string {
	var parts []string
	hostBits := 32
	if f == model.IPv6 {
		hostBits = 128
	}
	addr := func(not bool, flag string, p netip.Prefix) {
		// iptables leaves out a match on any address and prints prefixes masked.
		if !p.IsValid() || p.Bits() == 0 && !not {
			return
		}
		s := p.Masked().String()
		if p.Bits() == hostBits {
			s = p.Addr().String() + fmt.Sprintf("/%d", hostBits)
		}
		if not {
			parts = append(parts, "!")
		}
		parts = append(parts, flag, s)
	}
	addr(r.SrcNot, "-s", r.Src)
	addr(r.DstNot, "-d", r.Dst)
	if r.Proto != 0 {
		parts = append(parts, "-p", plan.ProtoName(r.Proto))
	}
	for _, m := range r.Matches {
		parts = append(parts, m.save(f))
	}
	if r.Target != nil {
		parts = append(parts, r.Target.save(f))
	}
	return strings.Join(parts, " ")
}

// Dump renders the plan in iptables-save's format: per table, edgegate's chain
// declarations, the rules it adds to built-in chains, then its own chains' rules, with the
// chains in name order as iptables-nft-save lists them.
func (p *Tables) Dump() string {
	var b strings.Builder
	for _, t := range p.Tables {
		chains := slices.SortedFunc(slices.Values(t.Chains), func(x, y *Chain) int { return strings.Compare(x.Name, y.Name) })
		fmt.Fprintf(&b, "*%s\n", t.Name)
		for _, c := range chains {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c.Name)
		}
		for _, hook := range builtinOrder(t) {
			for _, r := range t.Builtin[hook] {
				fmt.Fprintf(&b, "-A %s %s\n", hook, r.Save(p.Family))
			}
		}
		for _, c := range chains {
			for _, r := range c.Rules {
				fmt.Fprintf(&b, "-A %s %s\n", c.Name, r.Save(p.Family))
			}
		}
		b.WriteString("COMMIT\n")
	}
	return b.String()
}

// BuiltinChains lists the built-in chains of a table in the kernel's hook order.
func BuiltinChains(table string) []string {
	if table == "nat" {
		return []string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}
	}
	return []string{"INPUT", "FORWARD", "OUTPUT"}
}

func builtinOrder(t *Table) []string {
	var out []string
	for _, c := range BuiltinChains(t.Name) {
		if len(t.Builtin[c]) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// Chain returns a table's chain by name, or nil.
func (t *Table) Chain(name string) *Chain {
	for _, c := range t.Chains {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Table returns the plan's table by name, or nil.
func (p *Tables) Table(name string) *Table {
	for _, t := range p.Tables {
		if t.Name == name {
			return t
		}
	}
	return nil
}
