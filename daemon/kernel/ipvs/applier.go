package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/ipvslink"
	"github.com/edgegate/edgegate/daemon/kernel/nft"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// Applier programs IPVS mode's plans: the auxiliary nftables tables, the dummy interface
// and the local routes of the VIPs through it, and the virtual and real servers.
//
// It owns only what is recognisably its own: virtual servers on a VIP local through its
// dummy interface, virtual servers on one of the node's other addresses whose port is in the
// node-port range, and those it programmed itself. Every other virtual server is left
// alone. A full apply reads the kernel and repairs any difference; an incremental one
// diffs against what the last apply left and reads only the virtual servers whose real
// servers change or drain. Whatever it changes it reads back.
type Applier struct {
	// Open returns the IPVS table. It must fail with ErrNotAvailable, touching nothing,
	// when the kernel has no IPVS (as Open in this package does).
	Open func() (IPVS, error)
	// Modules, if set, makes kernel modules available (ip_vs and the ip_vs_<scheduler>
	// modules the plans use); nil where PID 1 has loaded them.
	Modules func(names ...string) error
	// Sysctls, if set, are made right before the first apply and on every full one.
	Sysctls ipvslink.Sysctls
	// Release is the kernel release the sysctl choices depend on.
	Release string
	Links   ipvslink.Links
	Aux     AuxRules
	// Interface is the dummy interface; empty means ipvsplan.Interface.
	Interface string
	// NodePorts is the node-port range; zero means DefaultNodePorts.
	NodePorts PortRange

	mu         sync.Mutex
	table      IPVS
	modules    map[string]bool
	sysctlsSet bool
	synced     bool // applied, vips and pending describe the kernel
	applied    map[ipvsplan.VSKey]ipvsplan.VirtualServer
	vips       map[netip.Addr]bool
	pending    map[ipvsplan.VSKey]bool
}

// Stats describes one apply.
type Stats struct {
	Full bool
	// Services counts virtual servers created or changed, Deleted those removed.
	Services, Deleted int
	// Destinations counts real servers added, changed or removed.
	Destinations int
	// Addresses counts VIPs made local (or no longer) through the dummy interface.
	Addresses int
	// Draining counts real servers at weight 0 that still have connections.
	Draining int
	// Sysctls lists the sysctls this apply changed ("net/ipv4/vs/conntrack=1").
	Sysctls []string
	Aux     nft.Stats
	// Kernel is the time spent changing the kernel: the auxiliary nftables batch, then
	// the IPVS and address calls, one round trip each (with the comparisons between
	// them, which are small beside a round trip).
	Kernel time.Duration
}

func (a *Applier) iface() string {
	if a.Interface == "" {
		return ipvsplan.Interface
	}
	return a.Interface
}

func (a *Applier) nodePorts() PortRange {
	if a.NodePorts == (PortRange{}) {
		return DefaultNodePorts
	}
	return a.NodePorts
}

// NodeAddrs lists the node's addresses outside the dummy interface: ipvsplan.Config's
// NodeAddrs.
func (a *Applier) NodeAddrs() ([]netip.Addr, error) { return a.Links.NodeAddrs(a.iface()) }

// Pending reports whether real servers are draining at weight 0: an apply, even of an
// unchanged plan, removes those whose connections have ended.
func (a *Applier) Pending() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending) > 0
}

// Apply makes the kernel hold the plans (one per family). On error the next apply is
// full; what could be applied stays applied (IPVS has no transactions).
func (a *Applier) Apply(plans []*ipvsplan.Plan, full bool) (Stats, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	full = full || !a.synced
	st := Stats{Full: full}
	a.synced = false
	hint, err := a.prepare(plans, full, &st)
	if err != nil {
		return st, err
	}
	tables := make([]*nftplan.Table, 0, len(plans))
	for _, p := range plans {
		tables = append(tables, p.Aux)
	}
	st.Aux, err = a.Aux.Apply(tables, full)
	st.Kernel = st.Aux.Kernel
	if err != nil {
		return st, fmt.Errorf("auxiliary nftables rules: %w", err)
	}
	s := &applyPass{a: a, st: &st, want: map[ipvsplan.VSKey]ipvsplan.VirtualServer{}, wantVIPs: map[netip.Addr]bool{},
		pending: map[ipvsplan.VSKey]bool{}}
	for _, p := range plans {
		for _, vs := range p.Servers {
			s.want[vs.VSKey] = vs
			s.order = append(s.order, vs.VSKey)
		}
		for _, v := range p.VIPs {
			s.wantVIPs[v] = true
		}
	}
	calls := time.Now()
	err = s.run(full)
	st.Kernel += time.Since(calls)
	if err != nil {
		return st, errors.Join(err, hint)
	}
	a.applied, a.vips, a.pending, a.synced = s.want, s.wantVIPs, s.pending, true
	return st, nil
}

