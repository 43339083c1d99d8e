package kernelview

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// rawExpr is one expression of a rule as the kernel returns it: its name and its
// attributes, undecoded.
type rawExpr struct {
	name string
	data []byte
}

// readExpr reads one expression's name and attributes, leaving the attributes undecoded.
func readExpr(e *netlink.AttributeDecoder) rawExpr {
	var x rawExpr
	for e.Next() {
		switch e.Type() {
		case unix.NFTA_EXPR_NAME:
			x.name = e.String()
		case unix.NFTA_EXPR_DATA:
			x.data = e.Bytes()
		}
	}
	return x
}

// style is the notation a rule is printed in.
type style int

const (
	nftStyle style = iota // nft list ruleset
	iptStyle              // iptables-save
)

// kind says how a register's bytes read.
type kind int

const (
	kindHex kind = iota
	kindAddr
	kindPort
	kindProto
	kindMark
	kindIfname
	kindNum      // a number in host byte order (numgen)
	kindAddrType // fib's address type
)

// operand is what a register holds: where it was loaded from and how its bytes read.
type operand struct {
	desc string
	kind kind
	ipt  string // the iptables option that compares it ("-s", "-p", "--dport"), if any
	bits int    // a prefix mask applied to an address (bitwise), 0 when none
	data []byte // what an immediate loaded
}

// ruleRenderer turns one rule's expressions into text. Expressions it does not know, or
// cannot decode, are printed raw (name and attributes in hex), never dropped: another
// program's rules show as the kernel holds them.
type ruleRenderer struct {
	family byte
	style  style
	regs   map[uint32]operand
	out    []string
}

// reg32 numbers a register in 32-bit units: the four 16-byte registers (NFT_REG_1..4) are
// NFT_REG32_00, 04, 08 and 12.
func reg32(r uint32) uint32 {
	if r >= unix.NFT_REG_1 && r <= unix.NFT_REG_4 {
		return unix.NFT_REG32_00 + (r-unix.NFT_REG_1)*4
	}
	return r
}

func (r *ruleRenderer) set(reg uint32, o operand) { r.regs[reg32(reg)] = o }

func (r *ruleRenderer) get(reg uint32) operand {
	o, ok := r.regs[reg32(reg)]
	if !ok {
		return operand{desc: fmt.Sprintf("reg %d", reg)}
	}
	return o
}

// concat is the operand of a lookup over n bytes from reg: the registers it spans, each
// field padded to 4 bytes, joined as nft joins a concatenation.
func (r *ruleRenderer) concat(reg, n uint32) string {
	var parts []string
	for at, end := reg32(reg), reg32(reg)+(n+3)/4; at < end; {
		o, ok := r.regs[at]
		if !ok {
			parts = append(parts, fmt.Sprintf("reg %d", at))
			at++
			continue
		}
		parts = append(parts, o.desc)
		at += max(1, uint32(width(o))+3) / 4
	}
	return strings.Join(parts, " . ")
}

// width is the bytes an operand spans.
func width(o operand) int {
	switch o.kind {
	case kindPort:
		return 2
	case kindProto:
		return 1
	case kindMark:
		return 4
	case kindIfname:
		return 16
	case kindAddr:
		if strings.HasPrefix(o.desc, "ip6") {
			return 16
		}
		return 4
	}
	return 4
}

func (r *ruleRenderer) emit(nft, ipt string) {
	if r.style == iptStyle && ipt != "" {
		r.out = append(r.out, ipt)
		return
	}
	if r.style == iptStyle {
		r.out = append(r.out, "["+nft+"]") // no iptables notation: nft's
		return
	}
	r.out = append(r.out, nft)
}

// raw prints an expression edgegate does not decode: its name and attributes.
func raw(e rawExpr) string {
	var attrs []string
	if ad, err := netlink.NewAttributeDecoder(e.data); err == nil {
		for ad.Next() {
			attrs = append(attrs, fmt.Sprintf("%d=0x%s", ad.Type(), hex.EncodeToString(ad.Bytes())))
		}
	}
	return fmt.Sprintf("[%s %s]", e.name, strings.Join(attrs, " "))
}

