package nft

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/model"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// Registers as nft itself uses them for a concatenated key: the address starts at the first
// 128-bit register, the following fields go into the next free 32-bit registers.
const (
	reg1      = unix.NFT_REG_1
	reg32base = unix.NFT_REG32_00
)

// ctStatusDNAT is IPS_DST_NAT of the conntrack status bits: the destination was rewritten.
const ctStatusDNAT = 1 << 5

func tableFamily(f model.Family) nftables.TableFamily {
	if f == model.IPv6 {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}

func addrType(f model.Family) nftables.SetDatatype {
	if f == model.IPv6 {
		return nftables.TypeIP6Addr
	}
	return nftables.TypeIPAddr
}

func keyType(k nftplan.KeyKind, f model.Family) nftables.SetDatatype {
	switch k {
	case nftplan.KeyAddrProtoPort:
		return nftables.MustConcatSetType(addrType(f), nftables.TypeInetProto, nftables.TypeInetService)
	case nftplan.KeyProtoPort:
		return nftables.MustConcatSetType(nftables.TypeInetProto, nftables.TypeInetService)
	case nftplan.KeyIndex:
		// nft prints integer-typed maps without their typeof annotation as "type 0"; the
		// mark type has the same size and host byte order, and prints clearly.
		return nftables.TypeMark
	case nftplan.KeyHairpin:
		return nftables.MustConcatSetType(addrType(f), addrType(f))
	}
	return addrType(f)
}

// keyBytes encodes an element key as the kernel compares it: each concatenated field is
// padded to a 32-bit register.
func keyBytes(k nftplan.Key, kind nftplan.KeyKind) []byte {
	proto := []byte{k.Proto, 0, 0, 0}
	port := []byte{byte(k.Port >> 8), byte(k.Port), 0, 0}
	switch kind {
	case nftplan.KeyAddrProtoPort:
		return append(append(k.Addr.AsSlice(), proto...), port...)
	case nftplan.KeyProtoPort:
		return append(proto, port...)
	case nftplan.KeyIndex:
		// numgen writes its result in host byte order.
		return binaryutil.NativeEndian.PutUint32(k.Index)
	case nftplan.KeyHairpin:
		return append(k.Addr.AsSlice(), k.Addr.AsSlice()...)
	}
	return k.Addr.AsSlice()
}

func verdictExpr(v nftplan.Verdict) *expr.Verdict {
	switch v.Kind {
	case nftplan.VerdictAccept:
		return &expr.Verdict{Kind: expr.VerdictAccept}
	case nftplan.VerdictDrop:
		return &expr.Verdict{Kind: expr.VerdictDrop}
	case nftplan.VerdictReturn:
		return &expr.Verdict{Kind: expr.VerdictReturn}
	case nftplan.VerdictJump:
		return &expr.Verdict{Kind: expr.VerdictJump, Chain: v.Chain}
	case nftplan.VerdictGoto:
		return &expr.Verdict{Kind: expr.VerdictGoto, Chain: v.Chain}
	}
	return nil
}

func setOf(t *nftables.Table, s *nftplan.Set, f model.Family) *nftables.Set {
	ns := &nftables.Set{
		Table:         t,
		Name:          s.Name,
		KeyType:       keyType(s.Key, f),
		IsMap:         s.Map,
		Concatenation: s.Key == nftplan.KeyAddrProtoPort || s.Key == nftplan.KeyProtoPort || s.Key == nftplan.KeyHairpin,
	}
	if s.Key == nftplan.KeyIndex {
		ns.KeyByteOrder = binaryutil.NativeEndian
	}
	if s.Map {
		ns.DataType = nftables.TypeVerdict
	}
	if s.Dynamic {
		ns.Dynamic = true
		if s.Timeout > 0 {
			ns.HasTimeout, ns.Timeout = true, secondsDuration(s.Timeout)
		}
	}
	ns.Size = s.Size
	return ns
}

func elemsOf(s *nftplan.Set, elems []nftplan.Elem) []nftables.SetElement {
	out := make([]nftables.SetElement, len(elems))
	for i, e := range elems {
		out[i] = nftables.SetElement{Key: keyBytes(e.Key, s.Key)}
		if s.Map {
			out[i].VerdictData = verdictExpr(e.Verdict)
		}
	}
	return out
}

// encoder turns plan statements into expressions.
type encoder struct {
	family model.Family
}

func (e *encoder) rule(r nftplan.Rule) ([]expr.Any, error) {
	var out []expr.Any
	for _, s := range r {
		x, err := e.stmt(s)
		if err != nil {
			return nil, err
		}
		out = append(out, x...)
	}
	return out, nil
}

func (e *encoder) addrOffset(source bool) (offset, length uint32) {
	if e.family == model.IPv6 {
		if source {
			return 8, 16
		}
		return 24, 16
	}
	if source {
		return 12, 4
	}
	return 16, 4
}

func (e *encoder) loadAddr(source bool, reg uint32) *expr.Payload {
	off, n := e.addrOffset(source)
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

func (e *encoder) stmt(s nftplan.Stmt) ([]expr.Any, error) {
	switch s := s.(type) {
	case nftplan.CtStateNew:
		return []expr.Any{
			&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
		}, nil
	case nftplan.CtStatusDNAT:
		return []expr.Any{
			&expr.Ct{Register: reg1, Key: expr.CtKeySTATUS},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(ctStatusDNAT), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
		}, nil
	case nftplan.MatchKeySet:
		return append(e.loadKey(s.Key), &expr.Lookup{SourceRegister: reg1, SetName: s.Set}), nil
	case nftplan.MatchAddr:
		return e.matchPrefix(s), nil
	case nftplan.MatchAddrSet:
		return []expr.Any{e.loadAddr(s.Source, reg1), &expr.Lookup{SourceRegister: reg1, SetName: s.Set}}, nil
	case nftplan.MatchFibLocal:
		return []expr.Any{
			&expr.Fib{Register: reg1, ResultADDRTYPE: true, FlagSADDR: s.Source, FlagDADDR: !s.Source},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		}, nil
	case nftplan.MatchProto:
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{s.Proto}},
		}, nil
	case nftplan.MatchMarkClear:
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(s.Bit), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: make([]byte, 4)},
		}, nil
	case nftplan.VMap:
		return append(e.loadKey(s.Key), &expr.Lookup{SourceRegister: reg1, SetName: s.Map, IsDestRegSet: true, DestRegister: 0}), nil
	case nftplan.Numgen:
		return e.numgen(s), nil
	case nftplan.Pick:
		return []expr.Any{
			&expr.Numgen{Register: reg1, Modulus: s.Mod, Type: unix.NFT_NG_RANDOM},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: make([]byte, 4)},
		}, nil
	case nftplan.SetMark:
		return e.mark(^s.Bit, s.Bit), nil
	case nftplan.ClearMark:
		return e.mark(0xffffffff, s.Bit), nil
	case nftplan.Counter:
		return []expr.Any{&expr.Counter{}}, nil
	case nftplan.UpdateSource:
		return []expr.Any{e.loadAddr(true, reg1),
			&expr.Dynset{SrcRegKey: reg1, SetName: s.Set, Operation: unix.NFT_DYNSET_OP_UPDATE}}, nil
	case nftplan.DNAT:
		return e.dnat(s), nil
	case nftplan.Masquerade:
		return []expr.Any{&expr.Masq{FullyRandom: true}}, nil
	case nftplan.RejectStmt:
		return e.reject(s), nil
	case nftplan.Do:
		return []expr.Any{verdictExpr(s.Verdict)}, nil
	case nftplan.MatchCtState:
		return []expr.Any{
			&expr.Ct{Register: reg1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(ctStateBits(s.States)), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: make([]byte, 4)},
		}, nil
	case nftplan.MatchSynOnly:
		return tcpFlags(tcpFIN|tcpSYN|tcpRST|tcpACK, tcpSYN), nil
	case nftplan.MatchNotSyn:
		return tcpFlags(tcpSYN, 0), nil
	case nftplan.Notrack:
		return []expr.Any{&expr.Notrack{}}, nil
	case nftplan.SynProxy:
		return []expr.Any{&expr.SynProxy{Mss: s.MSS, Wscale: s.WScale, MssValueSet: true, WscaleValueSet: true,
			Timestamp: true, SackPerm: true}}, nil
	case nftplan.DNATSelf:
		return []expr.Any{e.loadAddr(false, reg1),
			&expr.NAT{Type: expr.NATTypeDestNAT, Family: e.natFamily(), RegAddrMin: reg1}}, nil
	case nftplan.OverSourceRate:
		return append(e.loadSource(s.SourceBits), &expr.Dynset{SrcRegKey: reg1, SetName: s.Set,
			Operation: unix.NFT_DYNSET_OP_UPDATE, Exprs: []expr.Any{&expr.Limit{Type: expr.LimitTypePkts,
				Rate: uint64(s.Rate), Over: true, Unit: expr.LimitTimeSecond, Burst: s.Burst}}}), nil
	case nftplan.OverSourceConns:
		return append(e.loadSource(s.SourceBits), &expr.Dynset{SrcRegKey: reg1, SetName: s.Set,
			Operation: unix.NFT_DYNSET_OP_ADD, Exprs: []expr.Any{&expr.Connlimit{Count: s.Max, Flags: nftConnlimitInvert}}}), nil
	}
	return nil, fmt.Errorf("statement %T has no nftables encoding", s)
}

