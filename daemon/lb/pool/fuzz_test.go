package pool

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// FuzzParse feeds arbitrary documents to the pools parser: it never panics, and what it
// accepts is valid (sorted, no address in two ranges, every range found by Lookup) and
// survives Marshal and Parse unchanged.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		testPools,
		`pools: [{name: a, addresses: ["192.0.2.0/28", "198.51.100.10-198.51.100.20", "2001:db8:1b::/120"], interfaces: [eth0]}]`,
		`pools: [{name: a, addresses: [10.0.0.0/8], interfaces: [eth0, eth1], autoAssign: false, avoidBuggyIPs: true}]`,
		"pools:\n- name: a\n  addresses: [\"::/1\"]\n  interfaces: [x]\n",
		`pools: [{name: a, addresses: [192.0.2.0/28], interfaces: [eth0]}, {name: b, addresses: [192.0.2.15], interfaces: [eth0]}]`,
		`pools: [{name: a, addresses: ["255.255.255.254-255.255.255.254", "1.0.0.0-1.0.0.0"], interfaces: [eth0]}]`,
		"pools: [", "{}", "pools: null", `pools: [{}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		ps, err := Parse(doc)
		if err != nil {
			if ps.Len() != 0 {
				t.Fatalf("pools returned with error %v", err)
			}
			return
		}
		var prev string
		for i, p := range ps.List() {
			if i > 0 && p.Name <= prev {
				t.Fatalf("pools not sorted by name: %q after %q", p.Name, prev)
			}
			prev = p.Name
			if len(p.Ranges) == 0 || len(p.Interfaces) == 0 {
				t.Fatalf("pool %q accepted without ranges or interfaces", p.Name)
			}
			for _, r := range p.Ranges {
				if !r.First.IsValid() || r.First.Is4() != r.Last.Is4() || r.First.Compare(r.Last) > 0 {
					t.Fatalf("pool %q: bad range %v", p.Name, r)
				}
				for _, a := range []netip.Addr{r.First, r.Last} {
					if got, ok := ps.Lookup(a); !ok || got.Name != p.Name {
						t.Fatalf("Lookup(%s) = %v, %v; want pool %q", a, got, ok, p.Name)
					}
				}
			}
		}
		roundTrips(t, ps)
	})
}

// FuzzAllocate runs the allocator on random Services (from the fuzzer's seed) and checks
// its rules and its independence of input order, as TestAllocateProperties does.
func FuzzAllocate(f *testing.F) {
	f.Add(uint64(1), uint8(8), false)
	f.Add(uint64(42), uint8(30), true)
	pools := mustParse(f, testPools)
	f.Fuzz(func(t *testing.T, seed uint64, n uint8, defaultClass bool) {
		r := rand.New(rand.NewPCG(seed, 2))
		svcs := randomServices(r, int(n%40))
		opts := Options{DefaultClass: defaultClass}
		as := Allocate(pools, svcs, opts)
		checkInvariants(t, pools, opts, svcs, as)
		r.Shuffle(len(svcs), func(i, j int) { svcs[i], svcs[j] = svcs[j], svcs[i] })
		if got := dump(Allocate(pools, svcs, opts)); got != dump(as) {
			t.Fatalf("order changed the result:\n%s\nvs\n%s", dump(as), got)
		}
	})
}