// decoders are the expressions the renderer reads with google/nftables' types; match and
// target are read here (their info structs are any program's).
var decoders = map[string]func() expr.Any{
	"payload": func() expr.Any { return &expr.Payload{} }, "cmp": func() expr.Any { return &expr.Cmp{} },
	"meta": func() expr.Any { return &expr.Meta{} }, "ct": func() expr.Any { return &expr.Ct{} },
	"lookup": func() expr.Any { return &expr.Lookup{} }, "immediate": func() expr.Any { return &expr.Immediate{} },
	"bitwise": func() expr.Any { return &expr.Bitwise{} }, "counter": func() expr.Any { return &expr.Counter{} },
	"nat": func() expr.Any { return &expr.NAT{} }, "masq": func() expr.Any { return &expr.Masq{} },
	"numgen": func() expr.Any { return &expr.Numgen{} }, "reject": func() expr.Any { return &expr.Reject{} },
	"range": func() expr.Any { return &expr.Range{} }, "objref": func() expr.Any { return &expr.Objref{} },
	"fib": func() expr.Any { return &expr.Fib{} },
}

// rule renders a rule's expressions and its comment in the renderer's style.
func (r *ruleRenderer) rule(exprs []rawExpr, comment string) string {
	r.regs, r.out = map[uint32]operand{}, nil
	for _, e := range exprs {
		r.expr(e)
	}
	if comment != "" {
		r.emit("comment "+strconv.Quote(comment), "-m comment --comment "+strconv.Quote(comment))
	}
	return strings.Join(r.out, " ")
}

