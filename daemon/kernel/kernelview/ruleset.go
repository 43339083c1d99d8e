package kernelview

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/view"
)

// The ruleset as the kernel holds it, read back through netlink: every table of every
// family, so that hand edits and other programs' tables show beside edgegate's. Tables and
// chains come in one dump each, the rules one dump per chain (a dump of a whole table
// costs the kernel time quadratic in its rules, see Counters), then sets and elements.
// Messages are decoded here rather than by google/nftables, which drops the expressions it
// does not know and fails on set types it does not know: those print raw.

type nftChain struct {
	name, typ string
	hook      *uint32
	prio      int32
	policy    *uint32
}

type nftTable struct {
	family byte
	name   string
	chains []*nftChain
}

var familyNames = map[byte]string{unix.NFPROTO_INET: "inet", unix.NFPROTO_IPV4: "ip", unix.NFPROTO_ARP: "arp",
	unix.NFPROTO_NETDEV: "netdev", unix.NFPROTO_BRIDGE: "bridge", unix.NFPROTO_IPV6: "ip6"}

func familyName(f byte) string {
	if n, ok := familyNames[f]; ok {
		return n
	}
	return fmt.Sprintf("family-%d", f)
}

var hookNames = []string{"prerouting", "input", "forward", "output", "postrouting", "ingress"}

func hookName(family byte, h uint32) string {
	if family == unix.NFPROTO_NETDEV && h == 0 {
		return "ingress"
	}
	if int(h) < len(hookNames) {
		return hookNames[h]
	}
	return strconv.Itoa(int(h))
}

// openDumper opens a netfilter netlink socket for dumps; close it with its close.
func openDumper() (*dumper, func(), error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("netlink bind: %w", err)
	}
	return &dumper{fd: fd, family: unix.NFPROTO_UNSPEC, buf: make([]byte, 1<<16)}, func() { unix.Close(fd) }, nil
}

// readTables lists the tables that keep accepts, with their chains, in the kernel's order.
func readTables(d *dumper, keep func(family byte, table string) bool) ([]*nftTable, error) {
	d.family = unix.NFPROTO_UNSPEC
	var tables []*nftTable
	byKey := map[string]*nftTable{}
	err := d.dump(unix.NFT_MSG_GETTABLE, nil, func(data []byte) error {
		ad, err := attrsOf(data)
		if err != nil {
			return err
		}
		t := &nftTable{family: data[0]}
		for ad.Next() {
			if ad.Type() == unix.NFTA_TABLE_NAME {
				t.name = ad.String()
			}
		}
		if keep(t.family, t.name) {
			tables = append(tables, t)
			byKey[familyName(t.family)+" "+t.name] = t
		}
		return ad.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	err = d.dump(unix.NFT_MSG_GETCHAIN, nil, func(data []byte) error {
		ad, err := attrsOf(data)
		if err != nil {
			return err
		}
		c, table := &nftChain{}, ""
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_CHAIN_TABLE:
				table = ad.String()
			case unix.NFTA_CHAIN_NAME:
				c.name = ad.String()
			case unix.NFTA_CHAIN_TYPE:
				c.typ = ad.String()
			case unix.NFTA_CHAIN_POLICY:
				p := ad.Uint32()
				c.policy = &p
			case unix.NFTA_CHAIN_HOOK:
				ad.Nested(func(h *netlink.AttributeDecoder) error {
					h.ByteOrder = binary.BigEndian
					for h.Next() {
						switch h.Type() {
						case unix.NFTA_HOOK_HOOKNUM:
							n := h.Uint32()
							c.hook = &n
						case unix.NFTA_HOOK_PRIORITY:
							c.prio = int32(h.Uint32())
						}
					}
					return nil
				})
			}
		}
		if t := byKey[familyName(data[0])+" "+table]; t != nil {
			t.chains = append(t.chains, c)
		}
		return ad.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("chains: %w", err)
	}
	return tables, nil
}

// chainRules dumps one chain's rules and hands each rule message to fn; a chain gone since
// it was listed has none.
func (d *dumper) chainRules(family byte, table, chain string, fn func(data []byte) error) error {
	d.family = family
	attrs, _ := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: append([]byte(table), 0)},
		{Type: unix.NFTA_RULE_CHAIN, Data: append([]byte(chain), 0)},
	})
	err := d.dump(unix.NFT_MSG_GETRULE, attrs, fn)
	if errors.Is(err, unix.ENOENT) {
		return nil // the chain went away since the list
	}
	return err
}

