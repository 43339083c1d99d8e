// Package nft plans nftables mode: the `edgegate` table of each family (Table), planned
// whole (Build) or incrementally (Planner), and split into shard tables (Shards).
package nft

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Table is the nftables plan for one family: what the nftables backend programs into the
// `ip edgegate` or `ip6 edgegate` table. Rules are lists of typed statements (Stmt) that the
// backend turns into netlink expressions, the packet-flow tests interpret, and Dump prints in
// nft's own syntax.
type Table struct {
	Family model.Family
	Name   string
	Chains map[string]*Chain
	Sets   map[string]*Set
	// Conflicts lists keys that two service ports claimed; the first kept it.
	Conflicts []string

	owners map[string]map[Key]ownedElem
	// Delta, when set, says which objects may differ from Delta.From, the table the same
	// Planner planned before this one; everything else is the same value in both.
	Delta *Delta

	// record, when set, takes elem's calls instead (Planner's fragments).
	record *[]elemCall
	// owner is the Service whose port is being planned: its NAT dispatch chains and
	// affinity sets carry it (Chain.Dispatch).
	owner model.ServiceName
}

// Delta names the chains and sets a table may hold differently from From: added, removed
// or changed.
type Delta struct {
	From         *Table
	Chains, Sets map[string]bool
	// Elems, for some of the changed sets, lists exactly the elements added and removed,
	// so that a set of 100,000 elements is not compared whole for one change.
	Elems map[string]ElemChanges
}

// ElemsFrom returns the element changes of set name when d was planned from prev and
// lists them; d may be nil.
func (d *Delta) ElemsFrom(prev *Table, name string) (ElemChanges, bool) {
	if d == nil || d.From != prev {
		return ElemChanges{}, false
	}
	ch, ok := d.Elems[name]
	return ch, ok
}

// ElemChanges are the elements a set gained and lost.
type ElemChanges struct {
	Add, Del []Elem
}

// Chain is a base chain (Hook set) or a regular chain.
type Chain struct {
	Name  string
	Hook  *Hook
	Rules []Rule
	// Dispatch is the Service whose NAT dispatch this chain is part of (its service,
	// local, external and endpoint chains); zero for the layout's own chains and the
	// firewall chains. Split keeps a Service's dispatch together in one table.
	Dispatch model.ServiceName
}

// Hook makes a chain a base chain.
type Hook struct {
	Type     string // "filter" or "nat"
	Hook     string // "prerouting", "input", "forward", "output", "postrouting"
	Priority int
}

// Rule is a sequence of statements evaluated left to right, as in nft.
type Rule []Stmt

// KeyKind says which packet fields make up a set's key.
type KeyKind int

const (
	KeyAddr          KeyKind = iota // ip daddr / ip saddr
	KeyAddrProtoPort                // ip daddr . meta l4proto . th dport
	KeyProtoPort                    // meta l4proto . th dport
	KeyIndex                        // numgen random mod N
	// KeyHairpin is ip saddr . ip daddr; its elements hold one address twice (Key.Addr):
	// a connection from an endpoint that was DNATed back to that same endpoint.
	KeyHairpin
)

// Key is a set element key; which fields count depends on the set's KeyKind.
type Key struct {
	Addr  netip.Addr
	Proto uint8
	Port  uint16
	Index uint32
}

// Set is a named set, or a verdict map when Map is true.
type Set struct {
	Name    string
	Key     KeyKind
	Map     bool
	Dynamic bool   // filled by the data path (affinity); the backend never rewrites elements
	Timeout uint32 // seconds, for dynamic sets; 0 for none
	Size    uint32 // the most elements a dynamic set holds; 0 for the kernel's default
	Elems   []Elem
	// Dispatch is the Service whose dispatch uses the set (affinity), as for chains.
	Dispatch model.ServiceName
}

// Elem is one element; Verdict is set for maps.
type Elem struct {
	Key     Key
	Verdict Verdict
}

// VerdictKind is an nftables verdict.
type VerdictKind int

