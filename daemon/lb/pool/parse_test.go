package pool

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func rng(first, last string) Range {
	return Range{netip.MustParseAddr(first), netip.MustParseAddr(last)}
}

func mustParse(t testing.TB, doc string) Pools {
	t.Helper()
	ps, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, doc)
	}
	return ps
}

func TestParse(t *testing.T) {
	ps := mustParse(t, `
pools:
- name: site-a
  addresses: [192.0.2.0/28, "198.51.100.10-198.51.100.20", "2001:db8:1b::/120"]
  interfaces: [eth0]
- name: expensive
  addresses:
  - 203.0.113.7
  - " 203.0.113.64 - 203.0.113.65 "
  - 2001:db8:ff::1
  interfaces: [eth1, bond0.100]
  autoAssign: false
  avoidBuggyIPs: true
`)
	want := []Pool{
		{
			Name:       "expensive",
			Ranges:     []Range{rng("203.0.113.7", "203.0.113.7"), rng("203.0.113.64", "203.0.113.65"), rng("2001:db8:ff::1", "2001:db8:ff::1")},
			Interfaces: []string{"eth1", "bond0.100"}, AutoAssign: false, AvoidBuggyIPs: true,
		},
		{
			Name: "site-a",
			// Sorted by address, IPv4 first; every address of the /28 is in, .0 and .15
			// included (MetalLB's rule).
			Ranges:     []Range{rng("192.0.2.0", "192.0.2.15"), rng("198.51.100.10", "198.51.100.20"), rng("2001:db8:1b::", "2001:db8:1b::ff")},
			Interfaces: []string{"eth0"}, AutoAssign: true,
		},
	}
	if diff := cmp.Diff(want, ps.List(), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}

	for addr, pool := range map[string]string{
		"192.0.2.0": "site-a", "192.0.2.15": "site-a", "198.51.100.15": "site-a", "2001:db8:1b::80": "site-a",
		"203.0.113.7": "expensive", "203.0.113.65": "expensive", "2001:db8:ff::1": "expensive",
		"192.0.2.16": "", "198.51.100.9": "", "198.51.100.21": "", "203.0.113.8": "", "2001:db8:1b::100": "", "10.0.0.1": "",
		"::ffff:192.0.2.1": "",
	} {
		p, ok := ps.Lookup(netip.MustParseAddr(addr))
		switch {
		case pool == "" && ok:
			t.Errorf("Lookup(%s) = pool %q, want none", addr, p.Name)
		case pool != "" && (!ok || p.Name != pool):
			t.Errorf("Lookup(%s) = %v %v, want pool %q", addr, p, ok, pool)
		}
	}
	if got := ps.Interfaces(netip.MustParseAddr("2001:db8:ff::1")); !slices.Equal(got, []string{"eth1", "bond0.100"}) {
		t.Errorf("Interfaces(2001:db8:ff::1) = %v", got)
	}
	if got := ps.Interfaces(netip.MustParseAddr("10.0.0.1")); got != nil {
		t.Errorf("Interfaces of an address in no pool = %v, want nil", got)
	}
	if p, ok := ps.Get("site-a"); !ok || p.Name != "site-a" {
		t.Errorf("Get(site-a) = %v %v", p, ok)
	}
	if _, ok := ps.Get("nope"); ok {
		t.Error("Get(nope) found a pool")
	}
	if got, want := ps.String(), `expensive: 203.0.113.7/32,203.0.113.64/31,2001:db8:ff::1/128 on eth1,bond0.100 (requested only); site-a: 192.0.2.0/28,198.51.100.10-198.51.100.20,2001:db8:1b::/120 on eth0`; got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
	roundTrips(t, ps)
}

// roundTrips fails t unless ps parses back from its Marshal into an equal set.
func roundTrips(t *testing.T, ps Pools) {
	t.Helper()
	again, err := Parse(ps.Marshal())
	if err != nil {
		t.Fatalf("Parse(Marshal()): %v\n%s", err, ps.Marshal())
	}
	if !again.Equal(ps) {
		t.Fatalf("Marshal does not round-trip:\n%s", ps.Marshal())
	}
}