// rules dumps one chain's rules and hands each one's expressions and comment to fn.
func (d *dumper) rules(family byte, table, chain string, fn func(exprs []rawExpr, comment string)) error {
	return d.chainRules(family, table, chain, func(data []byte) error {
		var exprs []rawExpr
		comment, _, err := decodeRule(data, func(e *netlink.AttributeDecoder) bool {
			exprs = append(exprs, readExpr(e))
			return true
		})
		if err != nil {
			return err
		}
		fn(exprs, comment)
		return nil
	})
}

// allTables keeps every table.
func allTables(byte, string) bool { return true }

// RenderNFT writes the tables keep accepts as nft list ruleset prints them, near enough:
// rules read as nft reads edgegate's and iptables-nft's, the rest raw; counters without
// their values (the traffic view reads those).
func RenderNFT(t *view.Text, keep func(family byte, table string) bool) error {
	d, closeFn, err := openDumper()
	if err != nil {
		return err
	}
	defer closeFn()
	tables, err := readTables(d, keep)
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	for _, tb := range tables {
		if t.Full() {
			return nil
		}
		t.Printf("table %s %s {\n", familyName(tb.family), tb.name)
		renderSets(t, d, tb)
		r := &ruleRenderer{family: tb.family, style: nftStyle}
		for _, c := range tb.chains {
			t.Printf("\tchain %s {\n", c.name)
			if c.hook != nil {
				policy := ""
				if c.policy != nil {
					policy = " policy " + map[uint32]string{0: "drop", 1: "accept"}[*c.policy] + ";"
				}
				t.Printf("\t\ttype %s hook %s priority %d;%s\n", c.typ, hookName(tb.family, *c.hook), c.prio, policy)
			}
			err := d.rules(tb.family, tb.name, c.name, func(exprs []rawExpr, comment string) {
				t.Printf("\t\t%s\n", r.rule(exprs, comment))
			})
			if err != nil {
				return fmt.Errorf("nftables %s %s chain %s: rules: %w", familyName(tb.family), tb.name, c.name, err)
			}
			t.Printf("\t}\n")
			if t.Full() {
				return nil
			}
		}
		t.Printf("}\n")
	}
	return nil
}

// nftSet is a named set or map as the kernel describes it.
type nftSet struct {
	name              string
	flags             uint32
	keyType, dataType uint32
}

// readSets lists a table's named sets and maps.
func (d *dumper) readSets(family byte, table string) ([]nftSet, error) {
	d.family = family
	attrs, _ := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.NFTA_SET_TABLE, Data: append([]byte(table), 0)}})
	var sets []nftSet
	err := d.dump(unix.NFT_MSG_GETSET, attrs, func(data []byte) error {
		ad, err := attrsOf(data)
		if err != nil {
			return err
		}
		var s nftSet
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_SET_NAME:
				s.name = ad.String()
			case unix.NFTA_SET_FLAGS:
				s.flags = ad.Uint32()
			case unix.NFTA_SET_KEY_TYPE:
				s.keyType = ad.Uint32()
			case unix.NFTA_SET_DATA_TYPE:
				s.dataType = ad.Uint32()
			}
		}
		if s.flags&unix.NFT_SET_ANONYMOUS == 0 {
			sets = append(sets, s)
		}
		return ad.Err()
	})
	return sets, err
}

// attrsOf decodes the attributes of an nftables message (after struct nfgenmsg), numbers
// in network byte order.
func attrsOf(data []byte) (*netlink.AttributeDecoder, error) {
	if len(data) < 4 {
		return nil, errors.New("short message")
	}
	ad, err := netlink.NewAttributeDecoder(data[4:])
	if err != nil {
		return nil, err
	}
	ad.ByteOrder = binary.BigEndian
	return ad, nil
}

// elements dumps a set's elements, each printed by the set's types.
func (d *dumper) elements(family byte, table string, s nftSet, fn func(text string)) error {
	d.family = family
	attrs, _ := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_SET_ELEM_LIST_TABLE, Data: append([]byte(table), 0)},
		{Type: unix.NFTA_SET_ELEM_LIST_SET, Data: append([]byte(s.name), 0)},
	})
	return d.dump(unix.NFT_MSG_GETSETELEM, attrs, func(data []byte) error {
		ad, err := attrsOf(data)
		if err != nil {
			return err
		}
		for ad.Next() {
			if ad.Type() != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			ad.Nested(func(list *netlink.AttributeDecoder) error {
				for list.Next() {
					list.Nested(func(e *netlink.AttributeDecoder) error {
						fn(elementText(s, e))
						return nil
					})
				}
				return nil
			})
		}
		return ad.Err()
	})
}