func (r *ruleRenderer) expr(e rawExpr) {
	switch e.name {
	case "match", "target":
		r.xt(e)
		return
	case "notrack":
		r.emit("notrack", "-j NOTRACK")
		return
	}
	mk := decoders[e.name]
	if mk == nil {
		r.emit(raw(e), "")
		return
	}
	x := mk()
	if err := expr.Unmarshal(r.family, e.data, x); err != nil {
		r.emit(raw(e), "")
		return
	}
	if imm, ok := x.(*expr.Immediate); ok && imm.Register == unix.NFT_REG_VERDICT && len(imm.Data) == 0 {
		v := &expr.Verdict{}
		if err := expr.Unmarshal(r.family, e.data, v); err != nil {
			r.emit(raw(e), "")
			return
		}
		x = v
	}
	switch x := x.(type) {
	case *expr.Payload:
		if x.OperationType != expr.PayloadLoad {
			r.emit(raw(e), "")
			return
		}
		r.set(x.DestRegister, payloadOperand(x))
	case *expr.Meta:
		if x.SourceRegister {
			r.emit(fmt.Sprintf("meta %s set %s", metaName(x.Key), r.get(x.Register).desc), "")
			return
		}
		o := operand{desc: "meta " + metaName(x.Key)}
		switch x.Key {
		case expr.MetaKeyL4PROTO:
			o.kind, o.ipt = kindProto, "-p"
		case expr.MetaKeyMARK:
			o.kind = kindMark
		case expr.MetaKeyIIFNAME:
			o.kind, o.ipt = kindIfname, "-i"
		case expr.MetaKeyOIFNAME:
			o.kind, o.ipt = kindIfname, "-o"
		}
		r.set(x.Register, o)
	case *expr.Ct:
		if x.SourceRegister {
			r.emit(fmt.Sprintf("ct key %d set %s", x.Key, r.get(x.Register).desc), "")
			return
		}
		o := operand{desc: fmt.Sprintf("ct key %d", x.Key)}
		switch x.Key {
		case expr.CtKeySTATE:
			o.desc, o.kind = "ct state", kindMark
		case expr.CtKeySTATUS:
			o.desc, o.kind = "ct status", kindMark
		case expr.CtKeyMARK:
			o.desc, o.kind = "ct mark", kindMark
		}
		r.set(x.Register, o)
	case *expr.Bitwise:
		o := r.get(x.SourceRegister)
		zeroXor := bytes.Count(x.Xor, []byte{0}) == len(x.Xor)
		switch {
		case o.kind == kindAddr && zeroXor:
			o.bits = maskBits(x.Mask)
		case zeroXor:
			o.desc += " & " + value(o, x.Mask)
		default:
			o.desc = fmt.Sprintf("%s & %s ^ %s", o.desc, value(o, x.Mask), value(o, x.Xor))
		}
		r.set(x.DestRegister, o)
	case *expr.Numgen:
		how := "random"
		if x.Type == unix.NFT_NG_INCREMENTAL {
			how = "inc"
		}
		d := fmt.Sprintf("numgen %s mod %d", how, x.Modulus)
		if x.Offset != 0 {
			d += fmt.Sprintf(" offset %d", x.Offset)
		}
		r.set(x.Register, operand{desc: d, kind: kindNum})
	case *expr.Fib:
		d := "fib"
		for _, f := range []struct {
			on   bool
			name string
		}{{x.FlagSADDR, "saddr"}, {x.FlagDADDR, "daddr"}, {x.FlagMARK, "mark"}, {x.FlagIIF, "iif"}, {x.FlagOIF, "oif"}} {
			if f.on {
				d += " " + f.name
			}
		}
		o := operand{desc: d + " oif"}
		switch {
		case x.ResultADDRTYPE:
			o = operand{desc: d + " type", kind: kindAddrType}
		case x.ResultOIFNAME:
			o = operand{desc: d + " oifname", kind: kindIfname}
		}
		r.set(x.Register, o)
	case *expr.Immediate:
		r.set(x.Register, operand{desc: "0x" + hex.EncodeToString(x.Data), data: x.Data})
	case *expr.Cmp:
		o := r.get(x.Register)
		v := value(o, x.Data)
		op := cmpOps[x.Op]
		nft := o.desc + " " + v
		if op != "" {
			nft = o.desc + " " + op + " " + v
		}
		ipt := ""
		if o.ipt != "" && (x.Op == expr.CmpOpEq || x.Op == expr.CmpOpNeq) {
			ipt = o.ipt + " " + v
			if x.Op == expr.CmpOpNeq {
				ipt = "! " + ipt
			}
		}
		r.emit(nft, ipt)
	case *expr.Range:
		o := r.get(x.Register)
		r.emit(fmt.Sprintf("%s %s%s-%s", o.desc, cmpOps[x.Op], value(o, x.FromData), value(o, x.ToData)), "")
	case *expr.Lookup:
		n := uint32(4)
		if o, ok := r.regs[reg32(x.SourceRegister)]; ok {
			n = uint32(width(o))
		}
		// The key may span several registers (a concatenation); its length is the set's,
		// which the lookup does not carry: follow the registers that were loaded.
		for at := reg32(x.SourceRegister) + (n+3)/4; ; at += 1 {
			if _, ok := r.regs[at]; !ok {
				break
			}
			n = (at-reg32(x.SourceRegister))*4 + uint32(width(r.regs[at]))
		}
		key := r.concat(x.SourceRegister, n)
		neg := ""
		if x.Invert {
			neg = "!= "
		}
		switch {
		case x.IsDestRegSet && x.DestRegister == unix.NFT_REG_VERDICT:
			r.emit(fmt.Sprintf("%s vmap @%s", key, x.SetName), "")
		case x.IsDestRegSet:
			r.set(x.DestRegister, operand{desc: fmt.Sprintf("%s map @%s", key, x.SetName)})
		default:
			r.emit(fmt.Sprintf("%s %s@%s", key, neg, x.SetName), "")
		}
	case *expr.Counter:
		if r.style == nftStyle { // iptables-save prints none without -c
			r.out = append(r.out, "counter")
		}
	case *expr.Verdict:
		r.emit(verdictText(x), verdictIpt(x))
	case *expr.NAT:
		kind := "snat"
		if x.Type == expr.NATTypeDestNAT {
			kind = "dnat"
		}
		to := ""
		if x.RegAddrMin != 0 {
			to = r.get(x.RegAddrMin).desc
			if a, ok := netip.AddrFromSlice(r.get(x.RegAddrMin).data); ok {
				to = a.String()
				if a.Is6() && x.RegProtoMin != 0 {
					to = "[" + to + "]"
				}
			}
		}
		if x.RegProtoMin != 0 {
			port := r.get(x.RegProtoMin)
			if len(port.data) == 2 {
				port.desc = strconv.Itoa(int(binary.BigEndian.Uint16(port.data)))
			}
			to += ":" + port.desc
		}
		s := kind
		if to != "" {
			s += " to " + to
		}
		if x.FullyRandom {
			s += " fully-random"
		}
		r.emit(s, "")
	case *expr.Masq:
		s := "masquerade"
		if x.FullyRandom {
			s += " fully-random"
		}
		r.emit(s, "")
	case *expr.Reject:
		r.emit(fmt.Sprintf("reject type %d code %d", x.Type, x.Code), "")
	case *expr.Objref:
		r.emit(fmt.Sprintf("objref type %d name %s", x.Type, x.Name), "")
	default:
		r.emit(raw(e), "")
	}
}

var cmpOps = map[expr.CmpOp]string{expr.CmpOpEq: "", expr.CmpOpNeq: "!=", expr.CmpOpLt: "<", expr.CmpOpLte: "<=",
	expr.CmpOpGt: ">", expr.CmpOpGte: ">="}

