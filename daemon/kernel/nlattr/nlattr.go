// Package nlattr appends netlink attributes to a message being laid out in place, exactly as
// netlink.MarshalAttributes would lay them out, without an allocation per attribute. The
// nftables and iptables backends write their rule messages with it: a full sync at 10,000
// Services writes hundreds of thousands of rules, and the library's encoding of them was
// most of a sync's garbage.
package nlattr

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables/expr"
)

// Append appends an attribute holding data (and a NUL when nul), padded to 4 bytes.
func Append[T string | []byte](b []byte, typ uint16, data T, nul bool) []byte {
	n := 4 + len(data)
	if nul {
		n++
	}
	b = binary.NativeEndian.AppendUint16(b, uint16(n))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	if nul {
		b = append(b, 0)
	}
	return pad(b)
}

// AppendU32 appends an attribute holding v in network byte order, as nftables wants its
// numbers.
func AppendU32(b []byte, typ uint16, v uint32) []byte {
	b = binary.NativeEndian.AppendUint16(b, 8)
	b = binary.NativeEndian.AppendUint16(b, typ)
	return binary.BigEndian.AppendUint32(b, v)
}

// AppendPadded appends an attribute of size bytes: data, then zeros (a fixed-size C struct
// or string that data begins). data must not be longer than size.
func AppendPadded[T string | []byte](b []byte, typ uint16, data T, size int) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+size))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	b = append(b, make([]byte, size-len(data))...)
	return pad(b)
}

func pad(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// BeginNest appends the header of a nested attribute; EndNest fills it in once its
// attributes follow it, with the nested flag set on typ.
func BeginNest(b []byte) ([]byte, int) { return append(b, 0, 0, 0, 0), len(b) }

// EndNest completes the nested attribute BeginNest started at start.
func EndNest(b []byte, start int, typ uint16) []byte {
	binary.NativeEndian.PutUint16(b[start:], uint16(len(b)-start))
	binary.NativeEndian.PutUint16(b[start+2:], nestedFlag|typ)
	return b
}

const nestedFlag = 1 << 15 // NLA_F_NESTED

// AppendExprs appends nftables expressions as google/nftables encodes them in a rule, each
// an NFTA_LIST_ELEM; family is the table's nfproto.
func AppendExprs(b []byte, family byte, exprs ...expr.Any) ([]byte, error) {
	for _, e := range exprs {
		data, err := expr.Marshal(family, e)
		if err != nil {
			return nil, fmt.Errorf("%T: %w", e, err)
		}
		b = Append(b, nestedFlag|listElem, data, false)
	}
	return b, nil
}

const listElem = 1 // NFTA_LIST_ELEM

// AppendRuleHead appends what begins an NFT_MSG_NEWRULE message: the nfgenmsg of the
// table's family and the table's and chain's names.
func AppendRuleHead(b []byte, family byte, table, chain string) []byte {
	b = append(b, family, nfnetlinkV0, 0, 0) // struct nfgenmsg, res_id 0
	b = Append(b, ruleTable, table, true)
	return Append(b, ruleChain, chain, true)
}

const (
	nfnetlinkV0 = 0 // NFNETLINK_V0
	ruleTable   = 1 // NFTA_RULE_TABLE
	ruleChain   = 2 // NFTA_RULE_CHAIN
)