// No pools releases every address: only an explicit empty list says so.
func TestParseEmpty(t *testing.T) {
	if ps, err := Parse([]byte("pools: []")); err != nil || ps.Len() != 0 {
		t.Errorf("Parse(pools: []) = %v, %v; want no pools", ps, err)
	}
	for _, doc := range []string{"", "pools:", "# nothing yet\n", "{}"} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), `pools.yaml: pools: required (write "pools: []" for no pools)`) {
			t.Errorf("Parse(%q) = %v, want an error asking for the pools list", doc, err)
		}
	}
}

func TestAvoidBuggyIPs(t *testing.T) {
	ps := mustParse(t, `
pools:
- {name: a, addresses: [192.0.2.0/23, "2001:db8::/127"], interfaces: [eth0], avoidBuggyIPs: true}
- {name: b, addresses: [198.51.100.0/24], interfaces: [eth0]}`)
	a, _ := ps.Get("a")
	b, _ := ps.Get("b")
	for addr, want := range map[string]bool{
		"192.0.2.0": false, "192.0.2.1": true, "192.0.2.255": false, "192.0.3.0": false, "192.0.3.254": true,
		"2001:db8::": true, "2001:db8::1": true, "198.51.100.0": false,
	} {
		if got := a.Allocatable(netip.MustParseAddr(addr)); got != want {
			t.Errorf("pool a: Allocatable(%s) = %v, want %v", addr, got, want)
		}
	}
	for _, addr := range []string{"198.51.100.0", "198.51.100.255"} {
		if !b.Allocatable(netip.MustParseAddr(addr)) {
			t.Errorf("pool b (no avoidBuggyIPs): %s not allocatable", addr)
		}
	}
}