const (
	VerdictNone VerdictKind = iota
	VerdictAccept
	VerdictDrop
	VerdictReturn
	VerdictJump
	VerdictGoto
)

// Verdict is an nftables verdict with its target chain.
type Verdict struct {
	Kind  VerdictKind
	Chain string
}

func (v Verdict) String() string {
	switch v.Kind {
	case VerdictAccept:
		return "accept"
	case VerdictDrop:
		return "drop"
	case VerdictReturn:
		return "return"
	case VerdictJump:
		return "jump " + v.Chain
	case VerdictGoto:
		return "goto " + v.Chain
	}
	return ""
}

// Stmt is one statement of a rule.
type Stmt interface{ nft(f model.Family) string }

type (
	// CtStateNew matches the first packet of a connection.
	CtStateNew struct{}
	// CtStatusDNAT matches a connection whose destination was rewritten (ct status dnat).
	CtStatusDNAT struct{}
	// MatchKeySet looks the packet's key of kind Key up in a named set.
	MatchKeySet struct {
		Key KeyKind
		Set string
	}
	// MatchAddr matches the source or destination address against a prefix.
	MatchAddr struct {
		Source bool
		Not    bool
		Prefix netip.Prefix
	}
	// MatchAddrSet looks the source or destination address up in a named set.
	MatchAddrSet struct {
		Source bool
		Set    string
	}
	// MatchFibLocal matches when the (source or destination) address is local to this host.
	MatchFibLocal struct{ Source bool }
	// MatchProto matches the L4 protocol.
	MatchProto struct{ Proto uint8 }
	// MatchMarkClear matches when the masquerade bit is not set.
	MatchMarkClear struct{ Bit uint32 }
	// VMap dispatches through a verdict map keyed by the packet.
	VMap struct {
		Key KeyKind
		Map string
	}
	// Numgen picks an element of a KeyIndex verdict map at random, uniformly.
	Numgen struct {
		Mod uint32
		Map string
	}
	// Pick matches one packet in Mod at random: numgen random mod Mod == 0. Rules with
	// Mod counting down to 1 choose among themselves uniformly, as the statistic match
	// of iptables mode does.
	Pick struct{ Mod uint32 }
	// SetMark ORs the masquerade bit into the packet mark; ClearMark XORs it back out.
	SetMark   struct{ Bit uint32 }
	ClearMark struct{ Bit uint32 }
	// Counter counts the packets that reach it (in NAT chains: a connection's first).
	// Name labels it: the rule carries it as its comment, which is how the dashboard
	// finds the count. An anonymous counter, not a named object: 100,000 named counters
	// cost the kernel a lookup each when rules are added, a check each whenever any rule
	// is (objref validation), and a dump of them takes seconds.
	Counter struct{ Name string }
	// UpdateSource adds or refreshes the source address in a dynamic set (affinity).
	UpdateSource struct{ Set string }
	// DNAT rewrites the destination to an endpoint.
	DNAT struct {
		Proto uint8
		To    netip.AddrPort
	}
	// Masquerade SNATs to the outgoing interface's address.
	Masquerade struct{}
	// RejectStmt refuses the packet: a TCP reset, or ICMP port unreachable.
	RejectStmt struct{ TCPReset bool }
	// Do ends a rule with a verdict.
	Do struct{ Verdict }

	// MatchCtState matches when the connection's state is one of States.
	MatchCtState struct{ States CtStates }
	// MatchSynOnly matches a TCP packet with SYN set and FIN, RST and ACK clear: a
	// handshake's first packet. MatchNotSyn matches a TCP packet without SYN.
	MatchSynOnly struct{}
	MatchNotSyn  struct{}
	// Notrack keeps the packet out of connection tracking (raw priority only).
	Notrack struct{}
	// SynProxy answers a SYN with a SYN cookie and, once the client's ACK proves the
	// cookie, opens the connection to the destination itself (nftables synproxy).
	SynProxy struct {
		MSS    uint16
		WScale uint8
	}
	// DNATSelf binds the connection's destination NAT to the destination it has: the
	// kernel then runs no later NAT chain of the hook for it.
	DNATSelf struct{}
	// OverSourceRate matches when the packet's source (an IPv4 address, or an IPv6
	// address's first SourceBits bits) opens connections faster than Rate a second with
	// bursts of Burst, per the dynamic set Set.
	OverSourceRate struct {
		Set         string
		Rate, Burst uint32
		SourceBits  int
	}
	// OverSourceConns counts the connection against its source in the dynamic set Set
	// and matches when the source holds more than Max.
	OverSourceConns struct {
		Set        string
		Max        uint32
		SourceBits int
	}
)

