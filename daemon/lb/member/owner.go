// Package member decides which gateway announces each LoadBalancer IP: gateways on one L2
// segment hear each other's heartbeats (a dead peer is noticed in a few hundred
// milliseconds), every IP has exactly one owner among the live gateways by rendezvous
// hashing, and the Kubernetes API's node Leases settle ownership when the segment is
// partitioned (a peer that stopped being heard but keeps renewing its Lease is alive on the
// other side, so it keeps its share: no IP is announced from both sides).
package member

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
)

// Owners gives each address its owner among members by rendezvous (highest random weight)
// hashing: every gateway computes the same answer from the same member set, addresses spread
// evenly, and a member leaving moves only its own addresses (to their second choice), a
// member joining takes only its share. With no members nothing is owned.
func Owners(addrs []netip.Addr, members []string) map[netip.Addr]string {
	out := make(map[netip.Addr]string, len(addrs))
	if len(members) == 0 {
		return out
	}
	for _, a := range addrs {
		best, bestW := "", uint64(0)
		for _, m := range members {
			if w := weight(a, m); best == "" || w > bestW || w == bestW && m < best {
				best, bestW = m, w
			}
		}
		out[a] = best
	}
	return out
}

// Owned lists the addresses owned by self, sorted.
func Owned(addrs []netip.Addr, members []string, self string) []netip.Addr {
	var out []netip.Addr
	for a, o := range Owners(addrs, members) {
		if o == self {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// weight is the rendezvous weight of member m for address a: the first 8 bytes of
// SHA-256 over the address and the name, so that no member's name can bias the spread.
func weight(a netip.Addr, m string) uint64 {
	h := sha256.New()
	b := a.As16()
	h.Write(b[:])
	h.Write([]byte{0})
	h.Write([]byte(m))
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}
