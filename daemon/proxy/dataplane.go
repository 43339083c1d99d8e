package proxy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/ipt"
	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/daemon/kernel/kernelview"
	"github.com/edgegate/edgegate/daemon/kernel/nft"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	iptplan "github.com/edgegate/edgegate/daemon/plan/ipt"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
	"github.com/edgegate/edgegate/daemon/view"
)

// Dataplane is one proxy mode: it plans a Snapshot for every family and programs the
// result in one transaction.
type Dataplane interface {
	// Mode is the proxy mode.
	Mode() plan.Mode
	// Program makes the kernel match the snapshot; full rewrites everything the mode owns.
	Program(snap *model.Snapshot, full bool) (Result, error)
	// Cleanup removes everything the mode ever programmed.
	Cleanup() error
}

// Result describes one Program call.
type Result struct {
	Full bool
	// Written counts chains written; Elements, map or set elements (or rules) changed;
	// Deleted, objects removed.
	Written, Elements, Deleted int
	// Conflicts lists frontends that two services claim.
	Conflicts []string
	// Problems lists input the plan ignored (an invalid scheduler annotation).
	Problems []string
	// Layout says, in nftables mode, over how many tables each family's Service dispatch
	// is split ("IPv4: 16 tables"); empty while no family's is.
	Layout string
	// Kernel is the part of the sync the kernel took: the transaction's commit (nftables,
	// iptables), the IPVS and address calls and their auxiliary batch (ipvs).
	Kernel time.Duration
}

// Draining is implemented by a dataplane that has work left even when nothing changed:
// IPVS real servers at weight 0 wait for their connections to end, and only a Program
// call removes them.
type Draining interface {
	Pending() bool
}

// Viewer is implemented by a dataplane that shows its operator what it programmed: the
// rules as the kernel holds them (read back, so hand edits and other programs' tables
// show) and the traffic of each service. Each kernel dataplane reads its own mode's state.
type Viewer interface {
	// OperatorViews returns the mode's views; nil when it has none.
	OperatorViews() view.Source
}

// Options configure the dataplanes NewDataplanes makes.
type Options struct {
	Families []model.Family
	Config   plan.Config
	// IPVSScheduler is ipvs mode's default scheduler (--ipvs-scheduler).
	IPVSScheduler string
	// NFTEndpointsPerTable is nftables mode's nftplan.Shards.PerTable
	// (--nftables-endpoints-per-table).
	NFTEndpointsPerTable int
}

// NewDataplanes returns the kernel dataplane of mode and those of every other mode, whose
// leftovers a start in mode removes (two modes must never translate the same traffic).
func NewDataplanes(mode plan.Mode, o Options) (Dataplane, []Dataplane, error) {
	all := []Dataplane{
		&NFTables{Rules: nft.New(), Families: o.Families, Config: o.Config, PerTable: o.NFTEndpointsPerTable,
			Views: kernelview.NewNFTView(o.Families)},
		&IPTables{Rules: ipt.New(), Families: o.Families, Config: o.Config, Views: kernelview.NewIPTView()},
		&IPVS{Backend: ipvs.NewApplier(), Families: o.Families,
			Config: ipvsplan.Config{Config: o.Config, Scheduler: o.IPVSScheduler}, Views: kernelview.NewIPVSView()},
	}
	var chosen Dataplane
	var others []Dataplane
	for _, d := range all {
		if d.Mode() == mode {
			chosen = d
		} else {
			others = append(others, d)
		}
	}
	if chosen == nil {
		return nil, nil, fmt.Errorf("proxy mode %q: no such mode", mode)
	}
	return chosen, others, nil
}

