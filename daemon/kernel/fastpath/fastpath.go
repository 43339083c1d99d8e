// Package fastpath is edgegate's adapter over an nftables flowtable: established
// connections to Services (conntrack entries whose destination was NATed) are offloaded to
// it on the gateway's interfaces, so their packets are forwarded from the ingress hook and
// skip the rest of the stack's hooks. The table is its own, `inet edgegate-fastpath`, apart
// from any proxy mode's: it applies to what nftables and iptables modes forward (not to
// ipvs mode, whose connections IPVS itself must see), and it is replaced whole when the
// interfaces change.
//
//	table inet edgegate-fastpath {
//		flowtable services {
//			hook ingress priority filter
//			devices = { eth0, eth1 }
//			flags counter
//		}
//		chain forward {
//			type filter hook forward priority filter; policy accept;
//			ct state established ct status dnat meta l4proto { tcp, udp } flow add @services
//		}
//	}
//
// What the kernel keeps by itself: a connection with sequence adjustment (SYN proxying,
// helpers) is never offloaded; an offloaded flow whose conntrack entry is deleted (UDP
// cleanup when an endpoint goes) or times out is torn down within the flowtable's garbage
// collection (about a second) and its next packet takes the slow path again; TCP FIN and
// RST send a flow back to the slow path.
package fastpath

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Names of the fast path's objects.
const (
	TableName     = "edgegate-fastpath"
	FlowtableName = "services"
	ChainName     = "forward"
)

// ErrUnsupported says that the kernel has no nftables flowtables (CONFIG_NF_FLOW_TABLE, the
// nf_flow_table_inet and nft_flow_offload modules).
var ErrUnsupported = errors.New("this kernel has no nftables flowtables (nf_flow_table_inet, nft_flow_offload)")

// Kernel programs the fast path in the calling thread's network namespace.
type Kernel struct{}

var table = &nftables.Table{Family: nftables.TableFamilyINet, Name: TableName}

// Apply replaces the fast path with one over devices, in one transaction: flows offloaded
// before go back to the slow path and are offloaded again. No devices removes it.
func (Kernel) Apply(devices []string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	if exists(c) {
		c.DelTable(table)
	}
	if len(devices) > 0 {
		add(c, devices)
	}
	if err := c.Flush(); err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EOPNOTSUPP) {
			return fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		return fmt.Errorf("fast path over %s: %w", strings.Join(devices, ", "), err)
	}
	return nil
}

// Cleanup removes the fast path, if there is one.
func (Kernel) Cleanup() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	if !exists(c) {
		return nil
	}
	c.DelTable(table)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("remove table inet %s: %w", TableName, err)
	}
	return nil
}

func exists(c *nftables.Conn) bool {
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(ts, func(t *nftables.Table) bool { return t.Name == TableName })
}

// add writes the table, its flowtable over devices and the rule that offloads.
func add(c *nftables.Conn, devices []string) {
	c.AddTable(table)
	c.AddFlowtable(&nftables.Flowtable{Table: table, Name: FlowtableName, Hooknum: nftables.FlowtableHookIngress,
		Priority: nftables.FlowtablePriorityFilter, Devices: devices, Flags: nftables.FlowtableFlagsCounter})
	ch := c.AddChain(&nftables.Chain{Table: table, Name: ChainName, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
		c.AddRule(&nftables.Rule{Table: table, Chain: ch, Exprs: offload(proto)})
	}
}

// offload is "ct state established ct status dnat meta l4proto <proto> flow add @services".
func offload(proto byte) []expr.Any {
	bits := func(key expr.CtKey, mask uint32) []expr.Any {
		return []expr.Any{
			&expr.Ct{Register: 1, Key: key},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(mask), Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		}
	}
	out := append(bits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED), bits(expr.CtKeySTATUS, ctStatusDNAT)...)
	return append(out,
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.FlowOffload{Name: FlowtableName})
}

// ctStatusDNAT is IPS_DST_NAT: the connection's destination was rewritten.
const ctStatusDNAT = 1 << 5

// Link is what Devices looks at of an interface.
type Link struct {
	Name, Type string // Type as rtnetlink's IFLA_INFO_KIND spells it; "device" for hardware
	Up         bool
	Loopback   bool
}

// offloadable are the kinds of interface a flowtable forwards between: Ethernet-like
// devices with neighbours (hardware NICs, veth, VLANs, bonds, bridges, macvlans).
var offloadable = []string{"device", "veth", "vlan", "bond", "bridge", "macvlan"}

// Devices picks the interfaces the fast path covers: every up, Ethernet-like interface but
// loopback, sorted. Dummies (ipvs mode's VIP holder) and tunnels are left to the slow path.
func Devices(links []Link) []string {
	var out []string
	for _, l := range links {
		if l.Up && !l.Loopback && slices.Contains(offloadable, l.Type) {
			out = append(out, l.Name)
		}
	}
	slices.Sort(out)
	return out
}
