// Package kernelview reads what the operator views show from the running kernel: each proxy
// mode's rules as the kernel holds them (nftables and iptables read back through netlink,
// the IPVS table), the rule counters and IPVS stats as traffic, interfaces with addresses,
// routes, and conntrack entries. It produces the view package's types; the dashboard
// renders them.
package kernelview

import (
	"fmt"
	"sort"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/view"
)

// Kernel reads the current network namespace: addresses, routes, conntrack entries (the
// dashboard's Kernel), the IPVS table and the nftables rule counters (NFTCounters). Each call opens its own sockets: the dashboard reads rarely, and a long-lived
// socket would need a lock shared with nothing else.
type Kernel struct{}

var _ NFTCounters = Kernel{}

func tableFamily(f model.Family) nftables.TableFamily {
	if f == model.IPv6 {
		return nftables.TableFamilyIPv6
	}
	return nftables.TableFamilyIPv4
}

func netlinkFamily(f model.Family) int {
	if f == model.IPv6 {
		return unix.AF_INET6
	}
	return unix.AF_INET
}

// Network lists the interfaces with their addresses and the routes of every table.
func (Kernel) Network() (view.Network, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return view.Network{}, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return view.Network{}, fmt.Errorf("links: %w", err)
	}
	var n view.Network
	names := map[int]string{}
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		addrs, err := h.AddrList(l, unix.AF_UNSPEC)
		if err != nil {
			return n, fmt.Errorf("addresses of %s: %w", a.Name, err)
		}
		dl := view.Link{Name: a.Name, Up: a.Flags&unix.IFF_UP != 0, Addrs: []string{}}
		for _, ad := range addrs {
			dl.Addrs = append(dl.Addrs, ad.IPNet.String())
		}
		n.Links = append(n.Links, dl)
	}
	sort.Slice(n.Links, func(i, j int) bool { return n.Links[i].Name < n.Links[j].Name })
	routes, err := h.RouteListFiltered(unix.AF_UNSPEC, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return n, fmt.Errorf("routes: %w", err)
	}
	n.Routes = []string{}
	for _, r := range routes {
		n.Routes = append(n.Routes, routeString(r, names))
	}
	return n, nil
}

// routeString prints a route the way ip route does, roughly.
func routeString(r netlink.Route, names map[int]string) string {
	s := "default"
	if r.Dst != nil {
		s = r.Dst.String()
	}
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	if dev := names[r.LinkIndex]; dev != "" {
		s += " dev " + dev
	}
	if r.Src != nil {
		s += " src " + r.Src.String()
	}
	if r.Table != unix.RT_TABLE_MAIN {
		s += fmt.Sprintf(" table %d", r.Table)
	}
	if r.Type == unix.RTN_LOCAL {
		s = "local " + s
	}
	return s
}

// Conntrack lists the entries of a family in conntrack -L form.
func (Kernel) Conntrack(f model.Family) ([]string, error) {
	flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, netlink.InetFamily(netlinkFamily(f)))
	if err != nil {
		return nil, fmt.Errorf("conntrack %s: %w", f, err)
	}
	out := make([]string, 0, len(flows))
	for _, fl := range flows {
		out = append(out, fl.String())
	}
	sort.Strings(out)
	return out, nil
}

// IPVS prints the IPVS table as `ipvsadm -Ln` does, followed by its `--stats` form.
func (Kernel) IPVS() (string, error) {
	if err := ipvs.Available(); err != nil {
		return "", err
	}
	t, err := ipvs.Open()
	if err != nil {
		return "", fmt.Errorf("ipvs: %w", err)
	}
	defer t.Close()
	entries, err := ipvs.List(t)
	if err != nil {
		return "", fmt.Errorf("ipvs: %w", err)
	}
	return ipvs.Format(entries, false) + "\n" + ipvs.Format(entries, true), nil
}
