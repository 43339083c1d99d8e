package lab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
)

// KernelState is what a namespace's kernel holds of the proxy modes, read through netlink
// (the lab has no nft, iptables or ipvsadm binary to ask): the nftables tables with their
// chains and the chains each rule jumps to, the IPVS virtual servers with their real
// servers, and the links with their addresses and local routes.
type KernelState struct {
	Tables []Table
	// HasIPVS says whether the kernel has IPVS at all; IPVS lists its table then.
	HasIPVS bool
	IPVS    []ipvs.Entry
	Links   []Link
}

// Table is an nftables table.
type Table struct {
	Family, Name string
	Chains       []Chain
}

// Chain is an nftables chain; Jumps are its rules' jump and goto verdicts ("jump EG-SERVICES").
type Chain struct {
	Name  string
	Jumps []string
}

// Link is a network interface; Addrs leave out IPv6 link-local addresses. Local are the
// local-table routes through it that no address of it made (IPVS mode's VIPs).
type Link struct {
	Name, Type string
	Addrs      []netip.Prefix
	Local      []netip.Prefix
}

var familyNames = map[nftables.TableFamily]string{
	nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6", nftables.TableFamilyINet: "inet",
	nftables.TableFamilyARP: "arp", nftables.TableFamilyBridge: "bridge", nftables.TableFamilyNetdev: "netdev",
}

// KernelState reads h's kernel state.
func (h *Host) KernelState() (KernelState, error) {
	var st KernelState
	var err error
	if st.Tables, err = h.nftTables(); err != nil {
		return st, err
	}
	if st.Links, err = h.links(); err != nil {
		return st, err
	}
	if ipvs.Available() == nil {
		st.HasIPVS = true
		if st.IPVS, err = h.IPVS(); err != nil {
			return st, err
		}
	}
	return st, nil
}

func (h *Host) nftTables() ([]Table, error) {
	conn, err := nftables.New(nftables.WithNetNSFd(int(h.ns)), nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("nftables in %s: %w", h.Name, err)
	}
	defer conn.CloseLasting()
	tables, err := conn.ListTables()
	if err != nil {
		return nil, fmt.Errorf("nftables tables in %s: %w", h.Name, err)
	}
	chains, err := conn.ListChains()
	if err != nil {
		return nil, fmt.Errorf("nftables chains in %s: %w", h.Name, err)
	}
	var out []Table
	for _, t := range tables {
		tab := Table{Family: familyNames[t.Family], Name: t.Name}
		for _, c := range chains {
			if c.Table.Name != t.Name || c.Table.Family != t.Family {
				continue
			}
			rules, err := conn.GetRules(t, c)
			if err != nil {
				return nil, fmt.Errorf("rules of %s %s %s in %s: %w", tab.Family, t.Name, c.Name, h.Name, err)
			}
			ch := Chain{Name: c.Name}
			for _, r := range rules {
				for _, e := range r.Exprs {
					if v, ok := e.(*expr.Verdict); ok && v.Kind == expr.VerdictJump {
						ch.Jumps = append(ch.Jumps, "jump "+v.Chain)
					} else if ok && v.Kind == expr.VerdictGoto {
						ch.Jumps = append(ch.Jumps, "goto "+v.Chain)
					}
				}
			}
			tab.Chains = append(tab.Chains, ch)
		}
		slices.SortFunc(tab.Chains, func(a, b Chain) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, tab)
	}
	slices.SortFunc(out, func(a, b Table) int {
		return strings.Compare(a.Family+" "+a.Name, b.Family+" "+b.Name)
	})
	return out, nil
}