// elementText prints one element: its key (each field of a concatenation), the end of a
// range, and a map's value or verdict.
func elementText(s nftSet, e *netlink.AttributeDecoder) string {
	e.ByteOrder = binary.BigEndian
	var key, keyEnd, val string
	var flags uint32
	for e.Next() {
		switch e.Type() {
		case unix.NFTA_SET_ELEM_KEY:
			key = datumText(s.keyType, nestedValue(e))
		case nftaSetElemKeyEnd:
			keyEnd = datumText(s.keyType, nestedValue(e))
		case unix.NFTA_SET_ELEM_FLAGS:
			flags = e.Uint32()
		case unix.NFTA_SET_ELEM_DATA:
			e.Nested(func(d *netlink.AttributeDecoder) error {
				d.ByteOrder = binary.BigEndian
				for d.Next() {
					switch d.Type() {
					case unix.NFTA_DATA_VALUE:
						val = datumText(s.dataType, d.Bytes())
					case unix.NFTA_DATA_VERDICT:
						v := &expr.Verdict{}
						d.Nested(func(vd *netlink.AttributeDecoder) error {
							vd.ByteOrder = binary.BigEndian
							for vd.Next() {
								switch vd.Type() {
								case unix.NFTA_VERDICT_CODE:
									v.Kind = expr.VerdictKind(int32(vd.Uint32()))
								case unix.NFTA_VERDICT_CHAIN:
									v.Chain = vd.String()
								}
							}
							return nil
						})
						val = verdictText(v)
					}
				}
				return nil
			})
		}
	}
	if keyEnd != "" {
		key += "-" + keyEnd
	}
	if flags&unix.NFT_SET_ELEM_INTERVAL_END != 0 {
		key = "end " + key
	}
	if val != "" {
		key += " : " + val
	}
	return key
}

// nftaSetElemKeyEnd is NFTA_SET_ELEM_KEY_END (the end of a concatenated range), which
// x/sys/unix does not name.
const nftaSetElemKeyEnd = 10

// nestedValue reads the NFTA_DATA_VALUE inside a key attribute.
func nestedValue(e *netlink.AttributeDecoder) []byte {
	var v []byte
	e.Nested(func(d *netlink.AttributeDecoder) error {
		for d.Next() {
			if d.Type() == unix.NFTA_DATA_VALUE {
				v = d.Bytes()
			}
		}
		return nil
	})
	return v
}

// datatypes are nft's datatype numbers (src/datatype.h) that the view prints by name, with
// their sizes; a concatenation packs them 6 bits each, the first field highest.
var datatypes = map[uint32]struct {
	name string
	size int
}{7: {"ipv4_addr", 4}, 8: {"ipv6_addr", 16}, 12: {"inet_proto", 1}, 13: {"inet_service", 2}, 19: {"mark", 4},
	41: {"ifname", 16}}

// fieldsOf splits a set's type into its fields; ok is false when one is not known.
func fieldsOf(typ uint32) (names []string, sizes []int, ok bool) {
	ok = true
	for ; typ != 0; typ >>= 6 {
		dt, known := datatypes[typ&0x3f]
		if !known {
			ok = false
			dt.name = fmt.Sprintf("type-%d", typ&0x3f)
		}
		names = append([]string{dt.name}, names...)
		sizes = append([]int{dt.size}, sizes...)
	}
	return names, sizes, ok
}

func typeName(typ uint32) string {
	if typ == unix.NFT_DATA_VERDICT {
		return "verdict"
	}
	names, _, _ := fieldsOf(typ)
	return strings.Join(names, " . ")
}

// datumText prints a key or value by its type: each field of a concatenation (padded to 4
// bytes), raw hex where a type is not known or the bytes do not fit it.
func datumText(typ uint32, b []byte) string {
	names, sizes, ok := fieldsOf(typ)
	if !ok || len(names) == 0 {
		return "0x" + hex.EncodeToString(b)
	}
	if len(names) == 1 {
		return scalarText(names[0], b)
	}
	var parts []string
	rest := b
	for i, n := range names {
		padded := (sizes[i] + 3) / 4 * 4
		if len(rest) < padded {
			return "0x" + hex.EncodeToString(b)
		}
		parts = append(parts, scalarText(n, rest[:sizes[i]]))
		rest = rest[padded:]
	}
	return strings.Join(parts, " . ")
}

