package ipt

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/nlattr"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
)

// ruleWriter encodes the messages that add rules to a table's chains, byte for byte as
// google/nftables' AddRule and InsertRule queue encoder.rule's expressions
// (TestRuleMessagesMatchGoogle), without the library's allocations per attribute: a full
// sync at 10,000 Services x 10 endpoints writes some 300,000 rules, and the library's
// encoding of them was most of the sync's garbage and a third of its user time. What
// differs from rule to rule (addresses, ports, comments, jumps, DNAT destinations) is
// written directly; a match or target that recurs (a protocol, a conntrack state, a mark,
// a probability, the counter) is encoded once per batch, through encoder and the library,
// and copied.
type ruleWriter struct {
	enc    encoder
	family byte // the table's nfproto
	table  string
	cache  map[any][]byte // NFTA_LIST_ELEM attributes of a recurring part of a rule
	buf    []byte         // the last message, its space reused for the next (nlbatch copies each)
}

func newRuleWriter(enc encoder, table string) *ruleWriter {
	return &ruleWriter{enc: enc, family: byte(tableFamily(enc.family)), table: table, cache: map[any][]byte{}}
}

// Cache keys of the parts of a rule that are not plan types of their own.
type (
	protoKey   uint8
	counterKey struct{}
	ctStateKey string // the states, joined
	targetKey  struct{ t iptplan.Target }
)

// message encodes the message that appends r to chain, or with insert puts it at the
// chain's top (iptables -I). Its data is valid until the next call: nlbatch.Batch.Add
// copies it.
func (w *ruleWriter) message(chain string, r iptplan.Rule, insert bool) (netlink.Message, error) {
	b := nlattr.AppendRuleHead(w.buf[:0], w.family, w.table, chain)
	b, exprs := nlattr.BeginNest(b)
	b, compat, err := w.exprs(b, r)
	if err != nil {
		return netlink.Message{}, err
	}
	b = nlattr.EndNest(b, exprs, unix.NFTA_RULE_EXPRESSIONS)
	if compat != 0 {
		// The library's compatibility policy: an xtables match that inspects the
		// transport header (tcp, udp, sctp) tells the kernel the rule's protocol.
		var c int
		b, c = nlattr.BeginNest(b)
		b = nlattr.AppendU32(b, unix.NFTA_RULE_COMPAT_PROTO, uint32(compat))
		b = nlattr.AppendU32(b, unix.NFTA_RULE_COMPAT_FLAGS, 0)
		b = nlattr.EndNest(b, c, unix.NFTA_RULE_COMPAT)
	}
	flags := netlink.Request | netlink.Create
	if !insert {
		flags |= unix.NLM_F_APPEND
	}
	w.buf = b
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE), Flags: flags},
		Data:   b[:len(b):len(b)],
	}, nil
}

// exprs appends r's expressions in encoder.rule's order and returns the protocol of its
// xtables transport match, if it has one.
func (w *ruleWriter) exprs(b []byte, r iptplan.Rule) ([]byte, uint8, error) {
	var err error
	if r.Proto != 0 {
		if b, err = w.cached(b, protoKey(r.Proto)); err != nil {
			return nil, 0, err
		}
	}
	if b, err = w.addr(b, true, r.Src, r.SrcNot); err != nil {
		return nil, 0, err
	}
	if b, err = w.addr(b, false, r.Dst, r.DstNot); err != nil {
		return nil, 0, err
	}
	var compat uint8
	for _, m := range r.Matches {
		if d, ok := m.(iptplan.DPort); ok && (d.Port == 0 || d.Proto == unix.IPPROTO_SCTP) {
			if compat != 0 && compat != d.Proto {
				return nil, 0, fmt.Errorf("transport matches for protocols %d and %d in one rule", compat, d.Proto)
			}
			compat = d.Proto
		}
		if b, err = w.match(b, m); err != nil {
			return nil, 0, err
		}
	}
	if b, err = w.cached(b, counterKey{}); err != nil {
		return nil, 0, err
	}
	if r.Target != nil {
		if b, err = w.target(b, r.Target); err != nil {
			return nil, 0, err
		}
	}
	return b, compat, nil
}

