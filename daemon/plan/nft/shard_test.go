package nft_test

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	pt "github.com/edgegate/edgegate/daemon/plan/internal/plantest"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// TestSplitFollowsThePlanner: through random changes (those of the iptables planner's
// test, with the node's config changed now and then) and at several table sizes, the
// tables Shards makes from the planner's tables hold exactly the planned table's rules
// (checkSplit), equal a split made from scratch table for table, return a table the change
// did not touch as the very same value, and list in each changed table's Delta whatever
// differs from the table it replaces, so that the backend's incremental apply sees it.
func TestSplitFollowsThePlanner(t *testing.T) {
	configs := []plan.Config{{NodeName: "gw"}, {NodeName: "gw", MasqueradeAll: true}}
	for _, perTable := range []int{1, 3, 8, 10000} {
		for _, f := range []model.Family{model.IPv4, model.IPv6} {
			r := rand.New(rand.NewSource(int64(perTable)*10 + int64(f)))
			tr := model.NewTracker()
			for _, objs := range pt.GoldenFixtures() {
				for _, o := range objs {
					mt.Upsert(tr, o)
				}
			}
			p := &nft.Planner{Family: f}
			s := &nft.Shards{PerTable: perTable}
			cfg := configs[0]
			var prev []*nft.Table
			sizes := map[int]bool{}
			kept, incremental := 0, 0
			for step := range 150 {
				where := fmt.Sprintf("per table %d, %v, step %d", perTable, f, step)
				if r.Intn(15) == 0 {
					cfg = configs[r.Intn(len(configs))]
				}
				pt.RandomChange(r, tr)
				snap, _ := tr.Snapshot()
				planned := p.Plan(snap, cfg)
				got := s.Split(planned)
				sizes[s.Tables()] = true
				checkSplit(t, where, planned, got, s.Tables())
				fresh := nft.SplitFresh(s, planned)
				if g, w := tableNames(got), tableNames(fresh); !slices.Equal(g, w) {
					t.Fatalf("%s: split into %v, from scratch into %v", where, g, w)
				}
				for i := range got {
					if diff := cmp.Diff(fresh[i].Dump(), got[i].Dump()); diff != "" {
						t.Fatalf("%s: table %s differs from a split from scratch (-scratch +split):\n%s", where, got[i].Name, diff)
					}
				}
				before := map[string]*nft.Table{}
				for _, x := range prev {
					before[x.Name] = x
				}
				for _, x := range got {
					old := before[x.Name]
					switch {
					case old == nil:
					case x == old:
						kept++
					case x.Delta != nil && x.Delta.From == old:
						incremental++
						checkDelta(t, where+", table "+x.Name, old, x)
					}
				}
				prev = got
			}
			if perTable < 10000 && (kept == 0 || incremental == 0) {
				t.Errorf("per table %d, %v: %d tables kept, %d changed incrementally: the changes did not exercise both", perTable, f, kept, incremental)
			}
			if perTable == 10000 && (len(sizes) != 1 || !sizes[1]) {
				t.Errorf("per table %d, %v: split into %v tables, want the one table", perTable, f, sizes)
			}
		}
	}
}

func tableNames(ts []*nft.Table) []string {
	var out []string
	for _, x := range ts {
		out = append(out, x.Name)
	}
	return out
}

// checkSplit checks that tables hold exactly planned's rules split n ways: every chain and
// set of the plan in one table (the same value), a Service's dispatch in the table
// ShardOf names, each service-ips and service-nodeports element in the table of the chain
// it leads to, every reference resolved within its table, and node-port chains exactly in
// the shards that hold node ports.
func checkSplit(t *testing.T, where string, planned *nft.Table, tables []*nft.Table, n int) {
	t.Helper()
	if n == 1 {
		if len(tables) != 1 || tables[0] != planned {
			t.Fatalf("%s: not split, but tables %v are not the planned table", where, tableNames(tables))
		}
		return
	}
	if len(tables) != n+1 || tables[0].Name != nft.TableName {
		t.Fatalf("%s: %d tables %v, want %s and %d shards", where, len(tables), tableNames(tables), nft.TableName, n)
	}
	chains, sets := map[string]string{}, map[string]string{}
	elems := map[string][]nft.Elem{}
	for i, x := range tables {
		if i > 0 && x.Name != nft.ShardTable(i-1) {
			t.Fatalf("%s: table %d is %s, want %s", where, i, x.Name, nft.ShardTable(i-1))
		}
		if err := x.Validate(); err != nil {
			t.Fatalf("%s: table %s: %v", where, x.Name, err)
		}
		for name, c := range x.Chains {
			if i > 0 && (nft.SplitChains[name] || name == nft.ChainMarkMasq || name == nft.ChainNATPreroutingNodePorts || name == nft.ChainNATOutputNodePorts) {
				continue
			}
			placedOnce(t, where, "chain", name, x.Name, planned.Chains[name], c, chains)
			if c.Dispatch != (model.ServiceName{}) && i != 1+nft.ShardOf(c.Dispatch, n) {
				t.Fatalf("%s: chain %s of %v in %s, want %s", where, name, c.Dispatch, x.Name, nft.ShardTable(nft.ShardOf(c.Dispatch, n)))
			}
		}
		for name, set := range x.Sets {
			if nft.SplitMaps[name] {
				if i == 0 {
					t.Fatalf("%s: the main table holds map %s", where, name)
				}
				for _, e := range set.Elems {
					if c := x.Chains[e.Verdict.Chain]; c == nil || c.Dispatch == (model.ServiceName{}) {
						t.Fatalf("%s: %s: element %v leads to %s, not a dispatch chain of the table", where, x.Name, e.Key, e.Verdict.Chain)
					}
				}
				elems[name] = append(elems[name], set.Elems...)
				continue
			}
			placedOnce(t, where, "set", name, x.Name, planned.Sets[name], set, sets)
		}
		if i > 0 {
			_, has := x.Chains[nft.ChainNATPreroutingNodePorts]
			if want := len(x.Sets[nft.MapServiceNodePorts].Elems) > 0; has != want {
				t.Fatalf("%s: %s has node-port chains: %v, node ports: %v", where, x.Name, has, want)
			}
		}
	}
	for name := range planned.Chains {
		if _, ok := chains[name]; !ok && !nft.SplitChains[name] {
			t.Fatalf("%s: planned chain %s is in no table", where, name)
		}
	}
	for name, set := range planned.Sets {
		if nft.SplitMaps[name] {
			if g, w := sortedElems(elems[name]), sortedElems(set.Elems); !cmp.Equal(g, w) {
				t.Fatalf("%s: map %s: the shards hold %v, the plan %v", where, name, g, w)
			}
			continue
		}
		if _, ok := sets[name]; !ok {
			t.Fatalf("%s: planned set %s is in no table", where, name)
		}
	}
}

func sortedElems(es []nft.Elem) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, fmt.Sprintf("%v %v", e.Key, e.Verdict))
	}
	slices.Sort(out)
	return out
}

// placedOnce fails t unless table holds the planned object (a chain or set called name)
// and no table in seen held it before; then it records table in seen.
func placedOnce[T comparable](t *testing.T, where, kind, name, table string, planned, held T, seen map[string]string) {
	t.Helper()
	if held != planned {
		t.Fatalf("%s: table %s holds %s %s, which is not the planned one", where, table, kind, name)
	}
	if other, dup := seen[name]; dup {
		t.Fatalf("%s: %s %s in tables %s and %s", where, kind, name, other, table)
	}
	seen[name] = table
}