// CtStates is a set of conntrack states.
type CtStates uint8

const (
	CtInvalid CtStates = 1 << iota
	CtNew
	CtUntracked
)

func (s CtStates) String() string {
	var out []string
	for _, st := range []struct {
		bit  CtStates
		name string
	}{{CtInvalid, "invalid"}, {CtNew, "new"}, {CtUntracked, "untracked"}} {
		if s&st.bit != 0 {
			out = append(out, st.name)
		}
	}
	return strings.Join(out, ",")
}

func addrKeyword(f model.Family) string {
	if f == model.IPv6 {
		return "ip6"
	}
	return "ip"
}

func dir(source bool) string {
	if source {
		return "saddr"
	}
	return "daddr"
}

func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}

func (CtStateNew) nft(model.Family) string   { return "ct state new" }
func (CtStatusDNAT) nft(model.Family) string { return "ct status dnat" }
func (m MatchKeySet) nft(f model.Family) string {
	return fmt.Sprintf("%s @%s", keyExpr(m.Key, f), m.Set)
}
func (m MatchAddr) nft(f model.Family) string {
	op := ""
	if m.Not {
		op = "!= "
	}
	return fmt.Sprintf("%s %s %s%s", addrKeyword(f), dir(m.Source), op, prefixString(m.Prefix))
}
func (m MatchAddrSet) nft(f model.Family) string {
	return fmt.Sprintf("%s %s @%s", addrKeyword(f), dir(m.Source), m.Set)
}
func (m MatchFibLocal) nft(model.Family) string {
	return fmt.Sprintf("fib %s type local", dir(m.Source))
}
func (m MatchProto) nft(model.Family) string { return "meta l4proto " + plan.ProtoName(m.Proto) }
func (m MatchMarkClear) nft(model.Family) string {
	return fmt.Sprintf("meta mark & 0x%08x == 0x00000000", m.Bit)
}
func (v VMap) nft(f model.Family) string {
	return fmt.Sprintf("%s vmap @%s", keyExpr(v.Key, f), v.Map)
}
func (n Numgen) nft(model.Family) string {
	return fmt.Sprintf("numgen random mod %d vmap @%s", n.Mod, n.Map)
}
func (p Pick) nft(model.Family) string { return fmt.Sprintf("numgen random mod %d 0", p.Mod) }
func (s SetMark) nft(model.Family) string {
	return fmt.Sprintf("meta mark set meta mark | 0x%08x", s.Bit)
}
func (s ClearMark) nft(model.Family) string {
	return fmt.Sprintf("meta mark set meta mark ^ 0x%08x", s.Bit)
}
func (Counter) nft(model.Family) string { return "counter" }
func (u UpdateSource) nft(f model.Family) string {
	return fmt.Sprintf("update @%s { %s saddr }", u.Set, addrKeyword(f))
}
func (d DNAT) nft(f model.Family) string {
	return fmt.Sprintf("meta l4proto %s dnat %s to %s", plan.ProtoName(d.Proto), addrKeyword(f), d.To)
}
func (Masquerade) nft(model.Family) string { return "masquerade fully-random" }
func (r RejectStmt) nft(model.Family) string {
	if r.TCPReset {
		return "meta l4proto tcp reject with tcp reset"
	}
	return "reject"
}
func (d Do) nft(model.Family) string           { return d.String() }
func (m MatchCtState) nft(model.Family) string { return "ct state " + m.States.String() }
func (MatchSynOnly) nft(model.Family) string {
	return "tcp flags & (fin|syn|rst|ack) == syn"
}
func (MatchNotSyn) nft(model.Family) string { return "tcp flags & syn == 0" }
func (Notrack) nft(model.Family) string     { return "notrack" }
func (s SynProxy) nft(model.Family) string {
	return fmt.Sprintf("synproxy mss %d wscale %d timestamp sack-perm", s.MSS, s.WScale)
}
func (DNATSelf) nft(f model.Family) string { return "dnat to " + addrKeyword(f) + " daddr" }
func (o OverSourceRate) nft(f model.Family) string {
	return fmt.Sprintf("update @%s { %s limit rate over %d/second burst %d packets }", o.Set, sourceKey(f, o.SourceBits), o.Rate, o.Burst)
}
func (o OverSourceConns) nft(f model.Family) string {
	return fmt.Sprintf("add @%s { %s ct count over %d }", o.Set, sourceKey(f, o.SourceBits), o.Max)
}

