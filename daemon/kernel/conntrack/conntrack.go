// Package conntrack deletes stale UDP conntrack entries through netlink, so that UDP flows
// follow endpoint changes instead of sticking to an endpoint that went away.
package conntrack

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Cleaner deletes stale entries; Kernel and tests' fakes implement it.
type Cleaner interface {
	// CleanUDP deletes the UDP entries of one family that plan.UDPFrontends calls stale
	// and returns how many went.
	CleanUDP(f model.Family, u plan.UDPFrontends) (int, error)
}

// Kernel is the netlink-backed Cleaner for the current network namespace.
type Kernel struct{}

var _ Cleaner = (*Kernel)(nil)

type staleFilter struct {
	u       plan.UDPFrontends
	isLocal func(netip.Addr) bool
}

func addrPort(ip net.IP, port uint16) netip.AddrPort {
	a, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(a.Unmap(), port)
}

func (s staleFilter) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	if f.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	dst := addrPort(f.Forward.DstIP, f.Forward.DstPort)
	reply := addrPort(f.Reverse.SrcIP, f.Reverse.SrcPort)
	return s.u.Stale(dst, reply, s.isLocal(dst.Addr()))
}

// localAddrs lists this host's addresses: node-port entries are those sent to one of them.
func localAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("local addresses: %w", err)
	}
	out := map[netip.Addr]bool{}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out, nil
}

// CleanUDP implements Cleaner.
func (k *Kernel) CleanUDP(f model.Family, u plan.UDPFrontends) (int, error) {
	if u.Empty() {
		return 0, nil
	}
	fam := netlink.InetFamily(unix.AF_INET)
	if f == model.IPv6 {
		fam = unix.AF_INET6
	}
	local, err := localAddrs()
	if err != nil {
		return 0, err
	}
	n, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam, staleFilter{u: u, isLocal: func(a netip.Addr) bool { return local[a] }})
	if err != nil {
		return int(n), fmt.Errorf("conntrack %s: %w", f, err)
	}
	return int(n), nil
}
