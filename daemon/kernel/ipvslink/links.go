package ipvslink

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Links is what IPVS mode needs of the kernel's interfaces: the dummy interface the VIPs
// are local through, and the node's own addresses (for node ports); Netlink and FakeLinks
// implement it. A VIP is made local by a local route through the dummy interface
// (`ip route show table local dev edgegate-ipvs0`), which is what an address on it would
// add, without the cost of the address (kube-proxy binds them as addresses to kube-ipvs0).
type Links interface {
	// EnsureDummy creates the dummy interface if it does not exist and sets it up. An
	// interface of that name that is not a dummy is an error, never reused.
	EnsureDummy(name string) error
	// DeleteLink removes an interface; one that does not exist is no error.
	DeleteLink(name string) error
	// Addrs lists the VIPs local through an interface, without link-local ones (the
	// kernel's own on an IPv6 interface); nil when the interface does not exist.
	Addrs(name string) ([]netip.Addr, error)
	// AddAddr makes a VIP local through the interface (a /32 or /128 local route).
	AddAddr(name string, a netip.Addr) error
	// DelAddr makes a VIP no longer local; one that is not is no error.
	DelAddr(name string, a netip.Addr) error
	// NodeAddrs lists the addresses of every interface except the named one, sorted.
	NodeAddrs(exclude string) ([]netip.Addr, error)
}

// FakeLinks is an in-memory Links for tests, with a deterministic dump.
type FakeLinks struct {
	mu    sync.Mutex
	links map[string]*fakeLink
	// Calls lists the changes made ("AddAddr edgegate-ipvs0 10.96.0.10").
	Calls []string
}

type fakeLink struct {
	kind  string
	addrs []netip.Addr
}

var _ Links = (*FakeLinks)(nil)

// NewFakeLinks returns FakeLinks with one ordinary interface, eth0, holding addrs.
func NewFakeLinks(addrs ...string) *FakeLinks {
	f := &FakeLinks{links: map[string]*fakeLink{"eth0": {kind: "device"}}}
	for _, a := range addrs {
		f.links["eth0"].addrs = append(f.links["eth0"].addrs, netip.MustParseAddr(a))
	}
	return f
}

// AddLink adds an interface of some kind, as another program would.
func (f *FakeLinks) AddLink(name, kind string, addrs ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[name] = &fakeLink{kind: kind, addrs: addrs}
}

// EnsureDummy implements Links.
func (f *FakeLinks) EnsureDummy(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[name]; ok {
		if l.kind != "dummy" {
			return fmt.Errorf("interface %s exists and is a %s, not a dummy", name, l.kind)
		}
		return nil
	}
	f.Calls = append(f.Calls, "EnsureDummy "+name)
	f.links[name] = &fakeLink{kind: "dummy"}
	return nil
}

// DeleteLink implements Links.
func (f *FakeLinks) DeleteLink(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.links[name]; ok {
		f.Calls = append(f.Calls, "DeleteLink "+name)
		delete(f.links, name)
	}
	return nil
}

// Addrs implements Links.
func (f *FakeLinks) Addrs(name string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[name]; ok {
		return slices.Clone(l.addrs), nil
	}
	return nil, nil
}

// AddAddr implements Links.
func (f *FakeLinks) AddAddr(name string, a netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.links[name]
	if !ok {
		return fmt.Errorf("add address %s to %s: no such interface", a, name)
	}
	if slices.Contains(l.addrs, a) {
		return fmt.Errorf("add address %s to %s: file exists", a, name)
	}
	f.Calls = append(f.Calls, "AddAddr "+name+" "+a.String())
	l.addrs = append(l.addrs, a)
	slices.SortFunc(l.addrs, netip.Addr.Compare)
	return nil
}

// DelAddr implements Links.
func (f *FakeLinks) DelAddr(name string, a netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.links[name]; ok && slices.Contains(l.addrs, a) {
		f.Calls = append(f.Calls, "DelAddr "+name+" "+a.String())
		l.addrs = slices.DeleteFunc(l.addrs, func(x netip.Addr) bool { return x == a })
	}
	return nil
}

// NodeAddrs implements Links.
func (f *FakeLinks) NodeAddrs(exclude string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []netip.Addr
	for name, l := range f.links {
		if name != exclude {
			out = append(out, l.addrs...)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// Dump lists the interfaces with their kind and addresses, sorted.
func (f *FakeLinks) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	names := make([]string, 0, len(f.links))
	for n := range f.links {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		l := f.links[n]
		fmt.Fprintf(&b, "%s (%s)", n, l.kind)
		for _, a := range l.addrs {
			fmt.Fprintf(&b, " %s", a)
		}
		b.WriteString("\n")
	}
	return b.String()
}