// payloadOperand names a header field the way nft does where edgegate and iptables-nft
// load it; others by base, offset and length in bits (nft's raw payload notation).
func payloadOperand(p *expr.Payload) operand {
	switch p.Base {
	case expr.PayloadBaseNetworkHeader:
		switch {
		case p.Len <= 4 && (p.Offset == 12 || p.Offset == 16):
			if p.Offset == 12 {
				return operand{desc: "ip saddr", kind: kindAddr, ipt: "-s"}
			}
			return operand{desc: "ip daddr", kind: kindAddr, ipt: "-d"}
		case p.Len <= 16 && (p.Offset == 8 || p.Offset == 24):
			if p.Offset == 8 {
				return operand{desc: "ip6 saddr", kind: kindAddr, ipt: "-s"}
			}
			return operand{desc: "ip6 daddr", kind: kindAddr, ipt: "-d"}
		}
		return operand{desc: fmt.Sprintf("@nh,%d,%d", p.Offset*8, p.Len*8)}
	case expr.PayloadBaseTransportHeader:
		if p.Len == 2 && p.Offset == 0 {
			return operand{desc: "th sport", kind: kindPort, ipt: "--sport"}
		}
		if p.Len == 2 && p.Offset == 2 {
			return operand{desc: "th dport", kind: kindPort, ipt: "--dport"}
		}
		return operand{desc: fmt.Sprintf("@th,%d,%d", p.Offset*8, p.Len*8)}
	}
	return operand{desc: fmt.Sprintf("@ll,%d,%d", p.Offset*8, p.Len*8)}
}

var metaNames = map[expr.MetaKey]string{expr.MetaKeyL4PROTO: "l4proto", expr.MetaKeyMARK: "mark",
	expr.MetaKeyIIFNAME: "iifname", expr.MetaKeyOIFNAME: "oifname", expr.MetaKeyNFPROTO: "nfproto",
	expr.MetaKeyPROTOCOL: "protocol", expr.MetaKeyPKTTYPE: "pkttype", expr.MetaKeyIIF: "iif", expr.MetaKeyOIF: "oif",
	expr.MetaKeyLEN: "length", expr.MetaKeyIIFTYPE: "iiftype", expr.MetaKeyOIFTYPE: "oiftype"}

func metaName(k expr.MetaKey) string {
	if n, ok := metaNames[k]; ok {
		return n
	}
	return fmt.Sprintf("key %d", k)
}

func maskBits(mask []byte) int {
	n := 0
	for _, b := range mask {
		for i := 7; i >= 0 && b&(1<<i) != 0; i-- {
			n++
		}
	}
	return n
}

var protoNames = map[byte]string{unix.IPPROTO_TCP: "tcp", unix.IPPROTO_UDP: "udp", unix.IPPROTO_SCTP: "sctp",
	unix.IPPROTO_ICMP: "icmp", unix.IPPROTO_ICMPV6: "ipv6-icmp"}

// addrTypes names the address types fib reports (RTN_*).
var addrTypes = map[uint32]string{unix.RTN_UNICAST: "unicast", unix.RTN_LOCAL: "local", unix.RTN_BROADCAST: "broadcast",
	unix.RTN_ANYCAST: "anycast", unix.RTN_MULTICAST: "multicast", unix.RTN_BLACKHOLE: "blackhole",
	unix.RTN_UNREACHABLE: "unreachable", unix.RTN_PROHIBIT: "prohibit"}

// value prints bytes compared with an operand as its kind reads.
func value(o operand, data []byte) string {
	switch o.kind {
	case kindAddr:
		size := 4
		if strings.HasPrefix(o.desc, "ip6") {
			size = 16
		}
		if len(data) > size {
			break
		}
		full := make([]byte, size)
		copy(full, data)
		a, _ := netip.AddrFromSlice(full)
		bits := o.bits
		if bits == 0 && len(data) < size {
			bits = 8 * len(data) // iptables-nft compares the whole bytes of a prefix only
		}
		if bits != 0 && bits != 8*size {
			return netip.PrefixFrom(a, bits).String()
		}
		return a.String()
	case kindPort:
		if len(data) == 2 {
			return strconv.Itoa(int(binary.BigEndian.Uint16(data)))
		}
	case kindProto:
		if len(data) == 1 {
			if n, ok := protoNames[data[0]]; ok {
				return n
			}
			return strconv.Itoa(int(data[0]))
		}
	case kindMark:
		if len(data) == 4 {
			return fmt.Sprintf("0x%08x", binary.NativeEndian.Uint32(data))
		}
	case kindIfname:
		return strconv.Quote(string(bytes.TrimRight(data, "\x00")))
	case kindNum, kindAddrType:
		if len(data) == 4 {
			n := binary.NativeEndian.Uint32(data)
			if t, ok := addrTypes[n]; ok && o.kind == kindAddrType {
				return t
			}
			return strconv.Itoa(int(n))
		}
	}
	return "0x" + hex.EncodeToString(data)
}

