package model

import (
	"net/netip"
	"strings"

	netutils "k8s.io/utils/net"
)

// The API server has not always been strict about addresses: objects stored before its
// validation tightened may hold IPv4 parts with leading zeros ("010.0.0.1"), and
// loadBalancerSourceRanges padded with spaces are still accepted today. kube-proxy reads such
// addresses "sloppily" (leading zeros as decimal, ranges trimmed), so edgegate reads them the
// same way: an address means what it means to kube-proxy, and a source range that restricts
// traffic is never dropped because of its spelling.

// ParseAddr parses an IP address as kube-proxy does: Go's strict form first, then with
// leading zeros allowed (read as decimal). IPv4-mapped IPv6 addresses are unmapped by the
// callers that want it; zones are refused.
func ParseAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a, a.Zone() == ""
	}
	ip := netutils.ParseIPSloppy(s)
	if ip == nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(ip)
	if ok && ip.To4() != nil && !strings.Contains(s, ":") {
		a = a.Unmap() // net.IP keeps IPv4 in 16 bytes
	}
	return a, ok
}

// ParsePrefix parses a CIDR as kube-proxy reads loadBalancerSourceRanges: trimmed of white
// space, leading zeros allowed, and masked to its network ("10.1.2.3/24" is 10.1.2.0/24).
// An IPv4-mapped IPv6 prefix ("::ffff:10.0.0.0/104") is refused: packets never carry such
// sources, so as a source range it would admit nobody where the operator meant somebody.
func ParsePrefix(s string) (netip.Prefix, bool) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), p.Addr().Zone() == "" && !p.Addr().Is4In6()
	}
	_, ipnet, err := netutils.ParseCIDRSloppy(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(ipnet.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := ipnet.Mask.Size()
	if len(ipnet.IP) == 4 {
		a = a.Unmap()
	}
	return netip.PrefixFrom(a, ones).Masked(), !a.Is4In6()
}
