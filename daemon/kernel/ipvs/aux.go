package ipvs

import (
	"fmt"

	"github.com/google/nftables"

	"github.com/edgegate/edgegate/daemon/kernel/nft"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// AuxRules programs the auxiliary nftables tables (ipvsplan.TableName): nft.Ruleset's
// Apply, and a cleanup of those tables only (nftables mode's Cleanup removes its own).
type AuxRules interface {
	Apply(tables []*nftplan.Table, full bool) (nft.Stats, error)
	DeleteTables() error
}

// KernelAux is the AuxRules of the kernel: the nftables backend applies the tables. It
// does not embed nft.Kernel, whose Cleanup removes nftables mode's tables.
type KernelAux struct{ rules *nft.Kernel }

var _ AuxRules = KernelAux{}

// NewKernelAux returns the kernel's AuxRules for the current network namespace.
func NewKernelAux() KernelAux { return KernelAux{nft.New()} }

// Apply implements AuxRules.
func (k KernelAux) Apply(tables []*nftplan.Table, full bool) (nft.Stats, error) {
	return k.rules.Apply(tables, full)
}

// DeleteTables removes the auxiliary tables of both families, whatever they hold. The
// next Apply must be full: the nftables backend's memory of them is stale afterwards.
func (KernelAux) DeleteTables() error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	tables, err := conn.ListTables()
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	n := 0
	for _, t := range tables {
		if t.Name == ipvsplan.TableName && (t.Family == nftables.TableFamilyIPv4 || t.Family == nftables.TableFamilyIPv6) {
			conn.DelTable(t)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("delete tables %s: %w", ipvsplan.TableName, err)
	}
	return nil
}

// FakeAux is the AuxRules of tests, over nft.Fake (which holds only these tables).
type FakeAux struct{ *nft.Fake }

var _ AuxRules = FakeAux{}

// NewFakeAux returns an empty FakeAux.
func NewFakeAux() FakeAux { return FakeAux{nft.NewFake()} }

// DeleteTables implements AuxRules.
func (f FakeAux) DeleteTables() error { return f.Fake.Cleanup() }
