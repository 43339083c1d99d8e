package route

import (
	"cmp"
	"net/netip"
)

// Route is a route edgegate owns: Dst via the gateway Via, on whatever link reaches Via.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// Compare orders routes IPv4 first, then by destination, prefix length and gateway.
func Compare(a, b Route) int {
	return cmp.Or(cmp.Compare(a.Dst.Addr().BitLen(), b.Dst.Addr().BitLen()), a.Dst.Addr().Compare(b.Dst.Addr()),
		cmp.Compare(a.Dst.Bits(), b.Dst.Bits()), a.Via.Compare(b.Via))
}

// Table is the set of routes edgegate owns in one routing table. Implementations touch no
// route they did not make.
type Table interface {
	// Apply makes edgegate's routes exactly routes: adds, replaces, removes. It applies
	// what it can and returns every failure.
	Apply(routes []Route) error
	// List returns edgegate's routes, sorted by Compare.
	List() ([]Route, error)
}