func (h *Host) links() ([]Link, error) {
	n, err := openLinks(h)
	if err != nil {
		return nil, err
	}
	defer n.close()
	ls, err := n.nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("links of %s: %w", h.Name, err)
	}
	local := map[int][]netip.Prefix{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := n.nl.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_TYPE)
		if err != nil {
			return nil, fmt.Errorf("local routes of %s: %w", h.Name, err)
		}
		for _, r := range rs {
			if r.Dst == nil || r.Protocol == unix.RTPROT_KERNEL {
				continue
			}
			if ip, ok := netip.AddrFromSlice(r.Dst.IP); ok {
				ones, _ := r.Dst.Mask.Size()
				local[r.LinkIndex] = append(local[r.LinkIndex], netip.PrefixFrom(ip.Unmap(), ones))
			}
		}
	}
	var out []Link
	for _, l := range ls {
		link := Link{Name: l.Attrs().Name, Type: l.Type(), Local: local[l.Attrs().Index]}
		slices.SortFunc(link.Local, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		as, err := n.nl.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("addresses of %s in %s: %w", link.Name, h.Name, err)
		}
		for _, a := range as {
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok || ip.Unmap().IsLinkLocalUnicast() {
				continue
			}
			ones, _ := a.Mask.Size()
			link.Addrs = append(link.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
		}
		slices.SortFunc(link.Addrs, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		out = append(out, link)
	}
	slices.SortFunc(out, func(a, b Link) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// IPVS reads h's IPVS table with its counters (ErrNotAvailable without IPVS).
func (h *Host) IPVS() ([]ipvs.Entry, error) {
	var entries []ipvs.Entry
	err := h.Do(func() error {
		// The handle's netlink socket is made here, so it belongs to h's namespace.
		t, err := ipvs.Open()
		if err != nil {
			return err
		}
		defer t.Close()
		entries, err = ipvs.List(t)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("IPVS table of %s: %w", h.Name, err)
	}
	return entries, nil
}

// FlushIPVS deletes every virtual server of h, as `ipvsadm -C` would.
func (h *Host) FlushIPVS() error {
	return h.Do(func() error {
		t, err := ipvs.Open()
		if err != nil {
			return err
		}
		defer t.Close()
		return t.Flush()
	})
}

// FlushNFTChain deletes every rule of one nftables chain of h, as `nft flush chain` would.
func (h *Host) FlushNFTChain(family nftables.TableFamily, table, chain string) error {
	conn, err := nftables.New(nftables.WithNetNSFd(int(h.ns)))
	if err != nil {
		return fmt.Errorf("nftables in %s: %w", h.Name, err)
	}
	conn.FlushChain(&nftables.Chain{Name: chain, Table: &nftables.Table{Family: family, Name: table}})
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("flush chain %s %s %s: %w", familyNames[family], table, chain, err)
	}
	return nil
}

// FlushNFTTable deletes every rule of one nftables table of h, as `nft flush table` would.
func (h *Host) FlushNFTTable(family nftables.TableFamily, table string) error {
	conn, err := nftables.New(nftables.WithNetNSFd(int(h.ns)))
	if err != nil {
		return fmt.Errorf("nftables in %s: %w", h.Name, err)
	}
	conn.FlushTable(&nftables.Table{Family: family, Name: table})
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("flush table %s %s: %w", familyNames[family], table, err)
	}
	return nil
}

// String renders the state one item a line, in the words of the stock tools: "table ip
// edgegate", "chain EG-SERVICES", "jump EG-SERVICES", ipvsadm -Ln's lines, "link
// edgegate-ipvs0 dummy" followed by its addresses and local routes.
func (s KernelState) String() string {
	var b strings.Builder
	for _, t := range s.Tables {
		fmt.Fprintf(&b, "table %s %s\n", t.Family, t.Name)
		for _, c := range t.Chains {
			fmt.Fprintf(&b, "  chain %s\n", c.Name)
			for _, j := range c.Jumps {
				fmt.Fprintf(&b, "    %s\n", j)
			}
		}
	}
	if s.HasIPVS {
		b.WriteString(ipvs.Format(s.IPVS, false))
	}
	for _, l := range s.Links {
		fmt.Fprintf(&b, "link %s %s\n", l.Name, l.Type)
		for _, a := range l.Addrs {
			fmt.Fprintf(&b, "  addr %s\n", a)
		}
		for _, a := range l.Local {
			fmt.Fprintf(&b, "  local %s\n", a)
		}
	}
	return b.String()
}

// Has reports whether line is one of String's lines (leading and trailing space aside):
// "table ip edgegate" must not match "table ip edgegate-ipvs".
func (s KernelState) Has(line string) bool {
	for l := range strings.Lines(s.String()) {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

// TablesNamed lists the tables of that name, as "table <family> <name>".
func (s KernelState) TablesNamed(name string) []string {
	var out []string
	for _, t := range s.Tables {
		if t.Name == name {
			out = append(out, "table "+t.Family+" "+t.Name)
		}
	}
	return out
}

// TablesMatching lists the tables whose names match, as "table <family> <name>".
func (s KernelState) TablesMatching(match func(name string) bool) []string {
	var out []string
	for _, t := range s.Tables {
		if match(t.Name) {
			out = append(out, "table "+t.Family+" "+t.Name)
		}
	}
	return out
}

// Link returns the named link.
func (s KernelState) Link(name string) (Link, bool) {
	i := slices.IndexFunc(s.Links, func(l Link) bool { return l.Name == name })
	if i < 0 {
		return Link{}, false
	}
	return s.Links[i], true
}

// VirtualServer returns the IPVS virtual server on addr ("TCP", "10.96.10.1:80").
func (s KernelState) VirtualServer(proto, addr string) (ipvs.Entry, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return ipvs.Entry{}, err
	}
	for _, e := range s.IPVS {
		if string(e.Proto) == proto && e.Addr == ap.Addr() && e.Port == ap.Port() {
			return e, nil
		}
	}
	return ipvs.Entry{}, errors.New("no virtual server " + proto + " " + addr)
}

// ipNet is a prefix as netlink spells it.
func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// IPVSConnections returns h's IPVS connection table as /proc/net/ip_vs_conn lists it
// (addresses in hex), as ipvsadm -Lnc would list it; it explains a failed probe that
// nothing else shows.
func (h *Host) IPVSConnections() (string, error) {
	conns, err := h.ReadProcNet("ip_vs_conn")
	if err != nil {
		return "", fmt.Errorf("IPVS connections of %s: %w", h.Name, err)
	}
	return string(conns), nil
}