// addr writes a whole-byte prefix's payload and comparison; anything else goes through the
// encoder (masked prefixes are few: cluster CIDRs, loopback).
func (w *ruleWriter) addr(b []byte, source bool, p netip.Prefix, not bool) ([]byte, error) {
	if !p.IsValid() || p.Bits() == 0 || p.Bits()%8 != 0 || p.Addr().Is4() != (w.family == unix.NFPROTO_IPV4) {
		x, err := w.enc.addr(source, p, not)
		if err != nil {
			return nil, err
		}
		return nlattr.AppendExprs(b, w.family, x...)
	}
	offset, size := uint32(16), uint32(4)
	if !p.Addr().Is4() {
		offset, size = 24, 16
	}
	if source {
		offset -= size
	}
	op := expr.CmpOpEq
	if not {
		op = expr.CmpOpNeq
	}
	n := p.Bits() / 8
	b = appendPayload(b, expr.PayloadBaseNetworkHeader, offset, uint32(n))
	a := p.Masked().Addr().As16()
	if p.Addr().Is4() {
		return appendCmp(b, op, a[12:12+n]), nil
	}
	return appendCmp(b, op, a[:n]), nil
}

func (w *ruleWriter) match(b []byte, m iptplan.Match) ([]byte, error) {
	switch m := m.(type) {
	case iptplan.Comment:
		if len(m.Text) >= xt.CommentSize {
			return nil, fmt.Errorf("comment %q is longer than %d bytes", m.Text, xt.CommentSize-1)
		}
		return appendXT(b, "match", "comment", 0, m.Text, xt.CommentSize), nil
	case iptplan.DPort:
		if (m.Proto == unix.IPPROTO_TCP || m.Proto == unix.IPPROTO_UDP) && m.Port != 0 {
			b = appendPayload(b, expr.PayloadBaseTransportHeader, 2, 2)
			return appendCmp(b, expr.CmpOpEq, binaryutil.BigEndian.PutUint16(m.Port)), nil
		}
	case iptplan.Recent:
		// Named after its endpoint's chain: as many as there are endpoints with affinity.
		x, err := w.enc.match(m)
		if err != nil {
			return nil, err
		}
		return nlattr.AppendExprs(b, w.family, x...)
	case iptplan.CtState:
		return w.cached(b, ctStateKey(strings.Join(m.States, ",")))
	}
	return w.cached(b, m)
}

func (w *ruleWriter) target(b []byte, t iptplan.Target) ([]byte, error) {
	switch t := t.(type) {
	case iptplan.JumpTo:
		b, elem := nlattr.BeginNest(b)
		b = nlattr.Append(b, unix.NFTA_EXPR_NAME, "immediate", true)
		b, data := nlattr.BeginNest(b)
		b = nlattr.AppendU32(b, unix.NFTA_IMMEDIATE_DREG, unix.NFT_REG_VERDICT)
		b, imm := nlattr.BeginNest(b)
		b, verdict := nlattr.BeginNest(b)
		b = nlattr.AppendU32(b, unix.NFTA_VERDICT_CODE, jumpCode)
		b = nlattr.Append(b, unix.NFTA_VERDICT_CHAIN, t.Chain, true)
		b = nlattr.EndNest(b, verdict, unix.NFTA_DATA_VERDICT)
		b = nlattr.EndNest(b, imm, unix.NFTA_IMMEDIATE_DATA)
		b = nlattr.EndNest(b, data, unix.NFTA_EXPR_DATA)
		return nlattr.EndNest(b, elem, unix.NFTA_LIST_ELEM), nil
	case iptplan.DNATTarget:
		x, err := w.enc.dnat(t)
		if err != nil {
			return nil, err
		}
		tg := x.(*expr.Target)
		info, err := xt.Marshal(xt.TableFamily(w.family), tg.Rev, tg.Info)
		if err != nil {
			return nil, err
		}
		return appendXT(b, "target", tg.Name, tg.Rev, string(info), len(info)), nil
	}
	return w.cached(b, targetKey{t})
}