// Every error names the pool (or its index when it has no name) and the field.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"not yaml", "pools: [", "pools.yaml: "},
		{"duplicate key", "pools: []\npools: []", `pools.yaml: `},
		{"unknown top-level field", "pool: []", `unknown field "pool"`},
		{"unknown pool field", "pools:\n- {name: a, adresses: [192.0.2.0/28], interfaces: [eth0]}", `pool "a": json: unknown field "adresses"`},
		{"wrong type", "pools:\n- {name: a, addresses: 192.0.2.0/28, interfaces: [eth0]}", `pool "a": json: cannot unmarshal`},
		{"no name", "pools:\n- {addresses: [192.0.2.0/28], interfaces: [eth0]}", "pools[0]: name: required"},
		{"bad name", "pools:\n- {name: Site_A, addresses: [192.0.2.0/28], interfaces: [eth0]}", `pool "Site_A": name: "Site_A" is not a DNS label`},
		{"duplicate name", "pools:\n- {name: a, addresses: [192.0.2.0/28], interfaces: [eth0]}\n- {name: a, addresses: [192.0.2.16/28], interfaces: [eth0]}", `pool "a": name: also the name of pools[0]`},
		{"no addresses", "pools:\n- {name: a, interfaces: [eth0]}", `pool "a": addresses: at least one`},
		{"bad cidr", "pools:\n- {name: a, addresses: [192.0.2.0/33], interfaces: [eth0]}", `pool "a": addresses[0]: "192.0.2.0/33" is not a CIDR`},
		{"host bits", "pools:\n- {name: a, addresses: [192.0.2.5/28], interfaces: [eth0]}", `pool "a": addresses[0]: "192.0.2.5/28" has host bits set: the network is 192.0.2.0/28`},
		{"bad range start", "pools:\n- {name: a, addresses: [192.0.2.x-192.0.2.9], interfaces: [eth0]}", `pool "a": addresses[0]: range "192.0.2.x-192.0.2.9": first address`},
		{"bad range end", "pools:\n- {name: a, addresses: [192.0.2.1-], interfaces: [eth0]}", `pool "a": addresses[0]: range "192.0.2.1-": last address`},
		{"reversed range", "pools:\n- {name: a, addresses: [192.0.2.9-192.0.2.1], interfaces: [eth0]}", `pool "a": addresses[0]: range "192.0.2.9-192.0.2.1" ends before it starts`},
		{"mixed range", `pools: [{name: a, addresses: ["192.0.2.1-2001:db8::1"], interfaces: [eth0]}]`, `pool "a": addresses[0]: range "192.0.2.1-2001:db8::1" mixes IPv4 and IPv6`},
		{"not an address", "pools:\n- {name: a, addresses: [eth0], interfaces: [eth0]}", `pool "a": addresses[0]: "eth0" is neither a CIDR, a range nor an address`},
		{"invalid ipv6 (brief's example)", `pools: [{name: a, addresses: ["2001:db8:lb::/120"], interfaces: [eth0]}]`, `pool "a": addresses[0]: "2001:db8:lb::/120" is not a CIDR`},
		{"zone", `pools: [{name: a, addresses: ["fd00::1%eth0"], interfaces: [eth0]}]`, `pool "a": addresses[0]: "fd00::1%eth0" has a zone`},
		{"mapped", `pools: [{name: a, addresses: ["::ffff:192.0.2.0/124"], interfaces: [eth0]}]`, `pool "a": addresses[0]: "::ffff:192.0.2.0/124" is IPv4-mapped IPv6`},
		{"loopback", "pools:\n- {name: a, addresses: [127.0.0.0/30], interfaces: [eth0]}", `pool "a": addresses[0]: "127.0.0.0/30" overlaps the loopback range 127.0.0.0/8`},
		{"multicast", `pools: [{name: a, addresses: ["ff02::1"], interfaces: [eth0]}]`, `pool "a": addresses[0]: "ff02::1" overlaps the multicast range ff00::/8`},
		{"everything", `pools: [{name: a, addresses: ["::/0"], interfaces: [eth0]}]`, `overlaps the unspecified range ::/128`},
		{"link-local", "pools:\n- {name: a, addresses: [169.254.1.1], interfaces: [eth0]}", `link-local range 169.254.0.0/16`},
		{"broadcast", "pools:\n- {name: a, addresses: [255.255.255.0/24], interfaces: [eth0]}", `limited broadcast`},
		{"overlap within a pool", "pools:\n- {name: a, addresses: [192.0.2.0/28, 192.0.2.8-192.0.2.20], interfaces: [eth0]}", `pool "a": addresses: 192.0.2.0/28 and 192.0.2.8-192.0.2.20 overlap`},
		{"overlap between pools", "pools:\n- {name: a, addresses: [192.0.2.0/28], interfaces: [eth0]}\n- {name: b, addresses: [10.0.0.0/8, 192.0.2.15], interfaces: [eth1]}", `pool "b": addresses: 192.0.2.15/32 overlaps 192.0.2.0/28 of pool "a"`},
		{"overlap between pools, v6", "pools:\n- {name: a, addresses: [\"2001:db8::/64\"], interfaces: [eth0]}\n- {name: b, addresses: [\"2001:db8::ff-2001:db8:1::\"], interfaces: [eth1]}", `pool "b": addresses: 2001:db8::ff-2001:db8:1:: overlaps 2001:db8::/64 of pool "a"`},
		{"no interfaces", "pools:\n- {name: a, addresses: [192.0.2.0/28]}", `pool "a": interfaces: at least one interface`},
		{"long interface", "pools:\n- {name: a, addresses: [192.0.2.0/28], interfaces: [a-very-long-name0]}", `pool "a": interfaces[0]: "a-very-long-name0" is longer than 15 bytes`},
		{"interface with slash", "pools:\n- {name: a, addresses: [192.0.2.0/28], interfaces: [eth0, a/b]}", `pool "a": interfaces[1]: "a/b": an interface name has no`},
		{"empty interface", `pools: [{name: a, addresses: [192.0.2.0/28], interfaces: [""]}]`, `pool "a": interfaces[0]: empty interface name`},
		{"dot interface", `pools: [{name: a, addresses: [192.0.2.0/28], interfaces: [".."]}]`, `pool "a": interfaces[0]: ".." is not an interface name`},
		{"duplicate interface", "pools:\n- {name: a, addresses: [192.0.2.0/28], interfaces: [eth0, eth0]}", `pool "a": interfaces[1]: "eth0" is listed twice`},
		{"bad protection", "pools:\n- {name: a, addresses: [192.0.2.0/28], interfaces: [eth0], protection: {synProxy: true, synProxyWindowScale: 20}}",
			`pool "a": protection: synProxyWindowScale: 20 is above 14`},
		{"unknown protection field", "pools:\n- {name: a, addresses: [192.0.2.0/28], interfaces: [eth0], protection: {synFlood: true}}",
			`pool "a": protection: json: unknown field "synFlood"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse accepted it: %v", ps)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\ndoes not contain %q", err, tc.want)
			}
			if ps.Len() != 0 {
				t.Errorf("Parse returned pools with an error: %v", ps)
			}
		})
	}
}

// Overlaps are reported per pair, so an operator sees all of them at once.
func TestParseReportsEveryOverlap(t *testing.T) {
	_, err := Parse([]byte(`
pools:
- {name: a, addresses: [192.0.2.0/24], interfaces: [eth0]}
- {name: b, addresses: [192.0.2.10], interfaces: [eth0]}
- {name: c, addresses: [192.0.2.200-192.0.3.5], interfaces: [eth0]}
- {name: d, addresses: [192.0.3.0/30], interfaces: [eth0]}
`))
	if err == nil {
		t.Fatal("overlapping pools accepted")
	}
	for _, want := range []string{
		`pool "b": addresses: 192.0.2.10/32 overlaps 192.0.2.0/24 of pool "a"`,
		`pool "c": addresses: 192.0.2.200-192.0.3.5 overlaps 192.0.2.0/24 of pool "a"`,
		`pool "d": addresses: 192.0.3.0/30 overlaps 192.0.2.200-192.0.3.5 of pool "c"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\ndoes not contain %q", err, want)
		}
	}
	if n := strings.Count(err.Error(), "overlaps"); n != 3 {
		t.Errorf("%d overlaps reported, want 3:\n%v", n, err)
	}
}

