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

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/view"
)

// The ruleset as the kernel holds it, read back through netlink: every table of every
// family, so that hand edits and other programs' tables show beside edgegate's. Tables and
// chains come in one dump each, the rules one dump per chain (a dump of a whole table
// costs the kernel time quadratic in its rules, see Counters), sets through
// google/nftables. Expressions are decoded here rather than by google/nftables, which
// drops those it does not know: they print raw.

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
		if len(data) < 4 {
			return errors.New("short message")
		}
		ad, err := netlink.NewAttributeDecoder(data[4:])
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
		if len(data) < 4 {
			return errors.New("short message")
		}
		ad, err := netlink.NewAttributeDecoder(data[4:])
		if err != nil {
			return err
		}
		ad.ByteOrder = binary.BigEndian
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

// rules dumps one chain's rules and hands each one's expressions and comment to fn.
func (d *dumper) rules(family byte, table, chain string, fn func(exprs []rawExpr, comment string)) error {
	d.family = family
	attrs, _ := netlink.MarshalAttributes([]netlink.Attribute{
		{Type: unix.NFTA_RULE_TABLE, Data: append([]byte(table), 0)},
		{Type: unix.NFTA_RULE_CHAIN, Data: append([]byte(chain), 0)},
	})
	err := d.dump(unix.NFT_MSG_GETRULE, attrs, func(data []byte) error {
		if len(data) < 4 {
			return errors.New("short message")
		}
		ad, err := netlink.NewAttributeDecoder(data[4:])
		if err != nil {
			return err
		}
		var exprs []rawExpr
		var comment string
		for ad.Next() {
			switch ad.Type() {
			case unix.NFTA_RULE_USERDATA:
				comment, _ = userComment(ad.Bytes())
			case unix.NFTA_RULE_EXPRESSIONS:
				ad.Nested(func(list *netlink.AttributeDecoder) error {
					for list.Next() {
						list.Nested(func(e *netlink.AttributeDecoder) error {
							var x rawExpr
							for e.Next() {
								switch e.Type() {
								case unix.NFTA_EXPR_NAME:
									x.name = e.String()
								case unix.NFTA_EXPR_DATA:
									x.data = e.Bytes()
								}
							}
							exprs = append(exprs, x)
							return nil
						})
					}
					return nil
				})
			}
		}
		if err := ad.Err(); err != nil {
			return err
		}
		fn(exprs, comment)
		return nil
	})
	if errors.Is(err, unix.ENOENT) {
		return nil // the chain went away since the list
	}
	return err
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
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	for _, tb := range tables {
		if t.Full() {
			return nil
		}
		t.Printf("table %s %s {\n", familyName(tb.family), tb.name)
		renderSets(t, conn, tb)
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

// renderSets writes a table's named sets and maps with their elements. A set that cannot
// be read is a comment: the rest of the ruleset still shows.
func renderSets(t *view.Text, conn *nftables.Conn, tb *nftTable) {
	nt := &nftables.Table{Name: tb.name, Family: nftables.TableFamily(tb.family)}
	sets, err := conn.GetSets(nt)
	if err != nil {
		t.Printf("\t# sets: %v\n", err)
		return
	}
	for _, s := range sets {
		if s.Anonymous || t.Full() {
			continue
		}
		what := "set"
		if s.IsMap {
			what = "map"
		}
		t.Printf("\t%s %s {\n", what, s.Name)
		typ := s.KeyType.Name
		if s.IsMap {
			typ += " : " + s.DataType.Name
		}
		t.Printf("\t\ttype %s\n", typ)
		var flags []string
		if s.Interval {
			flags = append(flags, "interval")
		}
		if s.Constant {
			flags = append(flags, "constant")
		}
		if s.Dynamic {
			flags = append(flags, "dynamic")
		}
		if s.HasTimeout {
			flags = append(flags, "timeout")
		}
		if len(flags) > 0 {
			t.Printf("\t\tflags %s\n", strings.Join(flags, ","))
		}
		elems, err := conn.GetSetElements(s)
		if err != nil {
			t.Printf("\t\t# elements: %v\n", err)
		} else if len(elems) > 0 {
			t.Printf("\t\telements = {\n")
			for _, e := range elems {
				if t.Full() {
					return
				}
				t.Printf("\t\t\t%s,\n", elementText(s, e))
			}
			t.Printf("\t\t}\n")
		}
		t.Printf("\t}\n")
	}
}

// elementText prints an element by the set's types: its key (each field of a
// concatenation), the end of an interval, and a map's value or verdict.
func elementText(s *nftables.Set, e nftables.SetElement) string {
	key := datumText(s.KeyType, e.Key)
	if len(e.KeyEnd) > 0 {
		key += "-" + datumText(s.KeyType, e.KeyEnd)
	}
	if e.IntervalEnd {
		key = "end " + key
	}
	switch {
	case e.VerdictData != nil:
		key += " : " + verdictText(e.VerdictData)
	case s.IsMap && len(e.Val) > 0:
		key += " : " + datumText(s.DataType, e.Val)
	}
	return key
}

func datumText(t nftables.SetDatatype, b []byte) string {
	fields := nftables.ConcatSetTypeElements(t)
	if len(fields) <= 1 {
		return scalarText(t.Name, b)
	}
	var parts []string
	for _, f := range fields {
		n := (int(f.Bytes) + 3) / 4 * 4
		if len(b) < n {
			return "0x" + hex.EncodeToString(b) // not the layout the type says: raw
		}
		parts = append(parts, scalarText(f.Name, b[:f.Bytes]))
		b = b[n:]
	}
	return strings.Join(parts, " . ")
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
