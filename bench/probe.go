package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// probe reads a proxy's namespace's nftables state over netlink, independently of both
// programs (edgegate writes over netlink itself, kube-proxy through nft and iptables-restore;
// with iptables-nft, the default on Debian, iptables rules are nftables rules too).
//
// It is cheap to poll because of the ruleset generation: the kernel bumps one counter per
// namespace at every committed transaction, and reading it is one small netlink round trip.
// The probe reads it every pollEvery and looks at the rules only when it changed, so it sees
// a commit within pollEvery without walking 100,000 chains each time. Read-only requests
// (nft list, iptables-save) do not bump it.
type probe struct {
	ns   string
	gen  *netlink.Conn   // NFT_MSG_GETGEN
	nft  *nftables.Conn  // rules, sets
	fd   int             // the namespace, open while the connections are
	kind layout          // what to look at
	tbl  *nftables.Table // the table holding the service dispatch and endpoint chains
	// found remembers the table each port chain was last found in (layout.Tables).
	found map[string]*nftables.Table
}

// pollEvery is how often the probe reads the generation. Every read is a netlink round trip
// of a few microseconds; 2 ms keeps the probe's error well under the 20 ms target.
const pollEvery = 2 * time.Millisecond

// layout says where a program in a mode keeps what the probe counts.
type layout struct {
	// Table and Family hold the chains below.
	Table  string
	Family nftables.TableFamily
	// Tables, when set, says which tables of Family hold them instead: edgegate's
	// nftables mode splits a large cluster's dispatch over tables (each Service's chains
	// and its elements of the service map in one of them).
	Tables func(name string) bool
	// ServiceMap (nftables mode) has one element per ClusterIP, protocol and port; the full
	// sync is in once it holds every service port.
	ServiceMap string
	// ServicesChain and SvcPrefix (iptables mode): the full sync is in once ServicesChain
	// jumps to a SvcPrefix chain for every service port.
	ServicesChain, SvcPrefix string
	// PortChain names a service port's dispatch chain, EndpointChain an endpoint's chain.
	// An endpoint is in the kernel when the service chain sends packets to it: a rule jumps
	// or goes to its chain, or looks the choice up in a map one of whose values is its chain
	// (a verdict) or its address . port (kube-proxy's nftables mode DNATs straight from such
	// a map when no endpoint needs a chain of its own), or the rule DNATs to its address and
	// port itself (edgegate's nftables mode for services without affinity). Both programs
	// change a service's dispatch in the transaction that adds or removes the endpoint; the
	// endpoint's own chain may outlive it (kube-proxy's iptables mode deletes stale chains
	// only every 30 s in clusters of over 1000 endpoints), so it is not what is probed.
	PortChain, EndpointChain func(ep endpointRef) string
}

func newProbe(ns string, l layout) (*probe, error) {
	fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("probe: open namespace %s: %w", ns, err)
	}
	p := &probe{ns: ns, fd: fd, kind: l, tbl: &nftables.Table{Name: l.Table, Family: l.Family},
		found: map[string]*nftables.Table{}}
	if p.gen, err = netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: fd}); err != nil {
		p.close()
		return nil, fmt.Errorf("probe: netlink in %s: %w", ns, err)
	}
	if p.nft, err = nftables.New(nftables.WithNetNSFd(fd), nftables.AsLasting()); err != nil {
		p.close()
		return nil, fmt.Errorf("probe: nftables in %s: %w", ns, err)
	}
	return p, nil
}

func (p *probe) close() {
	if p.nft != nil {
		_ = p.nft.CloseLasting()
	}
	if p.gen != nil {
		_ = p.gen.Close()
	}
	if p.fd > 0 {
		_ = unix.Close(p.fd)
	}
}

// generation reads the namespace's nftables ruleset generation.
func (p *probe) generation() (uint32, error) {
	msgs, err := p.gen.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN),
			Flags: netlink.Request,
		},
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0}, // nfgenmsg
	})
	if err != nil {
		return 0, fmt.Errorf("probe %s: get generation: %w", p.ns, err)
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, fmt.Errorf("probe %s: generation reply: %w", p.ns, err)
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == unix.NFTA_GEN_ID {
				return ad.Uint32(), nil
			}
		}
	}
	return 0, fmt.Errorf("probe %s: generation reply without NFTA_GEN_ID", p.ns)
}