// TCP flag bits as the header carries them, and connlimit's "over".
const (
	tcpFIN             = 0x01
	tcpSYN             = 0x02
	tcpRST             = 0x04
	tcpACK             = 0x10
	nftConnlimitInvert = 1 // NFT_CONNLIMIT_F_INV
)

// tcpFlags matches a TCP packet whose flags, masked, equal want.
func tcpFlags(mask, want byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{mask}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{want}},
	}
}

func ctStateBits(s nftplan.CtStates) uint32 {
	var bits uint32
	if s&nftplan.CtInvalid != 0 {
		bits |= expr.CtStateBitINVALID
	}
	if s&nftplan.CtNew != 0 {
		bits |= expr.CtStateBitNEW
	}
	if s&nftplan.CtUntracked != 0 {
		bits |= expr.CtStateBitUNTRACKED
	}
	return bits
}

// loadSource loads the source address into reg1, masked to its first bits in IPv6 when
// bits is set.
func (e *encoder) loadSource(bits int) []expr.Any {
	out := []expr.Any{e.loadAddr(true, reg1)}
	if e.family == model.IPv6 && bits > 0 && bits < 128 {
		out = append(out, &expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 16,
			Mask: nftplan.SourceMask(bits).AsSlice(), Xor: make([]byte, 16)})
	}
	return out
}

