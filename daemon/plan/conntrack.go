package plan

import (
	"net/netip"

	"github.com/edgegate/edgegate/daemon/model"
)

// UDPFrontends knows, for every UDP frontend of a family (ClusterIP, external and
// LoadBalancer IPs with the port, and node ports), which endpoints may answer now. UDP has
// no connection to end: conntrack keeps steering a client's datagrams to wherever its first
// one went, so entries that point at a removed endpoint, or that were made while the
// service had no endpoint at all, must be deleted for traffic to move (kube-proxy does the
// same after each sync).
type UDPFrontends struct {
	byAddr     map[netip.AddrPort]map[netip.AddrPort]bool
	byNodePort map[uint16]map[netip.AddrPort]bool
}

// UDP computes the UDP frontends of one family.
func UDP(snap *model.Snapshot, f model.Family, cfg Config) UDPFrontends {
	u := UDPFrontends{byAddr: map[netip.AddrPort]map[netip.AddrPort]bool{}, byNodePort: map[uint16]map[netip.AddrPort]bool{}}
	// Sorted, first claim kept: the frontend belongs to the service the nft plan gives it
	// to (see nft.Table.AddElem), not to whichever a map iteration visits last.
	for _, sp := range snap.Sorted() {
		if sp.Name.Protocol != model.UDP {
			continue
		}
		p, ok := Policy(sp, f, cfg)
		if !ok {
			continue
		}
		eps := map[netip.AddrPort]bool{}
		for _, e := range p.Reachable {
			eps[netip.AddrPortFrom(e.Addr, e.Port)] = true
		}
		for _, a := range append(append([]netip.Addr{p.ClusterIP}, p.ExternalIPs...), p.LBIPs...) {
			if k := netip.AddrPortFrom(a, sp.Port); u.byAddr[k] == nil {
				u.byAddr[k] = eps
			}
		}
		if sp.NodePort != 0 && u.byNodePort[sp.NodePort] == nil {
			u.byNodePort[sp.NodePort] = eps
		}
	}
	return u
}

// Empty reports whether there is no UDP frontend at all.
func (u UDPFrontends) Empty() bool { return len(u.byAddr) == 0 && len(u.byNodePort) == 0 }

// Stale reports whether a UDP conntrack entry, given its original destination, its reply
// source (the endpoint it was DNATed to, or the original destination if it was not) and
// whether the original destination is a local address, must be deleted.
func (u UDPFrontends) Stale(origDst, replySrc netip.AddrPort, dstLocal bool) bool {
	eps, ok := u.byAddr[origDst]
	if !ok && dstLocal {
		eps, ok = u.byNodePort[origDst.Port()]
	}
	if !ok {
		return false
	}
	if replySrc == origDst {
		// Not translated: made while the service had no endpoint. Once it has one,
		// the entry would keep the flow away from it.
		return len(eps) > 0
	}
	return !eps[replySrc]
}