// NFTables is the nftables mode.
type NFTables struct {
	Rules    nft.Ruleset
	Families []model.Family
	Config   plan.Config
	// PerTable is how many endpoint rules a table holds before a family's dispatch is
	// split over more tables (nftplan.Shards); 0 never splits.
	PerTable int
	// Views reads the ruleset and the rule counters back from the kernel.
	Views view.Source

	// planners re-plan only the service ports that changed, and shards split their
	// tables, by family.
	planners map[model.Family]*nftplan.Planner
	shards   map[model.Family]*nftplan.Shards
}

var (
	_ Dataplane = (*NFTables)(nil)
	_ Viewer    = (*NFTables)(nil)
)

// OperatorViews implements Viewer.
func (d *NFTables) OperatorViews() view.Source { return d.Views }

// Mode implements Dataplane.
func (*NFTables) Mode() plan.Mode { return plan.ModeNFTables }

// Program implements Dataplane.
func (d *NFTables) Program(snap *model.Snapshot, full bool) (Result, error) {
	tables := make([]*nftplan.Table, 0, len(d.Families))
	var conflicts []string
	if d.planners == nil {
		d.planners, d.shards = map[model.Family]*nftplan.Planner{}, map[model.Family]*nftplan.Shards{}
	}
	for _, f := range d.Families {
		p := d.planners[f]
		if p == nil {
			p = nftplan.New(f)
			d.planners[f] = p
			d.shards[f] = &nftplan.Shards{PerTable: d.PerTable}
		}
		t := p.Plan(snap, d.Config)
		conflicts = append(conflicts, t.Conflicts...)
		tables = append(tables, d.shards[f].Split(t)...)
	}
	var layout []string
	for _, f := range d.Families {
		if n := d.shards[f].Tables(); n > 1 {
			layout = append(layout, fmt.Sprintf("%s: %d tables", f, n))
		}
	}
	st, err := d.Rules.Apply(tables, full)
	return Result{Full: st.Full, Written: st.Chains, Elements: st.Elements, Deleted: st.Deleted, Conflicts: conflicts,
		Layout: strings.Join(layout, ", "), Kernel: st.Kernel}, err
}

// Cleanup implements Dataplane.
func (d *NFTables) Cleanup() error { return d.Rules.Cleanup() }

// IPTables is the iptables mode: kube-proxy's chain layout in the shared nat and filter
// tables, written in iptables-nft's encoding.
type IPTables struct {
	Rules    ipt.Ruleset
	Families []model.Family
	Config   plan.Config
	// Views reads the iptables tables back from the kernel.
	Views view.Source

	// planners re-plan only the service ports that changed, by family.
	planners map[model.Family]*iptplan.Planner
}

var (
	_ Dataplane = (*IPTables)(nil)
	_ Viewer    = (*IPTables)(nil)
)

// OperatorViews implements Viewer.
func (d *IPTables) OperatorViews() view.Source { return d.Views }

// Mode implements Dataplane.
func (*IPTables) Mode() plan.Mode { return plan.ModeIPTables }

// Program implements Dataplane.
func (d *IPTables) Program(snap *model.Snapshot, full bool) (Result, error) {
	plans := make([]*iptplan.Tables, 0, len(d.Families))
	if d.planners == nil {
		d.planners = map[model.Family]*iptplan.Planner{}
	}
	for _, f := range d.Families {
		p := d.planners[f]
		if p == nil {
			p = iptplan.New(f)
			d.planners[f] = p
		}
		plans = append(plans, p.Plan(snap, d.Config))
	}
	st, err := d.Rules.Apply(plans, full)
	return Result{Full: st.Full, Written: st.Chains, Elements: st.Rules, Deleted: st.Deleted, Kernel: st.Kernel,
		Problems: unprotected(snap, plan.ModeIPTables)}, err
}

