package ipt

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/model"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// encoder turns plan rules into the expressions iptables-nft 1.8.9 writes for the same
// rule text, in its order: protocol, source, destination, the matches as given, a counter,
// then the verdict or target. Native payload/meta/cmp/bitwise expressions stand where
// iptables-nft uses them (addresses, protocol, ports, marks); xtables compatibility
// match/target expressions carry the rest with the revision and info struct iptables-nft
// picks.
type encoder struct {
	family model.Family
}

const reg1 = unix.NFT_REG_1

func (e encoder) rule(r iptplan.Rule) ([]expr.Any, error) {
	var out []expr.Any
	if r.Proto != 0 {
		out = append(out, e.proto(r.Proto)...)
	}
	for _, a := range []struct {
		source bool
		p      netip.Prefix
		not    bool
	}{{true, r.Src, r.SrcNot}, {false, r.Dst, r.DstNot}} {
		x, err := e.addr(a.source, a.p, a.not)
		if err != nil {
			return nil, err
		}
		out = append(out, x...)
	}
	for _, m := range r.Matches {
		x, err := e.match(m)
		if err != nil {
			return nil, err
		}
		out = append(out, x...)
	}
	out = append(out, &expr.Counter{})
	if r.Target != nil {
		t, err := e.target(r.Target)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// proto encodes -p.
func (e encoder) proto(p uint8) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}}}
}

// addr encodes -s/-d as iptables-nft's add_addr does: a prefix of whole bytes loads and
// compares only those bytes; any other prefix loads the whole address and masks it.
// "-s 0.0.0.0/0" is no match at all, as in iptables.
func (e encoder) addr(source bool, p netip.Prefix, not bool) ([]expr.Any, error) {
	if !p.IsValid() {
		return nil, nil
	}
	if p.Addr().Is4() != (e.family == model.IPv4) {
		return nil, fmt.Errorf("address %s in an %s rule", p, e.family)
	}
	p = p.Masked()
	if p.Bits() == 0 {
		if not {
			return nil, fmt.Errorf("! %s matches nothing and iptables-nft cannot encode it", p)
		}
		return nil, nil
	}
	offset, size := uint32(16), uint32(4)
	if e.family == model.IPv6 {
		offset, size = 24, 16
	}
	if source {
		offset -= size
	}
	addr := p.Addr().AsSlice()
	op := expr.CmpOpEq
	if not {
		op = expr.CmpOpNeq
	}
	if p.Bits()%8 == 0 {
		n := uint32(p.Bits() / 8)
		return []expr.Any{
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: n},
			&expr.Cmp{Op: op, Register: reg1, Data: addr[:n]},
		}, nil
	}
	return []expr.Any{
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: size},
		&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: size,
			Mask: net.CIDRMask(p.Bits(), int(size)*8), Xor: make([]byte, size)},
		&expr.Cmp{Op: op, Register: reg1, Data: addr},
	}, nil
}

func (e encoder) match(m iptplan.Match) ([]expr.Any, error) {
	switch m := m.(type) {
	case iptplan.Comment:
		if len(m.Text) >= xt.CommentSize {
			return nil, fmt.Errorf("comment %q is longer than %d bytes", m.Text, xt.CommentSize-1)
		}
		c := xt.Comment(m.Text)
		return []expr.Any{&expr.Match{Name: "comment", Info: &c}}, nil
	case iptplan.DPort:
		return e.dport(m)
	case iptplan.AddrType:
		return []expr.Any{addrTypeMatch(m)}, nil
	case iptplan.CtState:
		return ctStateMatch(m)
	case iptplan.MarkMatch:
		return markMatch(m), nil
	case iptplan.Statistic:
		return []expr.Any{&expr.Match{Name: "statistic", Info: statisticInfo(m)}}, nil
	case iptplan.Recent:
		info, err := recentInfo(m, e.family)
		if err != nil {
			return nil, err
		}
		return []expr.Any{&expr.Match{Name: "recent", Rev: 1, Info: info}}, nil
	}
	return nil, fmt.Errorf("match %T has no iptables-nft encoding", m)
}

// dport: iptables-nft turns "-m tcp/udp --dport N" into a native transport header
// comparison, but keeps the bare "-m tcp/udp" and every sctp match as xtables matches.
func (e encoder) dport(d iptplan.DPort) ([]expr.Any, error) {
	switch d.Proto {
	case unix.IPPROTO_TCP, unix.IPPROTO_UDP:
		if d.Port != 0 {
			return []expr.Any{
				&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binaryutil.BigEndian.PutUint16(d.Port)},
			}, nil
		}
		if d.Proto == unix.IPPROTO_TCP {
			return []expr.Any{&expr.Match{Name: "tcp", Info: &xt.Tcp{SrcPorts: [2]uint16{0, 0xffff}, DstPorts: [2]uint16{0, 0xffff}}}}, nil
		}
		return []expr.Any{&expr.Match{Name: "udp", Info: &xt.Udp{SrcPorts: [2]uint16{0, 0xffff}, DstPorts: [2]uint16{0, 0xffff}}}}, nil
	case unix.IPPROTO_SCTP:
		return []expr.Any{&expr.Match{Name: "sctp", Info: sctpInfo(d.Port)}}, nil
	}
	return nil, fmt.Errorf("no port match for protocol %d", d.Proto)
}

