package nft

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/nlattr"
	"github.com/edgegate/edgegate/daemon/model"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// ruleWriter encodes the messages that append rules to a table's chains, byte for byte as
// google/nftables' AddRule does (TestRuleMessagesMatchGoogle), without its allocations per
// attribute: a full sync at 10,000 Services x 10 endpoints adds 110,000 rules, and their
// encoding was a third of its user time and most of its garbage. A statement's expressions
// are encoded once per batch (the library encodes them, through encoder.stmt) and copied
// for every rule that repeats the statement; an endpoint's DNAT, different in every rule,
// is written directly.
type ruleWriter struct {
	enc    *encoder
	family byte // the table's nfproto
	table  string
	cache  map[any][]byte // NFTA_LIST_ELEM attributes of a statement (or part)
	buf    []byte         // the last message, its space reused for the next (nlbatch copies each)
}

// partStmt is some of a statement's expressions: [from, to), to < 0 for all after from.
type partStmt struct {
	s        nftplan.Stmt
	from, to int
}

func newRuleWriter(f model.Family, table string) *ruleWriter {
	return &ruleWriter{enc: &encoder{family: f}, family: byte(tableFamily(f)), table: table, cache: map[any][]byte{}}
}

// message encodes the message that appends r to chain. Its data is valid until the next
// call: nlbatch.Batch.Add copies it.
func (w *ruleWriter) message(chain string, r nftplan.Rule) (netlink.Message, error) {
	b := nlattr.AppendRuleHead(w.buf[:0], w.family, w.table, chain)
	b, exprs := nlattr.BeginNest(b)
	for _, s := range r {
		var err error
		if b, err = w.stmt(b, s); err != nil {
			return netlink.Message{}, err
		}
	}
	b = nlattr.EndNest(b, exprs, unix.NFTA_RULE_EXPRESSIONS)
	if c, ok := r.Comment(); ok {
		b = nlattr.Append(b, unix.NFTA_RULE_USERDATA, userdata.AppendString(nil, userdata.TypeComment, c), false)
	}
	w.buf = b
	return netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE),
			Flags: netlink.Request | netlink.Create | unix.NLM_F_APPEND,
		},
		Data: b[:len(b):len(b)],
	}, nil
}

// stmt appends the expressions of one statement.
func (w *ruleWriter) stmt(b []byte, s nftplan.Stmt) ([]byte, error) {
	key := s
	switch s := s.(type) {
	case nftplan.Counter:
		key = nftplan.Counter{} // the name is the rule's comment, not the counter's
	case nftplan.DNAT:
		// meta l4proto, cmp (the same for every endpoint of a protocol), then the
		// endpoint's address and port and the nat expression (the same for all).
		head, err := w.cached(nftplan.DNAT{Proto: s.Proto}, 0, 2)
		if err != nil {
			return nil, err
		}
		tail, err := w.cached(nftplan.DNAT{}, 4, 5)
		if err != nil {
			return nil, err
		}
		addr, port := s.To.Addr().AsSlice(), binary.BigEndian.AppendUint16(make([]byte, 0, 2), s.To.Port())
		b = append(b, head...)
		b = appendImmediate(b, reg1, addr)
		b = appendImmediate(b, unix.NFT_REG_2, port)
		return append(b, tail...), nil
	}
	enc, err := w.cached(key, 0, -1)
	if err != nil {
		return nil, err
	}
	return append(b, enc...), nil
}

// cached returns expressions [from, to) of statement s (to < 0: all of them) as the
// library encodes them, from the cache when the batch met s before.
func (w *ruleWriter) cached(s nftplan.Stmt, from, to int) ([]byte, error) {
	var key any = s
	if from != 0 || to >= 0 {
		key = partStmt{s, from, to}
	}
	if enc, ok := w.cache[key]; ok {
		return enc, nil
	}
	var exprs []expr.Any
	var err error
	if d, ok := s.(nftplan.DNAT); ok {
		if !d.To.IsValid() { // a part that does not depend on the endpoint
			d.To = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
			if w.enc.family == model.IPv6 {
				d.To = netip.AddrPortFrom(netip.IPv6Unspecified(), 0)
			}
		}
		exprs = w.enc.dnat(d)
	} else if exprs, err = w.enc.stmt(s); err != nil {
		return nil, err
	}
	if to < 0 {
		to = len(exprs)
	}
	enc, err := nlattr.AppendExprs(nil, w.family, exprs[from:to]...)
	if err != nil {
		return nil, err
	}
	w.cache[key] = enc
	return enc, nil
}

// appendImmediate appends an immediate expression that loads data into register reg.
func appendImmediate(b []byte, reg uint32, data []byte) []byte {
	b, elem := nlattr.BeginNest(b)
	b = nlattr.Append(b, unix.NFTA_EXPR_NAME, "immediate", true)
	b, exprData := nlattr.BeginNest(b)
	b = nlattr.AppendU32(b, unix.NFTA_IMMEDIATE_DREG, reg)
	b, value := nlattr.BeginNest(b)
	b = nlattr.Append(b, unix.NFTA_DATA_VALUE, data, false)
	b = nlattr.EndNest(b, value, unix.NFTA_IMMEDIATE_DATA)
	b = nlattr.EndNest(b, exprData, unix.NFTA_EXPR_DATA)
	return nlattr.EndNest(b, elem, unix.NFTA_LIST_ELEM)
}