// unprotected names the Services that ask for protection (edgegate.dev/protection), which
// only nftables mode enforces: in another mode their addresses are not protected, and the
// log must say so rather than the gateway pretending.
func unprotected(snap *model.Snapshot, mode plan.Mode) []string {
	// Every sync of these modes runs this: the ports are walked unsorted, and only the
	// (few) protected ones are formatted and sorted.
	var out []string
	for _, sp := range snap.Ports.All() {
		if sp.Protection.Any() {
			out = append(out, fmt.Sprintf("service %s: annotation %s: not enforced in %s mode (only nftables mode protects addresses)",
				sp.Name.ServiceName, model.ProtectionAnnotation, mode))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Cleanup implements Dataplane.
func (d *IPTables) Cleanup() error { return d.Rules.Cleanup() }

// IPVSBackend is what ipvs mode needs of the kernel; *ipvs.Applier implements it.
type IPVSBackend interface {
	// NodeAddrs lists the node's addresses outside the dummy interface (node ports).
	NodeAddrs() ([]netip.Addr, error)
	Apply(plans []*ipvsplan.Plan, full bool) (ipvs.Stats, error)
	Pending() bool
	Cleanup() error
}

// IPVS is the ipvs mode: IPVS virtual servers on a dummy interface's VIPs, with the
// auxiliary rules in nftables.
type IPVS struct {
	Backend  IPVSBackend
	Families []model.Family
	// Config's NodeAddrs is filled from the kernel at every Program.
	Config ipvsplan.Config
	// Views reads the IPVS table, its stats and the auxiliary nftables tables back.
	Views view.Source

	// planned are the node addresses the last Program planned node ports on.
	planned []netip.Addr
}

var (
	_ Dataplane   = (*IPVS)(nil)
	_ Draining    = (*IPVS)(nil)
	_ Viewer      = (*IPVS)(nil)
	_ IPVSBackend = (*ipvs.Applier)(nil)
)

// Mode implements Dataplane.
func (*IPVS) Mode() plan.Mode { return plan.ModeIPVS }

// OperatorViews implements Viewer.
func (d *IPVS) OperatorViews() view.Source { return d.Views }

// Program implements Dataplane. The node's addresses are read each time: node ports get a
// virtual server per address, and addresses come and go (DHCP).
func (d *IPVS) Program(snap *model.Snapshot, full bool) (Result, error) {
	addrs, err := d.Backend.NodeAddrs()
	if err != nil {
		return Result{Full: full}, fmt.Errorf("node addresses: %w", err)
	}
	cfg := d.Config
	cfg.NodeAddrs = addrs
	d.planned = addrs
	plans := make([]*ipvsplan.Plan, 0, len(d.Families))
	var res Result
	for _, f := range d.Families {
		p := ipvsplan.New(f).Plan(snap, cfg)
		res.Conflicts = append(res.Conflicts, p.Conflicts...)
		res.Problems = append(res.Problems, p.Problems...)
		plans = append(plans, p)
	}
	res.Problems = append(res.Problems, unprotected(snap, plan.ModeIPVS)...)
	// A problem with a service (its annotation) or a clash over a node port shows in the
	// plan of each family: report it once.
	slices.Sort(res.Problems)
	res.Problems = slices.Compact(res.Problems)
	slices.Sort(res.Conflicts)
	res.Conflicts = slices.Compact(res.Conflicts)
	st, err := d.Backend.Apply(plans, full)
	res.Full, res.Written, res.Elements, res.Deleted = st.Full, st.Services, st.Destinations+st.Addresses, st.Deleted
	res.Kernel = st.Kernel
	return res, err
}

// Pending implements Draining: real servers are draining, or the node's addresses changed
// since the last Program (a DHCP lease, an address added by hand), so node ports need
// virtual servers on other addresses. Without this a node port would reach a new address
// only at the next full sync, minutes later. An error reading the addresses is left to
// Program, which reports it.
func (d *IPVS) Pending() bool {
	if d.Backend.Pending() {
		return true
	}
	addrs, err := d.Backend.NodeAddrs()
	return err != nil || !slices.Equal(addrs, d.planned)
}

// Cleanup implements Dataplane.
func (d *IPVS) Cleanup() error { return d.Backend.Cleanup() }