// renderSets writes a table's named sets and maps with their elements. A set that cannot
// be read is a comment: the rest of the ruleset still shows.
func renderSets(t *view.Text, d *dumper, tb *nftTable) {
	sets, err := d.readSets(tb.family, tb.name)
	if err != nil {
		t.Printf("\t# sets: %v\n", err)
		return
	}
	for _, s := range sets {
		if t.Full() {
			return
		}
		what, typ := "set", typeName(s.keyType)
		if s.flags&unix.NFT_SET_MAP != 0 {
			what, typ = "map", typ+" : "+typeName(s.dataType)
		}
		t.Printf("\t%s %s {\n\t\ttype %s\n", what, s.name, typ)
		var flags []string
		for _, f := range []struct {
			bit  uint32
			name string
		}{{unix.NFT_SET_CONSTANT, "constant"}, {unix.NFT_SET_INTERVAL, "interval"}, {unix.NFT_SET_TIMEOUT, "timeout"},
			{unix.NFT_SET_EVAL, "dynamic"}} {
			if s.flags&f.bit != 0 {
				flags = append(flags, f.name)
			}
		}
		if len(flags) > 0 {
			t.Printf("\t\tflags %s\n", strings.Join(flags, ","))
		}
		first := true
		err := d.elements(tb.family, tb.name, s, func(text string) {
			if first {
				t.Printf("\t\telements = {\n")
				first = false
			}
			t.Printf("\t\t\t%s,\n", text)
		})
		if err != nil {
			t.Printf("\t\t# elements: %v\n", err)
		}
		if !first {
			t.Printf("\t\t}\n")
		}
		t.Printf("\t}\n")
	}
}

// xtablesTables are the tables iptables-save prints.
var xtablesTables = []string{"raw", "mangle", "nat", "filter", "security"}

// RenderIPTables writes the ip and ip6 tables that iptables uses as iptables-save prints
// them (iptables-nft writes them with nftables expressions and xtables compatibility
// matches; see daemon/kernel/ipt): the matches and targets edgegate writes read, other
// programs' by name with their info raw. The other nftables tables of those families are
// named at the end.
func RenderIPTables(t *view.Text) error {
	d, closeFn, err := openDumper()
	if err != nil {
		return err
	}
	defer closeFn()
	tables, err := readTables(d, func(f byte, _ string) bool { return f == unix.NFPROTO_IPV4 || f == unix.NFPROTO_IPV6 })
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	var others []string
	for _, f := range []byte{unix.NFPROTO_IPV4, unix.NFPROTO_IPV6} {
		t.Printf("# %s\n", map[byte]string{unix.NFPROTO_IPV4: "IPv4", unix.NFPROTO_IPV6: "IPv6"}[f])
		r := &ruleRenderer{family: f, style: iptStyle}
		for _, tb := range tables {
			if tb.family != f {
				continue
			}
			if !slices.Contains(xtablesTables, tb.name) {
				others = append(others, familyName(f)+" "+tb.name)
				continue
			}
			t.Printf("*%s\n", tb.name)
			for _, c := range tb.chains {
				policy := "-"
				if c.policy != nil {
					policy = map[uint32]string{0: "DROP", 1: "ACCEPT"}[*c.policy]
				}
				t.Printf(":%s %s [0:0]\n", c.name, policy)
			}
			for _, c := range tb.chains {
				err := d.rules(f, tb.name, c.name, func(exprs []rawExpr, comment string) {
					t.Printf("-A %s %s\n", c.name, r.rule(exprs, comment))
				})
				if err != nil {
					return fmt.Errorf("iptables %s %s chain %s: rules: %w", familyName(f), tb.name, c.name, err)
				}
				if t.Full() {
					return nil
				}
			}
			t.Printf("COMMIT\n")
		}
	}
	if len(others) > 0 {
		t.Printf("# other nftables tables (see nft list ruleset): %s\n", strings.Join(others, ", "))
	}
	return nil
}

func scalarText(typ string, b []byte) string {
	switch typ {
	case "ipv4_addr", "ipv6_addr":
		if a, ok := netip.AddrFromSlice(b); ok {
			return a.String()
		}
	case "inet_service":
		if len(b) == 2 {
			return strconv.Itoa(int(binary.BigEndian.Uint16(b)))
		}
	case "inet_proto":
		if len(b) == 1 {
			return value(operand{kind: kindProto}, b)
		}
	case "mark":
		if len(b) == 4 {
			return fmt.Sprintf("0x%08x", binary.NativeEndian.Uint32(b))
		}
	case "ifname":
		return value(operand{kind: kindIfname}, b)
	}
	return "0x" + hex.EncodeToString(b)
}