// sourceKey is the source address, masked to its first bits when they are fewer than all.
func sourceKey(f model.Family, bits int) string {
	k := addrKeyword(f) + " saddr"
	if bits <= 0 || f == model.IPv4 || bits >= 128 {
		return k
	}
	return k + " & " + SourceMask(bits).String()
}

// SourceMask is the IPv6 address with the first bits set: a prefix's mask.
func SourceMask(bits int) netip.Addr {
	var b [16]byte
	for i := range min(bits, 128) {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom16(b)
}

func keyExpr(k KeyKind, f model.Family) string {
	switch k {
	case KeyAddrProtoPort:
		return addrKeyword(f) + " daddr . meta l4proto . th dport"
	case KeyProtoPort:
		return "meta l4proto . th dport"
	case KeyHairpin:
		return addrKeyword(f) + " saddr . " + addrKeyword(f) + " daddr"
	}
	return addrKeyword(f) + " daddr"
}

func keyType(k KeyKind, f model.Family) string {
	addr := "ipv4_addr"
	if f == model.IPv6 {
		addr = "ipv6_addr"
	}
	switch k {
	case KeyAddrProtoPort:
		return addr + " . inet_proto . inet_service"
	case KeyProtoPort:
		return "inet_proto . inet_service"
	case KeyIndex:
		return "mark"
	case KeyHairpin:
		return addr + " . " + addr
	}
	return addr
}

func (k Key) format(kind KeyKind) string {
	switch kind {
	case KeyAddrProtoPort:
		return fmt.Sprintf("%s . %s . %d", k.Addr, plan.ProtoName(k.Proto), k.Port)
	case KeyProtoPort:
		return fmt.Sprintf("%s . %d", plan.ProtoName(k.Proto), k.Port)
	case KeyIndex:
		return fmt.Sprintf("0x%08x", k.Index)
	case KeyHairpin:
		return fmt.Sprintf("%s . %s", k.Addr, k.Addr)
	}
	return k.Addr.String()
}

// SetRefs lists the named sets and maps a rule refers to.
func (r Rule) SetRefs() []string {
	var out []string
	for _, s := range r {
		switch s := s.(type) {
		case MatchAddrSet:
			out = append(out, s.Set)
		case MatchKeySet:
			out = append(out, s.Set)
		case VMap:
			out = append(out, s.Map)
		case Numgen:
			out = append(out, s.Map)
		case UpdateSource:
			out = append(out, s.Set)
		case OverSourceRate:
			out = append(out, s.Set)
		case OverSourceConns:
			out = append(out, s.Set)
		}
	}
	return out
}

// String renders a rule in nft syntax.
func (r Rule) String(f model.Family) string {
	parts := make([]string, len(r))
	for i, s := range r {
		parts[i] = s.nft(f)
	}
	if c, ok := r.Comment(); ok {
		parts = append(parts, fmt.Sprintf("comment %q", c))
	}
	return strings.Join(parts, " ")
}

// Comment is the rule's comment: the name of its counter, if it has one.
func (r Rule) Comment() (string, bool) {
	for _, s := range r {
		if c, ok := s.(Counter); ok {
			return c.Name, true
		}
	}
	return "", false
}

// MaxComment is the longest comment the kernel keeps with a rule: nft(8)'s user data is
// type, length (one byte) and the string with its NUL.
const MaxComment = 254

// Dump renders the table in nft's list syntax, sorted, one element or rule per line, so
// golden files and diffs stay readable.
func (t *Table) Dump() string {
	var b strings.Builder
	fam := addrKeyword(t.Family)
	fmt.Fprintf(&b, "table %s %s {\n", fam, t.Name)
	for _, name := range sortedKeys(t.Sets) {
		s := t.Sets[name]
		kw := "set"
		typ := keyType(s.Key, t.Family)
		if s.Map {
			kw, typ = "map", typ+" : verdict"
		}
		fmt.Fprintf(&b, "\t%s %s {\n\t\ttype %s\n", kw, s.Name, typ)
		switch {
		case s.Dynamic && s.Timeout > 0:
			fmt.Fprintf(&b, "\t\tflags dynamic,timeout\n\t\ttimeout %ds\n", s.Timeout)
		case s.Dynamic:
			b.WriteString("\t\tflags dynamic\n")
		}
		if s.Size > 0 {
			fmt.Fprintf(&b, "\t\tsize %d\n", s.Size)
		}
		for _, e := range s.sortedElems() {
			if s.Map {
				fmt.Fprintf(&b, "\t\telement %s : %s\n", e.Key.format(s.Key), e.Verdict)
			} else {
				fmt.Fprintf(&b, "\t\telement %s\n", e.Key.format(s.Key))
			}
		}
		b.WriteString("\t}\n")
	}
	for _, name := range t.ChainNames() {
		c := t.Chains[name]
		fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
		if h := c.Hook; h != nil {
			fmt.Fprintf(&b, "\t\ttype %s hook %s priority %d\n", h.Type, h.Hook, h.Priority)
		}
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r.String(t.Family))
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// ChainNames lists base chains first, then regular chains, each sorted by name.
func (t *Table) ChainNames() []string {
	names := sortedKeys(t.Chains)
	sort.SliceStable(names, func(i, j int) bool {
		return t.Chains[names[i]].Hook != nil && t.Chains[names[j]].Hook == nil
	})
	return names
}

func (s *Set) sortedElems() []Elem {
	out := append([]Elem(nil), s.Elems...)
	sort.Slice(out, func(i, j int) bool {
		if s.Key == KeyIndex {
			return out[i].Key.Index < out[j].Key.Index
		}
		return out[i].Key.format(s.Key) < out[j].Key.format(s.Key)
	})
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Validate checks that every chain and set a rule or map element refers to exists, so a
// plan the kernel would refuse is caught with a readable error first.
func (t *Table) Validate() error {
	chainRef := func(where string, v Verdict) error {
		if (v.Kind == VerdictJump || v.Kind == VerdictGoto) && t.Chains[v.Chain] == nil {
			return fmt.Errorf("%s: %s to missing chain %q", where, v, v.Chain)
		}
		return nil
	}
	for _, name := range sortedKeys(t.Chains) {
		for i, r := range t.Chains[name].Rules {
			where := fmt.Sprintf("chain %s rule %d", name, i)
			for _, s := range r.SetRefs() {
				if t.Sets[s] == nil {
					return fmt.Errorf("%s: missing set %q", where, s)
				}
			}
			for _, s := range r {
				switch s := s.(type) {
				case Do:
					if err := chainRef(where, s.Verdict); err != nil {
						return err
					}
				case Counter:
					if len(s.Name) > MaxComment {
						return fmt.Errorf("%s: counter name %q longer than a rule's comment can be (%d bytes)", where, s.Name, MaxComment)
					}
				}
			}
		}
	}
	for _, name := range sortedKeys(t.Sets) {
		s := t.Sets[name]
		for _, e := range s.Elems {
			if err := chainRef("map "+name, e.Verdict); err != nil {
				return err
			}
		}
	}
	return nil
}