// jumpCode is NFT_JUMP (-3) as the kernel reads it, a 32-bit two's complement.
var jumpCode = func() uint32 { c := int32(expr.VerdictJump); return uint32(c) }()

// cached appends the expressions of a recurring part of a rule (a protoKey, counterKey,
// ctStateKey, targetKey or match), encoding them the first time the batch meets it.
func (w *ruleWriter) cached(b []byte, key any) ([]byte, error) {
	if enc, ok := w.cache[key]; ok {
		return append(b, enc...), nil
	}
	var x []expr.Any
	var err error
	switch k := key.(type) {
	case protoKey:
		x = w.enc.proto(uint8(k))
	case counterKey:
		x = []expr.Any{&expr.Counter{}}
	case ctStateKey:
		x, err = ctStateMatch(iptplan.CtState{States: strings.Split(string(k), ",")})
	case targetKey:
		var t expr.Any
		if t, err = w.enc.target(k.t); err == nil {
			x = []expr.Any{t}
		}
	case iptplan.Match:
		x, err = w.enc.match(k)
	default:
		err = fmt.Errorf("no encoding for %T", key)
	}
	if err != nil {
		return nil, err
	}
	enc, err := nlattr.AppendExprs(nil, w.family, x...)
	if err != nil {
		return nil, err
	}
	w.cache[key] = enc
	return append(b, enc...), nil
}

// appendPayload appends a payload expression loading n bytes at offset of base into
// register 1.
func appendPayload(b []byte, base expr.PayloadBase, offset, n uint32) []byte {
	b, elem := nlattr.BeginNest(b)
	b = nlattr.Append(b, unix.NFTA_EXPR_NAME, "payload", true)
	b, data := nlattr.BeginNest(b)
	b = nlattr.AppendU32(b, unix.NFTA_PAYLOAD_DREG, reg1)
	b = nlattr.AppendU32(b, unix.NFTA_PAYLOAD_BASE, uint32(base))
	b = nlattr.AppendU32(b, unix.NFTA_PAYLOAD_OFFSET, offset)
	b = nlattr.AppendU32(b, unix.NFTA_PAYLOAD_LEN, n)
	b = nlattr.EndNest(b, data, unix.NFTA_EXPR_DATA)
	return nlattr.EndNest(b, elem, unix.NFTA_LIST_ELEM)
}

// appendCmp appends a comparison of register 1 with value.
func appendCmp(b []byte, op expr.CmpOp, value []byte) []byte {
	b, elem := nlattr.BeginNest(b)
	b = nlattr.Append(b, unix.NFTA_EXPR_NAME, "cmp", true)
	b, data := nlattr.BeginNest(b)
	b = nlattr.AppendU32(b, unix.NFTA_CMP_SREG, reg1)
	b = nlattr.AppendU32(b, unix.NFTA_CMP_OP, uint32(op))
	b, v := nlattr.BeginNest(b)
	b = nlattr.Append(b, unix.NFTA_DATA_VALUE, value, false)
	b = nlattr.EndNest(b, v, unix.NFTA_CMP_DATA)
	b = nlattr.EndNest(b, data, unix.NFTA_EXPR_DATA)
	return nlattr.EndNest(b, elem, unix.NFTA_LIST_ELEM)
}

// appendXT appends an xtables match or target (kind) with its info struct, info padded
// with zeros to size bytes.
func appendXT(b []byte, kind, name string, rev uint32, info string, size int) []byte {
	b, elem := nlattr.BeginNest(b)
	b = nlattr.Append(b, unix.NFTA_EXPR_NAME, kind, true)
	b, data := nlattr.BeginNest(b)
	// NFTA_MATCH_NAME, _REV, _INFO and NFTA_TARGET_NAME, _REV, _INFO are 1, 2, 3.
	b = nlattr.Append(b, unix.NFTA_MATCH_NAME, name, true)
	b = nlattr.AppendU32(b, unix.NFTA_MATCH_REV, rev)
	b = nlattr.AppendPadded(b, unix.NFTA_MATCH_INFO, info, size)
	b = nlattr.EndNest(b, data, unix.NFTA_EXPR_DATA)
	return nlattr.EndNest(b, elem, unix.NFTA_LIST_ELEM)
}
