package pool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/edgegate/edgegate/daemon/model"
	"sigs.k8s.io/yaml"
)

// config is the document under ConfigMapKey.
type config struct {
	// A pointer, to tell a missing list from an empty one: no pools releases every address,
	// which must be written out ("pools: []"), never the result of an empty document.
	Pools *[]json.RawMessage `json:"pools"`
}

// poolConfig is one pool as written by the operator.
type poolConfig struct {
	Name       string   `json:"name"`
	Addresses  []string `json:"addresses"`
	Interfaces []string `json:"interfaces"`
	// AutoAssign defaults to true, as MetalLB's does.
	AutoAssign    *bool `json:"autoAssign,omitempty"`
	AvoidBuggyIPs bool  `json:"avoidBuggyIPs,omitempty"`
	// Protection is the edgegate.dev/protection of the pool's Services that have none.
	Protection json.RawMessage `json:"protection,omitempty"`
}

// reserved are ranges whose addresses can never be a LoadBalancer IP: a pool touching one is
// a typo or a misunderstanding, not a configuration.
var reserved = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\""},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("255.255.255.255/32"), "limited broadcast"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// Parse reads and validates the pools document (the ConfigMap's pools.yaml). Every error
// names the pool and the field. On error the caller keeps the pools it had.
//
// Addresses are CIDRs ("192.0.2.0/28", "2001:db8:1b::/120"), ranges
// ("198.51.100.10-198.51.100.20") or single addresses. As in MetalLB, every address of an
// IPv4 CIDR is allocatable, its network and broadcast addresses included: a LoadBalancer IP
// is announced on its own, not as a host of that subnet. avoidBuggyIPs leaves out the
// addresses ending in .0 and .255.
func Parse(data []byte) (Pools, error) {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return Pools{}, fmt.Errorf("%s: %w", ConfigMapKey, err)
	}
	var c config
	if err := decodeStrict(js, &c); err != nil {
		return Pools{}, fmt.Errorf("%s: %w", ConfigMapKey, err)
	}
	if c.Pools == nil {
		return Pools{}, fmt.Errorf("%s: pools: required (write \"pools: []\" for no pools)", ConfigMapKey)
	}
	var pools []Pool
	var errs []error
	byName := map[string]int{}
	for i, raw := range *c.Pools {
		p, err := parsePool(raw)
		where := fmt.Sprintf("pools[%d]", i)
		if p.Name != "" {
			where = fmt.Sprintf("pool %q", p.Name)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if j, dup := byName[p.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: name: also the name of pools[%d]", where, j))
			continue
		}
		byName[p.Name] = i
		pools = append(pools, p)
	}
	errs = append(errs, overlaps(pools)...)
	if len(errs) > 0 {
		return Pools{}, errors.Join(errs...)
	}
	slices.SortFunc(pools, func(a, b Pool) int { return strings.Compare(a.Name, b.Name) })
	return newPools(pools), nil
}

func decodeStrict(js []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("more than one document")
	}
	return nil
}

// parsePool validates one pool. It returns the name even on error, for the message.
func parsePool(raw json.RawMessage) (Pool, error) {
	var pc poolConfig
	if err := decodeStrict(raw, &pc); err != nil {
		// Name the pool if at least its name can be read.
		var named struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(raw, &named)
		return Pool{Name: named.Name}, err
	}
	p := Pool{Name: pc.Name, AutoAssign: pc.AutoAssign == nil || *pc.AutoAssign, AvoidBuggyIPs: pc.AvoidBuggyIPs}
	var errs []error
	if len(pc.Protection) > 0 {
		var err error
		if p.Protection, err = model.ParseProtection(pc.Protection); err != nil {
			errs = append(errs, fmt.Errorf("protection: %w", err))
		}
	}
	if pc.Name == "" {
		errs = append(errs, errors.New("name: required"))
	} else if msgs := validation.IsDNS1123Label(pc.Name); len(msgs) > 0 {
		// The name goes into the edgegate.dev/address-pool annotation and into logs.
		errs = append(errs, fmt.Errorf("name: %q is not a DNS label: %s", pc.Name, strings.Join(msgs, "; ")))
	}
	if len(pc.Addresses) == 0 {
		errs = append(errs, errors.New("addresses: at least one CIDR or range is required"))
	}
	for i, s := range pc.Addresses {
		r, err := ParseRange(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("addresses[%d]: %w", i, err))
			continue
		}
		p.Ranges = append(p.Ranges, r)
	}
	slices.SortFunc(p.Ranges, func(a, b Range) int { return a.First.Compare(b.First) })
	for i := 1; i < len(p.Ranges); i++ {
		if p.Ranges[i-1].overlaps(p.Ranges[i]) {
			errs = append(errs, fmt.Errorf("addresses: %s and %s overlap", p.Ranges[i-1], p.Ranges[i]))
		}
	}
	// Announcing on every interface is how MetalLB ends up answering ARP on the wrong NIC:
	// the operator says where each pool lives.
	if len(pc.Interfaces) == 0 {
		errs = append(errs, errors.New("interfaces: at least one interface to announce the addresses on is required"))
	}
	seen := map[string]bool{}
	for i, name := range pc.Interfaces {
		if err := validInterfaceName(name); err != nil {
			errs = append(errs, fmt.Errorf("interfaces[%d]: %w", i, err))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Errorf("interfaces[%d]: %q is listed twice", i, name))
			continue
		}
		seen[name] = true
		p.Interfaces = append(p.Interfaces, name)
	}
	return p, errors.Join(errs...)
}