// prepare loads modules, opens the table and sets the sysctls, in that order (the
// net/ipv4/vs sysctls exist only once ip_vs is loaded). A scheduler module that cannot be
// loaded fails only the virtual servers that use it: it comes back as hint, for the
// apply's error to explain.
func (a *Applier) prepare(plans []*ipvsplan.Plan, full bool, st *Stats) (hint error, err error) {
	if a.modules == nil {
		a.modules = map[string]bool{}
	}
	if a.Modules != nil && !a.modules["ip_vs"] {
		if err := a.Modules("ip_vs"); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNotAvailable, err)
		}
		a.modules["ip_vs"] = true
	}
	if a.table == nil {
		t, err := a.Open()
		if err != nil {
			return nil, err
		}
		a.table = t
	}
	if a.Sysctls != nil && (full || !a.sysctlsSet) {
		changed, err := ipvslink.EnsureSysctls(a.Sysctls, a.Release)
		st.Sysctls = changed
		if err != nil {
			return nil, err
		}
		a.sysctlsSet = true
	}
	if a.Modules == nil {
		return nil, nil
	}
	var hints []error
	for _, p := range plans {
		for _, s := range p.Schedulers() {
			if m := "ip_vs_" + s; !a.modules[m] {
				if err := a.Modules(m); err != nil {
					hints = append(hints, fmt.Errorf("IPVS scheduler %s: %w", s, err))
					continue
				}
				a.modules[m] = true
			}
		}
	}
	return errors.Join(hints...), nil
}

// Cleanup removes everything IPVS mode made: its virtual servers, the dummy interface and
// the auxiliary tables. Without IPVS in the kernel there are no virtual servers to remove,
// and nothing is loaded to find out.
func (a *Applier) Cleanup() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	t := a.table
	if t == nil {
		var err error
		switch t, err = a.Open(); {
		case errors.Is(err, ErrNotAvailable):
			t = nil
		case err != nil:
			errs = append(errs, err)
		default:
			a.table = t
		}
	}
	if t != nil {
		errs = append(errs, a.deleteOwned(t))
	}
	errs = append(errs, a.Links.DeleteLink(a.iface()), a.Aux.DeleteTables())
	a.applied, a.vips, a.pending, a.synced = nil, nil, nil, false
	return errors.Join(errs...)
}

func (a *Applier) deleteOwned(t IPVS) error {
	dummyAddrs, err := a.Links.Addrs(a.iface())
	if err != nil {
		return err
	}
	nodeAddrs, err := a.Links.NodeAddrs(a.iface())
	if err != nil {
		return err
	}
	dummy, node := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	for _, d := range dummyAddrs {
		dummy[d] = true
	}
	for _, n := range nodeAddrs {
		node[n] = true
	}
	svcs, err := t.GetServices()
	if err != nil {
		return err
	}
	var errs []error
	deleted := 0
	for _, s := range svcs {
		if a.owned(s.VSKey, dummy, node) {
			if err := t.DelService(s); err != nil && !notFound(err) {
				errs = append(errs, err)
			}
			deleted++
		}
	}
	if deleted == 0 || len(errs) > 0 {
		return errors.Join(errs...)
	}
	left, err := t.GetServices()
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	for _, s := range left {
		if a.owned(s.VSKey, dummy, node) {
			errs = append(errs, fmt.Errorf("virtual server %s: still in the kernel after it was deleted", s.VSKey))
		}
	}
	return errors.Join(errs...)
}

// NewApplier returns the Applier of the running kernel, in the network namespace of the
// thread that first uses it: moby/ipvs, rtnetlink, the nftables backend, /proc/sys, and
// kernel modules from /lib/modules/$(uname -r) loaded when missing.
func NewApplier() *Applier {
	mods := &ipvslink.Modules{}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		mods.Release = unix.ByteSliceToString(u.Release[:])
	}
	return &Applier{
		Open: func() (IPVS, error) {
			k, err := Open()
			if err != nil {
				return nil, err
			}
			return k, nil
		},
		Modules: mods.Ensure,
		Sysctls: ipvslink.ProcSys{Root: "/proc/sys"},
		Release: mods.Release,
		Links:   &ipvslink.Netlink{},
		Aux:     NewKernelAux(),
	}
}
