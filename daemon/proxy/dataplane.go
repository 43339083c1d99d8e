package proxy

import (
	"github.com/edgegate/edgegate/daemon/kernel/ipt"
	"github.com/edgegate/edgegate/daemon/kernel/nft"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Dataplane is one proxy mode: it plans a Snapshot for every family and programs the
// result in one transaction.
type Dataplane interface {
	// Mode is the --proxy-mode name.
	Mode() string
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
}

// NFTables is the nftables mode.
type NFTables struct {
	Rules    nft.Ruleset
	Families []model.Family
	Config   plan.Config
}

var _ Dataplane = (*NFTables)(nil)

// Mode implements Dataplane.
func (*NFTables) Mode() string { return ModeNFTables }

// Program implements Dataplane.
func (d *NFTables) Program(snap *model.Snapshot, full bool) (Result, error) {
	tables := make([]*plan.Table, 0, len(d.Families))
	var conflicts []string
	for _, f := range d.Families {
		t := plan.NFT(snap, f, d.Config)
		conflicts = append(conflicts, t.Conflicts...)
		tables = append(tables, t)
	}
	st, err := d.Rules.Apply(tables, full)
	return Result{Full: st.Full, Written: st.Chains, Elements: st.Elements, Deleted: st.Deleted, Conflicts: conflicts}, err
}

// Cleanup implements Dataplane.
func (d *NFTables) Cleanup() error { return d.Rules.Cleanup() }

// IPTables is the iptables mode: kube-proxy's chain layout in the shared nat and filter
// tables, written in iptables-nft's encoding.
type IPTables struct {
	Rules    ipt.Ruleset
	Families []model.Family
	Config   plan.Config
}

var _ Dataplane = (*IPTables)(nil)

// Mode implements Dataplane.
func (*IPTables) Mode() string { return ModeIPTables }

// Program implements Dataplane.
func (d *IPTables) Program(snap *model.Snapshot, full bool) (Result, error) {
	plans := make([]*plan.IPTables, 0, len(d.Families))
	for _, f := range d.Families {
		plans = append(plans, plan.IPT(snap, f, d.Config))
	}
	st, err := d.Rules.Apply(plans, full)
	return Result{Full: st.Full, Written: st.Chains, Elements: st.Rules, Deleted: st.Deleted}, err
}

// Cleanup implements Dataplane.
func (d *IPTables) Cleanup() error { return d.Rules.Cleanup() }
