package nft

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/nftables"

	"github.com/edgegate/edgegate/daemon/model"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// The kernel's tables: which are edgegate's, what they hold, which an apply deletes.

// tableKey names a table in the kernel.
type tableKey struct {
	family model.Family
	name   string
}

func keyOf(t *nftplan.Table) tableKey { return tableKey{t.Family, t.Name} }

// owned reports whether a table of that name is edgegate's nftables mode's.
var owned = nftplan.ModeTable

// staleTables returns the tables an apply of tables deletes, in order: those the dispatch
// is no longer split over. A partial apply deletes those the last apply wrote; a full one
// those the kernel holds (an earlier run's too). Only the families written are looked at.
func (k *Kernel) staleTables(kr *kernelRead, tables []*nftplan.Table, wanted map[tableKey]bool, full bool) ([]tableKey, error) {
	written := families(tables)
	gone := map[tableKey]bool{}
	if !full {
		for key := range k.applied {
			if !wanted[key] && slices.Contains(written, key.family) {
				gone[key] = true
			}
		}
	} else {
		for _, f := range written {
			have, err := kr.tables(tableFamily(f))
			if err != nil {
				return nil, err
			}
			for _, t := range have {
				if key := (tableKey{f, t.Name}); owned(t.Name) && !wanted[key] {
					gone[key] = true
				}
			}
		}
	}
	return slices.SortedFunc(maps.Keys(gone), func(a, b tableKey) int {
		return cmp.Or(cmp.Compare(a.family, b.family), strings.Compare(a.name, b.name))
	}), nil
}

type kernelObjects struct {
	exists  bool
	chains  map[string]bool
	sets    map[string]*nftables.Set
	objects []*nftables.NamedObj
}

// kernelObjects reads what the kernel holds in the table now (empty if it does not exist),
// its named objects only if asked.
func (b *batch) kernelObjects(objects bool) (kernelObjects, error) {
	ko := kernelObjects{chains: map[string]bool{}, sets: map[string]*nftables.Set{}}
	tables, err := b.read.tables(b.table.Family)
	if err != nil {
		return ko, err
	}
	exists := false
	for _, t := range tables {
		exists = exists || t.Name == b.table.Name
	}
	if !exists {
		return ko, nil
	}
	ko.exists = true
	chains, err := b.read.chainsOf(b.table)
	if err != nil {
		return ko, err
	}
	ko.chains = chains
	sets, err := b.read.conn.GetSets(b.table)
	if err != nil {
		return ko, fmt.Errorf("list sets: %w", err)
	}
	for _, s := range sets {
		if !s.Anonymous {
			ko.sets[s.Name] = s
		}
	}
	if !objects {
		return ko, nil
	}
	objs, err := b.read.conn.GetNamedObjects(b.table)
	if err != nil {
		return ko, fmt.Errorf("list objects: %w", err)
	}
	for _, o := range objs {
		if n, ok := o.(*nftables.NamedObj); ok {
			ko.objects = append(ko.objects, n)
		}
	}
	return ko, nil
}

// kernelRead reads the kernel's tables and chains once per family for all the tables of an
// apply: listing chains dumps every chain of the family, 10,000 and more.
type kernelRead struct {
	conn      *nftables.Conn
	tableList map[nftables.TableFamily][]*nftables.Table
	chains    map[nftables.TableFamily]map[string]map[string]bool // table -> chain names
}

func (r *kernelRead) tables(f nftables.TableFamily) ([]*nftables.Table, error) {
	if ts, ok := r.tableList[f]; ok {
		return ts, nil
	}
	ts, err := r.conn.ListTablesOfFamily(f)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	if r.tableList == nil {
		r.tableList = map[nftables.TableFamily][]*nftables.Table{}
	}
	r.tableList[f] = ts
	return ts, nil
}

// chainsOf returns the names of the chains a table holds (an empty set if none).
func (r *kernelRead) chainsOf(t *nftables.Table) (map[string]bool, error) {
	byTable, ok := r.chains[t.Family]
	if !ok {
		if r.chains == nil {
			r.chains = map[nftables.TableFamily]map[string]map[string]bool{}
		}
		chains, err := r.conn.ListChainsOfTableFamily(t.Family)
		if err != nil {
			return nil, fmt.Errorf("list chains: %w", err)
		}
		byTable = map[string]map[string]bool{}
		for _, c := range chains {
			if byTable[c.Table.Name] == nil {
				byTable[c.Table.Name] = map[string]bool{}
			}
			byTable[c.Table.Name][c.Name] = true
		}
		r.chains[t.Family] = byTable
	}
	if byTable[t.Name] == nil {
		return map[string]bool{}, nil
	}
	return byTable[t.Name], nil
}

// families lists the families of tables, in order of first appearance.
func families(tables []*nftplan.Table) []model.Family {
	var out []model.Family
	for _, t := range tables {
		if !slices.Contains(out, t.Family) {
			out = append(out, t.Family)
		}
	}
	return out
}