func addrTypeMatch(a iptplan.AddrType) expr.Any {
	info := &xt.AddrTypeV1{}
	if a.Source {
		info.Source = uint16(xt.AddrTypeLocal)
		if a.Not {
			info.Flags = xtAddrTypeInvertSource
		}
	} else {
		info.Dest = uint16(xt.AddrTypeLocal)
		if a.Not {
			info.Flags = xtAddrTypeInvertDest
		}
	}
	return &expr.Match{Name: "addrtype", Rev: 1, Info: info}
}

// xt_addrtype_info_v1 flags.
const (
	xtAddrTypeInvertSource xt.AddrTypeFlags = 1 << iota
	xtAddrTypeInvertDest
)

// ctStates are the xt_conntrack state bits by the names iptables prints.
var ctStates = map[string]uint16{
	"INVALID": 1 << 0, "ESTABLISHED": 1 << 1, "RELATED": 1 << 2, "NEW": 1 << 3,
	"UNTRACKED": 1 << 6, "SNAT": 1 << 7, "DNAT": 1 << 8,
}

func ctStateMatch(c iptplan.CtState) ([]expr.Any, error) {
	var mask uint16
	for _, s := range c.States {
		bit, ok := ctStates[s]
		if !ok {
			return nil, fmt.Errorf("unknown conntrack state %q", s)
		}
		mask |= bit
	}
	info := &xt.ConntrackMtinfo3{}
	info.MatchFlags = uint16(xt.ConntrackState)
	info.StateMask = mask
	return []expr.Any{&expr.Match{Name: "conntrack", Rev: 3, Info: info}}, nil
}

// markMatch is iptables-nft's native form of -m mark: the bitwise step is left out when the
// mask keeps every bit.
func markMatch(m iptplan.MarkMatch) []expr.Any {
	out := []expr.Any{&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1}}
	if m.Mask != 0xffffffff {
		out = append(out, &expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(m.Mask), Xor: make([]byte, 4)})
	}
	op := expr.CmpOpEq
	if m.Not {
		op = expr.CmpOpNeq
	}
	return append(out, &expr.Cmp{Op: op, Register: reg1, Data: binaryutil.NativeEndian.PutUint32(m.Value)})
}

func (e encoder) target(t iptplan.Target) (expr.Any, error) {
	switch t := t.(type) {
	case iptplan.JumpTo:
		return &expr.Verdict{Kind: expr.VerdictJump, Chain: t.Chain}, nil
	case iptplan.Standard:
		switch t.Verdict {
		case "ACCEPT":
			return &expr.Verdict{Kind: expr.VerdictAccept}, nil
		case "DROP":
			return &expr.Verdict{Kind: expr.VerdictDrop}, nil
		case "RETURN":
			return &expr.Verdict{Kind: expr.VerdictReturn}, nil
		}
		return nil, fmt.Errorf("unknown verdict %q", t.Verdict)
	case iptplan.RejectTarget:
		info, err := rejectInfo(t.With, e.family)
		if err != nil {
			return nil, err
		}
		return &expr.Target{Name: "REJECT", Info: info}, nil
	case iptplan.DNATTarget:
		return e.dnat(t)
	case iptplan.MasqueradeTarget:
		return e.masquerade(), nil
	case iptplan.MarkTarget:
		return &expr.Target{Name: "MARK", Rev: 2, Info: markInfo(t)}, nil
	}
	return nil, fmt.Errorf("target %T has no iptables-nft encoding", t)
}

func (e encoder) dnat(d iptplan.DNATTarget) (expr.Any, error) {
	a := d.To.Addr().Unmap()
	if (e.family == model.IPv4) != a.Is4() {
		return nil, fmt.Errorf("DNAT to %s in an %s rule", d.To, e.family)
	}
	ip := net.IP(a.AsSlice())
	r := &xt.NatRange2{NatRange: xt.NatRange{Flags: uint(xt.NatRangeMapIPs), MinIP: ip, MaxIP: ip}}
	if d.To.Port() != 0 {
		r.Flags |= uint(xt.NatRangeProtoSpecified)
		r.MinPort, r.MaxPort = d.To.Port(), d.To.Port()
	}
	return &expr.Target{Name: "DNAT", Rev: 2, Info: r}, nil
}

// masquerade: the IPv4 MASQUERADE target still takes the old multi-range struct, the IPv6
// one an nf_nat_range.
func (e encoder) masquerade() expr.Any {
	if e.family == model.IPv6 {
		return &expr.Target{Name: "MASQUERADE", Info: &xt.NatRange{Flags: uint(xt.NatRangeProtoRandomFully)}}
	}
	return &expr.Target{Name: "MASQUERADE", Info: &xt.NatIPv4MultiRangeCompat{{Flags: uint(xt.NatRangeProtoRandomFully)}}}
}