// services counts the service ports the kernel dispatches: elements of the service map
// (nftables), or rules of the services chain that jump to a service chain (iptables).
// 0 while the table, map or chain does not exist yet.
func (p *probe) services() (int, error) {
	if p.kind.ServiceMap != "" {
		tables, err := p.tables()
		if err != nil {
			return 0, err
		}
		n := 0
		for _, t := range tables {
			elems, err := p.nft.GetSetElements(&nftables.Set{Table: t, Name: p.kind.ServiceMap})
			if err != nil {
				if absent(err) {
					continue
				}
				return 0, fmt.Errorf("probe %s: elements of %s %s: %w", p.ns, t.Name, p.kind.ServiceMap, err)
			}
			n += len(elems)
		}
		return n, nil
	}
	rules, _, err := p.rules(p.kind.ServicesChain)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range rules {
		for _, e := range r.Exprs {
			if v, ok := e.(*expr.Verdict); ok && strings.HasPrefix(v.Chain, p.kind.SvcPrefix) {
				n++
				break
			}
		}
	}
	return n, nil
}

// tables lists the tables that hold the layout's chains: Table, or those Tables accepts.
func (p *probe) tables() ([]*nftables.Table, error) {
	if p.kind.Tables == nil {
		return []*nftables.Table{p.tbl}, nil
	}
	all, err := p.nft.ListTablesOfFamily(p.kind.Family)
	if err != nil {
		return nil, fmt.Errorf("probe %s: list tables: %w", p.ns, err)
	}
	var out []*nftables.Table
	for _, t := range all {
		if p.kind.Tables(t.Name) {
			out = append(out, t)
		}
	}
	return out, nil
}

// rules lists a chain's rules and returns the table holding it; none when no table
// holds it. With layout.Tables, the table it was last found in is asked first, and a table
// that lists no rules for the chain is taken not to hold it (the kernel answers a dump of a
// chain a table lacks with nothing; the chains looked for this way are never empty).
func (p *probe) rules(chain string) ([]*nftables.Rule, *nftables.Table, error) {
	tables := []*nftables.Table{p.tbl}
	if p.kind.Tables != nil {
		all, err := p.tables()
		if err != nil {
			return nil, nil, err
		}
		tables = all
		if t := p.found[chain]; t != nil {
			tables = append([]*nftables.Table{t}, tables...)
		}
	}
	for _, t := range tables {
		rules, err := p.nft.GetRules(t, &nftables.Chain{Name: chain, Table: t})
		if err != nil {
			if absent(err) {
				continue
			}
			return nil, nil, fmt.Errorf("probe %s: rules of %s %s: %w", p.ns, t.Name, chain, err)
		}
		if len(rules) == 0 && p.kind.Tables != nil {
			continue
		}
		p.found[chain] = t
		return rules, t, nil
	}
	return nil, nil, nil
}

// endpoint reports whether the endpoint is in its service's dispatch (layout.PortChain).
func (p *probe) endpoint(ep endpointRef) (bool, error) {
	rules, table, err := p.rules(p.kind.PortChain(ep))
	if err != nil {
		return false, err
	}
	chain := p.kind.EndpointChain(ep)
	addr := ep.Addr.As4()
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], ep.TargetPort)
	for _, r := range rules {
		if dnatsTo(r, addr[:], port[:]) {
			return true, nil
		}
		for _, e := range r.Exprs {
			switch e := e.(type) {
			case *expr.Verdict:
				if e.Chain == chain {
					return true, nil
				}
			case *expr.Lookup:
				if !e.IsDestRegSet || e.SetName == "" {
					continue
				}
				elems, err := p.mapValues(table, e.SetName)
				if err != nil {
					return false, err
				}
				for _, v := range elems {
					// A concatenation's fields are padded to 4 bytes: address, then port.
					if v.chain == chain || len(v.data) >= 6 && [4]byte(v.data[:4]) == addr && [2]byte(v.data[4:6]) == port {
						return true, nil
					}
				}
			}
		}
	}
	return false, nil
}

// dnatsTo reports whether a rule DNATs to the address and port it loads as immediates.
func dnatsTo(r *nftables.Rule, addr, port []byte) bool {
	var hasAddr, hasPort, dnat bool
	for _, e := range r.Exprs {
		switch e := e.(type) {
		case *expr.Immediate:
			hasAddr = hasAddr || bytes.Equal(e.Data, addr)
			hasPort = hasPort || bytes.Equal(e.Data, port)
		case *expr.NAT:
			dnat = dnat || e.Type == expr.NATTypeDestNAT
		}
	}
	return hasAddr && hasPort && dnat
}

