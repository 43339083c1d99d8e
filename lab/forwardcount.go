package lab

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The lab's own view of the forward hook, written over netlink (a guest has no nft): what
// skips the hooks (a flowtable's offloaded flows) is what these counters do not see.

// ForwardCounter counts the TCP packets h forwards to and from port, in a table of its own
// (inet egtest-forward-count) at priority 10 of the forward hook.
type ForwardCounter struct {
	h *Host
}

var countTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: "egtest-forward-count"}

// CountForwarded starts counting; Close removes the table.
func (h *Host) CountForwarded(port uint16) (*ForwardCounter, error) {
	conn, err := nftables.New(nftables.WithNetNSFd(int(h.ns)))
	if err != nil {
		return nil, fmt.Errorf("nftables in %s: %w", h.Name, err)
	}
	conn.AddTable(countTable)
	prio := nftables.ChainPriority(10)
	ch := conn.AddChain(&nftables.Chain{Table: countTable, Name: "forward", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: &prio})
	for _, offset := range []uint32{0, 2} { // source port, destination port
		conn.AddRule(&nftables.Rule{Table: countTable, Chain: ch, Exprs: []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: offset, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
			&expr.Counter{},
		}})
	}
	if err := conn.Flush(); err != nil {
		return nil, fmt.Errorf("counting table in %s: %w", h.Name, err)
	}
	return &ForwardCounter{h: h}, nil
}

// Packets is the count so far.
func (c *ForwardCounter) Packets() (uint64, error) {
	conn, err := nftables.New(nftables.WithNetNSFd(int(c.h.ns)))
	if err != nil {
		return 0, fmt.Errorf("nftables in %s: %w", c.h.Name, err)
	}
	rules, err := conn.GetRules(countTable, &nftables.Chain{Table: countTable, Name: "forward"})
	if err != nil {
		return 0, fmt.Errorf("counting rules in %s: %w", c.h.Name, err)
	}
	var n uint64
	for _, r := range rules {
		for _, e := range r.Exprs {
			if ctr, ok := e.(*expr.Counter); ok {
				n += ctr.Packets
			}
		}
	}
	return n, nil
}

// Close removes the counting table.
func (c *ForwardCounter) Close() error {
	conn, err := nftables.New(nftables.WithNetNSFd(int(c.h.ns)))
	if err != nil {
		return fmt.Errorf("nftables in %s: %w", c.h.Name, err)
	}
	conn.DelTable(countTable)
	return conn.Flush()
}

// Flowtables lists the flowtables of an inet table of h, each as "name: dev, dev".
func (h *Host) Flowtables(table string) ([]string, error) {
	conn, err := nftables.New(nftables.WithNetNSFd(int(h.ns)))
	if err != nil {
		return nil, fmt.Errorf("nftables in %s: %w", h.Name, err)
	}
	fts, err := conn.ListFlowtables(&nftables.Table{Family: nftables.TableFamilyINet, Name: table})
	if err != nil {
		return nil, fmt.Errorf("flowtables of inet %s in %s: %w", table, h.Name, err)
	}
	var out []string
	for _, f := range fts {
		out = append(out, fmt.Sprintf("%s: %v", f.Name, f.Devices))
	}
	return out, nil
}