func TestRangeString(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.0/24":              "192.0.2.0/24",
		"192.0.2.0-192.0.2.255":     "192.0.2.0/24",
		"192.0.2.1-192.0.2.255":     "192.0.2.1-192.0.2.255",
		"192.0.2.4":                 "192.0.2.4/32",
		"2001:db8::/64":             "2001:db8::/64",
		"2001:db8::-2001:db8::1":    "2001:db8::/127",
		"2001:db8::1-2001:db8::2":   "2001:db8::1-2001:db8::2",
		"1.0.0.0-126.255.255.255":   "1.0.0.0-126.255.255.255",
		"128.0.0.0-169.253.255.255": "128.0.0.0-169.253.255.255",
	} {
		r, err := ParseRange(in)
		if err != nil {
			t.Errorf("ParseRange(%q): %v", in, err)
			continue
		}
		if got := r.String(); got != want {
			t.Errorf("ParseRange(%q).String() = %q, want %q", in, got, want)
		}
	}
}

// deploy/lb-pools.yaml is the ConfigMap this package reads, and its pools are valid.
func TestDeployExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "lb-pools.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm v1.ConfigMap
	if err := yaml.UnmarshalStrict(b, &cm); err != nil {
		t.Fatalf("deploy/lb-pools.yaml: %v", err)
	}
	if cm.Kind != "ConfigMap" || cm.Name != ConfigMapName || cm.Namespace != ConfigMapNamespace {
		t.Errorf("deploy/lb-pools.yaml is %s %s/%s, want ConfigMap %s/%s", cm.Kind, cm.Namespace, cm.Name, ConfigMapNamespace, ConfigMapName)
	}
	ps, err := Parse([]byte(cm.Data[ConfigMapKey]))
	if err != nil {
		t.Fatalf("deploy/lb-pools.yaml: %v", err)
	}
	if ps.Len() == 0 {
		t.Errorf("deploy/lb-pools.yaml has no pools under %s", ConfigMapKey)
	}
	t.Logf("deploy/lb-pools.yaml: %s", ps)
}

// A pool's protection is read, looked up by address, summarised and written back.
func TestPoolProtection(t *testing.T) {
	ps := mustParse(t, `
pools:
- name: public
  addresses: [203.0.113.0/29]
  interfaces: [eth1]
  protection:
    synProxy: true
    maxConnsPerSource: 256
- name: inside
  addresses: [192.0.2.0/28]
  interfaces: [eth0]
`)
	if p := ps.ProtectionOf(netip.MustParseAddr("203.0.113.3")); p.String() != "{synProxy: true, maxConnsPerSource: 256}" {
		t.Errorf("public's protection: %v", p)
	}
	if p := ps.ProtectionOf(netip.MustParseAddr("192.0.2.3")); p != nil {
		t.Errorf("inside's protection: %v", p)
	}
	if p := ps.ProtectionOf(netip.MustParseAddr("198.51.100.1")); p != nil {
		t.Errorf("no pool's protection: %v", p)
	}
	if s := ps.String(); !strings.Contains(s, "public: 203.0.113.0/29 on eth1 protection {synProxy: true, maxConnsPerSource: 256}") {
		t.Errorf("summary %q", s)
	}
	roundTrips(t, ps)
}