func (e *encoder) natFamily() uint32 {
	if e.family == model.IPv6 {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

func (e *encoder) matchPrefix(m nftplan.MatchAddr) []expr.Any {
	out := []expr.Any{e.loadAddr(m.Source, reg1)}
	addr := m.Prefix.Addr().AsSlice()
	if !m.Prefix.IsSingleIP() {
		mask := netip.PrefixFrom(netip.IPv6Unspecified(), m.Prefix.Bits())
		if m.Prefix.Addr().Is4() {
			mask = netip.PrefixFrom(netip.IPv4Unspecified(), m.Prefix.Bits())
		}
		out = append(out, &expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: uint32(len(addr)),
			Mask: prefixMask(mask), Xor: make([]byte, len(addr))})
	}
	op := expr.CmpOpEq
	if m.Not {
		op = expr.CmpOpNeq
	}
	return append(out, &expr.Cmp{Op: op, Register: reg1, Data: addr})
}

func prefixMask(p netip.Prefix) []byte {
	b := make([]byte, p.Addr().BitLen()/8)
	for i := 0; i < p.Bits(); i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return b
}

func (e *encoder) loadKey(k nftplan.KeyKind) []expr.Any {
	proto := func(reg uint32) expr.Any { return &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg} }
	dport := func(reg uint32) expr.Any {
		return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
	}
	switch k {
	case nftplan.KeyAddrProtoPort:
		_, n := e.addrOffset(false)
		next := reg32base + n/4
		return []expr.Any{e.loadAddr(false, reg1), proto(next), dport(next + 1)}
	case nftplan.KeyProtoPort:
		return []expr.Any{proto(reg1), dport(reg32base + 1)}
	case nftplan.KeyHairpin:
		_, n := e.addrOffset(true)
		return []expr.Any{e.loadAddr(true, reg1), e.loadAddr(false, reg32base+n/4)}
	}
	return []expr.Any{e.loadAddr(false, reg1)}
}

func (e *encoder) mark(mask, xor uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: binaryutil.NativeEndian.PutUint32(xor)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1},
	}
}

func (e *encoder) numgen(n nftplan.Numgen) []expr.Any {
	return []expr.Any{
		&expr.Numgen{Register: reg1, Modulus: n.Mod, Type: unix.NFT_NG_RANDOM},
		&expr.Lookup{SourceRegister: reg1, SetName: n.Map, IsDestRegSet: true, DestRegister: 0},
	}
}

func (e *encoder) dnat(d nftplan.DNAT) []expr.Any {
	fam := e.natFamily()
	port := make([]byte, 2)
	binary.BigEndian.PutUint16(port, d.To.Port())
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{d.Proto}},
		&expr.Immediate{Register: reg1, Data: d.To.Addr().AsSlice()},
		&expr.Immediate{Register: unix.NFT_REG_2, Data: port},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: fam, RegAddrMin: reg1, RegProtoMin: unix.NFT_REG_2, Specified: true},
	}
}

func (e *encoder) reject(r nftplan.RejectStmt) []expr.Any {
	if r.TCPReset {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
		}
	}
	code := uint8(3) // ICMP port unreachable
	if e.family == model.IPv6 {
		code = 4 // ICMPv6 port unreachable
	}
	return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code}}
}