// verdicts prints each verdict as nft does and as iptables does ("" for none).
var verdicts = map[expr.VerdictKind][2]string{expr.VerdictAccept: {"accept", "-j ACCEPT"}, expr.VerdictDrop: {"drop", "-j DROP"},
	expr.VerdictReturn: {"return", "-j RETURN"}, expr.VerdictContinue: {"continue", ""}, expr.VerdictJump: {"jump ", "-j "},
	expr.VerdictGoto: {"goto ", "-g "}}

func verdictText(v *expr.Verdict) string {
	if t, ok := verdicts[v.Kind]; ok {
		return t[0] + v.Chain
	}
	return fmt.Sprintf("verdict %d", v.Kind)
}

func verdictIpt(v *expr.Verdict) string {
	if t, ok := verdicts[v.Kind]; ok && t[1] != "" {
		return t[1] + v.Chain
	}
	return ""
}

// xt renders an xtables compatibility match or target (iptables-nft's): the comment, and
// the targets edgegate writes, read; any other program's by name, revision and info
// struct in hex.
func (r *ruleRenderer) xt(e rawExpr) {
	var name string
	var rev uint32
	var info []byte
	ad, err := netlink.NewAttributeDecoder(e.data)
	if err != nil {
		r.emit(raw(e), "")
		return
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_MATCH_NAME: // = NFTA_TARGET_NAME
			name = ad.String()
		case unix.NFTA_MATCH_REV:
			rev = ad.Uint32()
		case unix.NFTA_MATCH_INFO:
			info = ad.Bytes()
		}
	}
	if ad.Err() != nil || name == "" {
		r.emit(raw(e), "")
		return
	}
	opt, flag := "-m", "match"
	if e.name == "target" {
		opt, flag = "-j", "target"
	}
	args := xtArgs(e.name, name, rev, info, r.family == unix.NFPROTO_IPV6)
	if args == "" {
		args = fmt.Sprintf("--rev %d --info 0x%s", rev, hex.EncodeToString(info))
	}
	r.emit(fmt.Sprintf("xt %s %s %s", flag, name, args), opt+" "+name+" "+args)
}

// xtArgs reads the info structs iptables' own options describe best; "" leaves it raw.
func xtArgs(kind, name string, rev uint32, info []byte, ip6 bool) string {
	switch {
	case kind == "match" && name == "comment":
		return "--comment " + strconv.Quote(string(bytes.TrimRight(info, "\x00")))
	case kind == "match" && name == "statistic" && len(info) >= 8 && binary.NativeEndian.Uint16(info) == 0:
		return fmt.Sprintf("--mode random --probability %.11f", float64(binary.NativeEndian.Uint32(info[4:]))/(1<<31))
	case kind == "target" && name == "MARK" && rev == 2 && len(info) >= 8:
		return fmt.Sprintf("--set-xmark 0x%x/0x%x", binary.NativeEndian.Uint32(info), binary.NativeEndian.Uint32(info[4:]))
	case kind == "target" && name == "DNAT" && rev == 2 && len(info) >= 38:
		// struct nf_nat_range2: flags, min_addr, max_addr, min_proto, max_proto, base_proto.
		flags := binary.NativeEndian.Uint32(info)
		var to string
		if flags&0x1 != 0 { // NF_NAT_RANGE_MAP_IPS
			a, _ := netip.AddrFromSlice(info[4:8])
			to = a.String()
			if ip6 {
				a, _ = netip.AddrFromSlice(info[4:20])
				to = "[" + a.String() + "]"
			}
		}
		if flags&0x2 != 0 { // NF_NAT_RANGE_PROTO_SPECIFIED
			to += fmt.Sprintf(":%d", binary.BigEndian.Uint16(info[36:38]))
		}
		return "--to-destination " + to
	case kind == "target" && (name == "MASQUERADE" || name == "REJECT"):
		return "" // raw: few bytes, and the flags say what they say
	}
	return ""
}