// validInterfaceName applies the kernel's rules for a network device name (dev_valid_name).
func validInterfaceName(s string) error {
	switch {
	case s == "":
		return errors.New("empty interface name")
	case len(s) > 15:
		return fmt.Errorf("%q is longer than 15 bytes, the kernel's limit for an interface name", s)
	case s == "." || s == "..":
		return fmt.Errorf("%q is not an interface name", s)
	case strings.ContainsAny(s, "/: \t\n\v\f\r"):
		return fmt.Errorf("%q: an interface name has no '/', ':' or white space", s)
	}
	return nil
}

// ParseRange reads a CIDR, a "first-last" range or a single address.
func ParseRange(s string) (Range, error) {
	var r Range
	switch {
	case strings.Contains(s, "/"):
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return r, fmt.Errorf("%q is not a CIDR: %w", s, err)
		}
		if p.Masked() != p {
			return r, fmt.Errorf("%q has host bits set: the network is %s", s, p.Masked())
		}
		r = Range{p.Addr(), lastAddr(p)}
	case strings.Contains(s, "-"):
		first, last, _ := strings.Cut(s, "-")
		var err error
		if r.First, err = parseAddr(strings.TrimSpace(first)); err != nil {
			return r, fmt.Errorf("range %q: first address: %w", s, err)
		}
		if r.Last, err = parseAddr(strings.TrimSpace(last)); err != nil {
			return r, fmt.Errorf("range %q: last address: %w", s, err)
		}
		if r.First.Is4() != r.Last.Is4() {
			return r, fmt.Errorf("range %q mixes IPv4 and IPv6", s)
		}
		if r.First.Compare(r.Last) > 0 {
			return r, fmt.Errorf("range %q ends before it starts", s)
		}
	default:
		a, err := parseAddr(strings.TrimSpace(s))
		if errors.Is(err, errZone) {
			return r, err
		}
		if err != nil {
			return r, fmt.Errorf("%q is neither a CIDR, a range nor an address: %w", s, err)
		}
		r = Range{a, a}
	}
	if r.First.Is4In6() {
		return r, fmt.Errorf("%q is IPv4-mapped IPv6: write the IPv4 addresses", s)
	}
	for _, res := range reserved {
		if r.overlaps(Range{res.prefix.Addr(), lastAddr(res.prefix)}) {
			return r, fmt.Errorf("%q overlaps the %s range %s, which cannot hold LoadBalancer IPs", s, res.what, res.prefix)
		}
	}
	return r, nil
}

var errZone = errors.New("has a zone, which a LoadBalancer IP cannot have")

func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, err
	}
	if a.Zone() != "" {
		return a, fmt.Errorf("%q %w", s, errZone)
	}
	return a, nil
}

// overlaps finds addresses claimed by two pools: each address must have one pool, hence
// one set of interfaces.
func overlaps(pools []Pool) []error {
	var all []indexed
	for i, p := range pools {
		for _, r := range p.Ranges {
			all = append(all, indexed{r, i})
		}
	}
	slices.SortFunc(all, func(a, b indexed) int { return a.First.Compare(b.First) })
	var errs []error
	for i, a := range all {
		// Sorted by first address: only ranges starting before a ends can overlap it.
		for _, b := range all[i+1:] {
			if b.First.BitLen() != a.First.BitLen() || b.First.Compare(a.Last) > 0 {
				break
			}
			if a.pool != b.pool {
				pa, pb := pools[a.pool].Name, pools[b.pool].Name
				errs = append(errs, fmt.Errorf("pool %q: addresses: %s overlaps %s of pool %q", pb, b.Range, a.Range, pa))
			}
		}
	}
	return errs
}

// Marshal writes the pools as a document that Parse reads back as the same pools: what is in
// effect, for an operator to compare with what was written.
func (ps Pools) Marshal() []byte {
	c := struct {
		Pools []poolConfig `json:"pools"`
	}{Pools: []poolConfig{}}
	for _, p := range ps.pools {
		auto := p.AutoAssign
		pc := poolConfig{Name: p.Name, Interfaces: p.Interfaces, AutoAssign: &auto, AvoidBuggyIPs: p.AvoidBuggyIPs}
		if p.Protection != nil {
			// A struct of numbers and bools always marshals.
			pc.Protection, _ = json.Marshal(p.Protection)
		}
		for _, r := range p.Ranges {
			pc.Addresses = append(pc.Addresses, r.String())
		}
		c.Pools = append(c.Pools, pc)
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		// Strings, bools and slices of them always marshal.
		panic(fmt.Sprintf("marshal pools: %v", err))
	}
	return b
}
