// Package mgmt keeps the management plane's source allow-list in the kernel: an nftables
// table of its own, inet edgegate-mgmt, whose input chain drops TCP to the dashboard's
// addresses and ports from every source outside the list, in both IP families. It belongs
// to no proxy mode: switching modes leaves it alone, and only `edgegate --cleanup` (or a
// daemon started without a dashboard) removes it.
package mgmt

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is the table's name in the inet family.
const TableName = "edgegate-mgmt"

// Chain names: input is the base chain at the input hook, allowlist the sources let in.
const (
	inputChain = "input"
	allowChain = "allowlist"
)

// Rules is the allow-list: TCP to each of Endpoints from a source outside Allowed is
// dropped. An endpoint with an unspecified address (0.0.0.0, ::) stands for every local
// address of its family. Loopback traffic is never dropped.
type Rules struct {
	Endpoints []netip.AddrPort
	Allowed   []netip.Prefix
}

// Kernel writes Rules through netlink in the current network namespace.
type Kernel struct{ mu sync.Mutex }

// Apply replaces the table with r in one transaction (packets meet the old table or the new
// one, never none); with no endpoints it removes the table.
func (k *Kernel) Apply(r Rules) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(r.Endpoints) == 0 {
		return cleanup()
	}
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	// Add then delete: the delete needs the table to exist, and the add makes it so.
	conn.AddTable(t)
	conn.DelTable(t)
	conn.AddTable(t)
	accept := nftables.ChainPolicyAccept
	input := conn.AddChain(&nftables.Chain{Name: inputChain, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	allow := conn.AddChain(&nftables.Chain{Name: allowChain, Table: t})
	for _, exprs := range inputRules(r) {
		conn.AddRule(&nftables.Rule{Table: t, Chain: input, Exprs: exprs})
	}
	for _, exprs := range allowRules(r) {
		conn.AddRule(&nftables.Rule{Table: t, Chain: allow, Exprs: exprs})
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftables table inet %s: %w", TableName, err)
	}
	return nil
}

// Cleanup removes the table if it is there.
func (k *Kernel) Cleanup() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return cleanup()
}

func cleanup() error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			conn.DelTable(t)
			if err := conn.Flush(); err != nil {
				return fmt.Errorf("delete table inet %s: %w", TableName, err)
			}
		}
	}
	return nil
}

// inputRules: loopback passes; TCP to an endpoint goes through the allow-list.
func inputRules(r Rules) [][]expr.Any {
	lo := make([]byte, unix.IFNAMSIZ)
	copy(lo, "lo")
	out := [][]expr.Any{{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: lo},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}}
	for _, ep := range r.Endpoints {
		a := ep.Addr().Unmap()
		e := family(a.Is6())
		if !a.IsUnspecified() {
			e = append(e, addrMatch(a.Is6(), false, netip.PrefixFrom(a, a.BitLen()))...)
		}
		e = append(e,
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(ep.Port())},
			&expr.Verdict{Kind: expr.VerdictJump, Chain: allowChain})
		out = append(out, e)
	}
	return out
}

// allowRules: an allowed source returns to accept; everyone else is counted and dropped.
func allowRules(r Rules) [][]expr.Any {
	var out [][]expr.Any
	for _, p := range r.Allowed {
		is6 := p.Addr().Is6()
		e := append(family(is6), addrMatch(is6, true, p)...)
		out = append(out, append(e, &expr.Verdict{Kind: expr.VerdictAccept}))
	}
	return append(out, []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}})
}

// family matches the packet's IP family (nft's implicit "meta nfproto" before an address).
func family(is6 bool) []expr.Any {
	f := byte(unix.NFPROTO_IPV4)
	if is6 {
		f = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{f}},
	}
}

// addrMatch matches the source (or destination) address against a prefix, as nft writes
// "ip saddr 10.0.0.0/8": a mask when the prefix is not a whole address, then a compare.
func addrMatch(is6, source bool, p netip.Prefix) []expr.Any {
	offset, size := uint32(16), uint32(4) // IPv4 destination
	switch {
	case is6 && source:
		offset, size = 8, 16
	case is6:
		offset, size = 24, 16
	case source:
		offset = 12
	}
	e := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size}}
	if p.Bits() < int(size)*8 {
		mask := make([]byte, size)
		for i := range p.Bits() {
			mask[i/8] |= 0x80 >> (i % 8)
		}
		e = append(e, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: size, Mask: mask, Xor: make([]byte, size)})
	}
	return append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()})
}