// mapValue is one map element's value: a verdict's chain, or data.
type mapValue struct {
	chain string
	data  []byte
}

// mapValues dumps a map's values (google/nftables v0.3.0 decodes no verdict values); none
// when the map does not exist (replaced meanwhile: the next generation tells).
func (p *probe) mapValues(table *nftables.Table, set string) ([]mapValue, error) {
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.NFTA_SET_ELEM_LIST_TABLE, table.Name)
	ae.String(unix.NFTA_SET_ELEM_LIST_SET, set)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	msgs, err := p.gen.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETSETELEM),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: append([]byte{byte(table.Family), unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		if absent(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("probe %s: elements of %s %s: %w", p.ns, table.Name, set, err)
	}
	var out []mapValue
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		err := each(m.Data[4:], unix.NFTA_SET_ELEM_LIST_ELEMENTS, func(list []byte) error {
			return each(list, unix.NFTA_LIST_ELEM, func(elem []byte) error {
				return each(elem, unix.NFTA_SET_ELEM_DATA, func(data []byte) error {
					var v mapValue
					ad, err := netlink.NewAttributeDecoder(data)
					if err != nil {
						return err
					}
					for ad.Next() {
						switch ad.Type() {
						case unix.NFTA_DATA_VALUE:
							v.data = ad.Bytes()
						case unix.NFTA_DATA_VERDICT:
							_ = each(ad.Bytes(), unix.NFTA_VERDICT_CHAIN, func(b []byte) error {
								v.chain = strings.TrimRight(string(b), "\x00")
								return nil
							})
						}
					}
					out = append(out, v)
					return ad.Err()
				})
			})
		})
		if err != nil {
			return nil, fmt.Errorf("probe %s: elements of %s %s: %w", p.ns, table.Name, set, err)
		}
	}
	return out, nil
}

// each calls fn with the payload of every attribute of type typ in b.
func each(b []byte, typ uint16, fn func([]byte) error) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return err
	}
	for ad.Next() {
		if ad.Type() == typ {
			if err := fn(ad.Bytes()); err != nil {
				return err
			}
		}
	}
	return ad.Err()
}

// absent says the object asked for does not exist (yet or any more). google/nftables
// wraps some errors with %v, so the errno is matched by its text as well.
func absent(err error) bool {
	return errors.Is(err, unix.ENOENT) || strings.Contains(err.Error(), unix.ENOENT.Error())
}

// waiter polls a probe's generation and runs a check at every change of it.
type waiter struct {
	p *probe
	// gen is the last generation seen, seenAt when it was first seen.
	gen    uint32
	seenAt time.Time
}

func newWaiter(p *probe) (*waiter, error) {
	w := &waiter{p: p}
	return w, w.reset()
}

// reset takes the current generation as the one before the awaited change: call it just
// before causing the change.
func (w *waiter) reset() error {
	g, err := w.p.generation()
	if err != nil {
		return err
	}
	w.gen, w.seenAt = g, time.Now()
	return nil
}

// wait polls until check reports true after a new generation, and returns when the
// generation that satisfied it was first seen: the commit happened at most pollEvery before.
// It gives up at deadline (errTimeout), or when stop (may be nil) is closed (errStopped).
func (w *waiter) wait(deadline time.Time, stop <-chan struct{}, check func() (bool, error)) (time.Time, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return time.Time{}, errStopped
		case <-tick.C:
		}
		now := time.Now()
		if now.After(deadline) {
			return time.Time{}, errTimeout
		}
		g, err := w.p.generation()
		if err != nil {
			return time.Time{}, err
		}
		if g == w.gen {
			continue
		}
		w.gen, w.seenAt = g, now
		ok, err := check()
		if err != nil {
			return time.Time{}, err
		}
		if !ok {
			continue
		}
		// A commit during the check may be what satisfied it: the state is then only known
		// to be there as of now.
		if g2, err := w.p.generation(); err == nil && g2 != g {
			w.gen, w.seenAt = g2, time.Now()
		}
		return w.seenAt, nil
	}
}

var (
	errTimeout = errors.New("timed out")
	errStopped = errors.New("stopped")
)
