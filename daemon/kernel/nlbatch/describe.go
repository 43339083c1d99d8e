package nlbatch

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// kinds names the nftables messages a batch holds, and where each keeps the name of its
// object (the attribute after the table's).
var kinds = map[uint16]struct {
	verb, object string
	nameAttr     uint16
}{
	unix.NFT_MSG_NEWTABLE:   {"add", "table", unix.NFTA_TABLE_NAME},
	unix.NFT_MSG_DELTABLE:   {"delete", "table", unix.NFTA_TABLE_NAME},
	unix.NFT_MSG_NEWCHAIN:   {"add", "chain", unix.NFTA_CHAIN_NAME},
	unix.NFT_MSG_DELCHAIN:   {"delete", "chain", unix.NFTA_CHAIN_NAME},
	unix.NFT_MSG_NEWRULE:    {"add a rule to", "chain", unix.NFTA_RULE_CHAIN},
	unix.NFT_MSG_DELRULE:    {"flush", "chain", unix.NFTA_RULE_CHAIN},
	unix.NFT_MSG_NEWSET:     {"add", "set", unix.NFTA_SET_NAME},
	unix.NFT_MSG_DELSET:     {"delete", "set", unix.NFTA_SET_NAME},
	unix.NFT_MSG_NEWSETELEM: {"add elements to", "set", unix.NFTA_SET_ELEM_LIST_SET},
	unix.NFT_MSG_DELSETELEM: {"delete elements of", "set", unix.NFTA_SET_ELEM_LIST_SET},
	unix.NFT_MSG_NEWOBJ:     {"add", "object", unix.NFTA_OBJ_NAME},
	unix.NFT_MSG_DELOBJ:     {"delete", "object", unix.NFTA_OBJ_NAME},
}

// Describe names what a batch message does, for errors: "add chain ip edgegate svc-x".
func Describe(m netlink.Message) string {
	typ := uint16(m.Header.Type)
	if typ>>8 != unix.NFNL_SUBSYS_NFTABLES {
		return fmt.Sprintf("message type %#x", typ)
	}
	k, ok := kinds[typ&0xff]
	if !ok {
		return fmt.Sprintf("nftables message %d", typ&0xff)
	}
	if len(m.Data) < 4 {
		return k.verb + " " + k.object
	}
	family := familyName(m.Data[0])
	attrs := attributes(m.Data[4:])
	parts := []string{k.verb, k.object, family, attrs[1]}
	if k.object != "table" {
		parts = append(parts, attrs[k.nameAttr])
	}
	return strings.Join(strings.Fields(strings.Join(parts, " ")), " ")
}

func familyName(f byte) string {
	switch f {
	case unix.NFPROTO_IPV4:
		return "ip"
	case unix.NFPROTO_IPV6:
		return "ip6"
	case unix.NFPROTO_INET:
		return "inet"
	}
	return fmt.Sprintf("family-%d", f)
}

// attributes returns the string attributes at the top level, by type.
func attributes(b []byte) map[uint16]string {
	out := map[uint16]string{}
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff
		if n < 4 || n > len(b) {
			break
		}
		if typ <= unix.NFTA_CHAIN_NAME {
			out[typ] = strings.TrimRight(string(b[4:n]), "\x00")
		}
		b = b[min(align(n), len(b)):]
	}
	return out
}
