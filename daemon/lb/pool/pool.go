// Package pool is edgegate's LoadBalancer address management as pure functions: the address
// pools an operator configures (Parse), and the allocation of those addresses to Services
// of type LoadBalancer (Allocate). Nothing here talks to the API server, reads a clock or
// starts a goroutine; daemon/lb/alloc feeds it from informers and writes the results back.
package pool

import (
	"fmt"

	"github.com/edgegate/edgegate/daemon/model"
	"net/netip"
	"slices"
	"strings"
)

// Where the pools are configured: one key of one ConfigMap. kube-system, because gateways
// are cluster infrastructure and the allocator's Lease lives there too, so one Role in one
// namespace grants both.
const (
	ConfigMapName      = "edgegate-lb-pools"
	ConfigMapNamespace = "kube-system"
	ConfigMapKey       = "pools.yaml"
)

// Range is an inclusive range of addresses of one family.
type Range struct {
	First, Last netip.Addr
}

// Contains reports whether a is in the range.
func (r Range) Contains(a netip.Addr) bool {
	return a.BitLen() == r.First.BitLen() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// overlaps reports whether two ranges share an address.
func (r Range) overlaps(o Range) bool {
	return r.First.BitLen() == o.First.BitLen() && r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

// Prefix returns the range as a CIDR when it is exactly one.
func (r Range) Prefix() (netip.Prefix, bool) {
	for bits := 0; bits <= r.First.BitLen(); bits++ {
		p := netip.PrefixFrom(r.First, bits).Masked()
		if p.Addr() == r.First && lastAddr(p) == r.Last {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// String is the range as it is configured: a CIDR when it is one, else "first-last".
func (r Range) String() string {
	if p, ok := r.Prefix(); ok {
		return p.String()
	}
	return r.First.String() + "-" + r.Last.String()
}

// lastAddr is the highest address of a (masked) prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	off := 0
	if p.Addr().Is4() {
		off = 12 // As16 puts an IPv4 address in the last 4 bytes
	}
	for i := off*8 + p.Bits(); i < 128; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		a = a.Unmap()
	}
	return a
}

// Pool is a named set of addresses and the interfaces they are announced on.
type Pool struct {
	Name string
	// Ranges are sorted, IPv4 before IPv6, and do not overlap.
	Ranges []Range
	// Interfaces are where the gateway owning an address of the pool answers ARP/NDP for it.
	Interfaces []string
	// AutoAssign lets the allocator pick addresses from the pool for Services that asked for
	// none; when false only requested addresses, or Services naming the pool, get them.
	AutoAssign bool
	// AvoidBuggyIPs keeps IPv4 addresses ending in .0 and .255 out of allocation, for clients
	// behind equipment that mistakes them for network or broadcast addresses.
	AvoidBuggyIPs bool
	// Protection guards the Services with an address of the pool that have no
	// edgegate.dev/protection of their own (nftables mode); nil for none.
	Protection *model.Protection
}

// Contains reports whether a is one of the pool's addresses.
func (p *Pool) Contains(a netip.Addr) bool {
	for _, r := range p.Ranges {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// Allocatable reports whether a may be given to a Service: in the pool and not excluded by
// AvoidBuggyIPs.
func (p *Pool) Allocatable(a netip.Addr) bool {
	return p.Contains(a) && !(p.AvoidBuggyIPs && buggy(a))
}

// HasFamily reports whether the pool has addresses of the family.
func (p *Pool) HasFamily(f Family) bool {
	for _, r := range p.Ranges {
		if familyOf(r.First) == f {
			return true
		}
	}
	return false
}

func buggy(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

func (p *Pool) equal(o *Pool) bool {
	return p.Name == o.Name && slices.Equal(p.Ranges, o.Ranges) && slices.Equal(p.Interfaces, o.Interfaces) &&
		p.AutoAssign == o.AutoAssign && p.AvoidBuggyIPs == o.AvoidBuggyIPs && p.Protection.String() == o.Protection.String()
}

// Pools is a validated set of pools, immutable once made by Parse. The zero value has none.
type Pools struct {
	pools []Pool // sorted by name
	// index is every range with its pool, sorted by first address, for lookups.
	index []indexed
}

type indexed struct {
	Range
	pool int
}

// newPools indexes validated pools; ps must be sorted by name and not overlap.
func newPools(ps []Pool) Pools {
	out := Pools{pools: ps}
	for i, p := range ps {
		for _, r := range p.Ranges {
			out.index = append(out.index, indexed{r, i})
		}
	}
	slices.SortFunc(out.index, func(a, b indexed) int { return a.First.Compare(b.First) })
	return out
}

// List returns the pools sorted by name. The caller must not modify them.
func (ps Pools) List() []Pool { return ps.pools }

// Len is the number of pools.
func (ps Pools) Len() int { return len(ps.pools) }

// Get returns the pool of that name.
func (ps Pools) Get(name string) (*Pool, bool) {
	i, ok := slices.BinarySearchFunc(ps.pools, name, func(p Pool, n string) int { return strings.Compare(p.Name, n) })
	if !ok {
		return nil, false
	}
	return &ps.pools[i], true
}

// Lookup returns the pool that holds a.
func (ps Pools) Lookup(a netip.Addr) (*Pool, bool) {
	// The last range starting at or before a is the only one that can hold it: ranges do
	// not overlap.
	i, found := slices.BinarySearchFunc(ps.index, a, func(e indexed, a netip.Addr) int { return e.First.Compare(a) })
	if !found {
		i--
	}
	if i < 0 || !ps.index[i].Contains(a) {
		return nil, false
	}
	return &ps.pools[ps.index[i].pool], true
}

// Protects reports whether some pool has a protection.
func (ps Pools) Protects() bool {
	for _, p := range ps.pools {
		if p.Protection != nil {
			return true
		}
	}
	return false
}

// ProtectionOf returns the protection of a's pool: nil when no pool holds it or its pool
// has none.
func (ps Pools) ProtectionOf(a netip.Addr) *model.Protection {
	if p, ok := ps.Lookup(a); ok {
		return p.Protection
	}
	return nil
}

// Interfaces returns the interfaces a is announced on: its pool's, or nil when no pool holds
// it.
func (ps Pools) Interfaces(a netip.Addr) []string {
	if p, ok := ps.Lookup(a); ok {
		return p.Interfaces
	}
	return nil
}

// Equal reports whether two sets of pools are the same configuration.
func (ps Pools) Equal(o Pools) bool {
	return slices.EqualFunc(ps.pools, o.pools, func(a, b Pool) bool { return a.equal(&b) })
}

// String summarises the pools for logs: name, ranges and interfaces of each.
func (ps Pools) String() string {
	if len(ps.pools) == 0 {
		return "no pools"
	}
	var b strings.Builder
	for i, p := range ps.pools {
		if i > 0 {
			b.WriteString("; ")
		}
		rs := make([]string, len(p.Ranges))
		for j, r := range p.Ranges {
			rs[j] = r.String()
		}
		fmt.Fprintf(&b, "%s: %s on %s", p.Name, strings.Join(rs, ","), strings.Join(p.Interfaces, ","))
		if !p.AutoAssign {
			b.WriteString(" (requested only)")
		}
		if p.Protection != nil {
			b.WriteString(" protection " + p.Protection.String())
		}
	}
	return b.String()
}
