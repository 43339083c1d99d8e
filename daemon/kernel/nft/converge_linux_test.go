package nft

import (
	"fmt"
	"math/rand"
	"regexp"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

// normalized lists a table with nft and puts it in a canonical order: nft lists objects
// and set elements in the order they were created, which differs between a table built up
// incrementally and one written at once.
func normalized(t *testing.T, ns string) string {
	t.Helper()
	return normalizedText(kerneltest.NFT(t, ns, "list", "table", "ip", "edgegate"))
}

// normalizedText puts one table's listing in normalized's order.
func normalizedText(list string) string {
	text := strings.Join(strings.Fields(list), " ")
	body := text[strings.Index(text, "{")+1 : strings.LastIndex(text, "}")]
	var blocks []string
	depth, start := 0, 0
	for i, c := range body {
		switch c {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				blocks = append(blocks, sortElements(strings.TrimSpace(body[start:i+1])))
				start = i + 1
			}
		}
	}
	slices.Sort(blocks)
	return strings.Join(blocks, "\n")
}

func sortElements(block string) string {
	i := strings.Index(block, "elements = { ")
	if i < 0 {
		return block
	}
	j := i + strings.Index(block[i:], " }")
	elems := strings.Split(block[i+len("elements = { "):j], ", ")
	slices.Sort(elems)
	return block[:i] + "elements = { " + strings.Join(elems, ", ") + block[j:]
}

// TestPartialSyncsConverge replays random states with incremental syncs in one namespace
// and proves the kernel ends exactly where a single full sync of the last state puts a
// fresh namespace.
func TestPartialSyncsConverge(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	cfg := plan.Config{NodeName: "gw"}
	var states []*model.Snapshot
	for i := 0; i < 25; i++ {
		states = append(states, mt.Snapshot(mt.RandomWorld{}.Objects(r)...))
	}
	var incremental, fresh string
	inNetns(t, func(ns string) {
		k := New()
		for i, s := range states {
			st, err := k.Apply([]*nftplan.Table{nftplan.Build(s, model.IPv4, cfg)}, i == 0)
			if err != nil {
				t.Fatalf("state %d: %v", i, err)
			}
			if i > 0 && st.Full {
				t.Fatalf("state %d was applied in full; want incremental", i)
			}
		}
		incremental = normalized(t, ns)
	})
	inNetns(t, func(ns string) {
		if _, err := New().Apply([]*nftplan.Table{nftplan.Build(states[len(states)-1], model.IPv4, cfg)}, true); err != nil {
			t.Fatal(err)
		}
		fresh = normalized(t, ns)
	})
	if incremental != fresh {
		t.Errorf("incremental syncs ended elsewhere than a full sync:\nincremental: %s\nfull:        %s", incremental, fresh)
	}
}

// TestPlannerPartialSyncsConverge is TestPartialSyncsConverge as the daemon syncs: a
// tracker and nftplan.Planner, whose deltas list the hairpin elements they change, over
// services that share their endpoints (and so the elements).
func TestPlannerPartialSyncsConverge(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	cfg := plan.Config{NodeName: "gw"}
	tr := model.NewTracker()
	p := &nftplan.Planner{Family: model.IPv4}
	var last *model.Snapshot
	var incremental, fresh string
	inNetns(t, func(ns string) {
		k := New()
		for i := 0; i < 25; i++ {
			replaceObjects(tr, mt.RandomWorld{Shared: true}.Objects(r))
			last, _ = tr.Snapshot()
			if _, err := k.Apply([]*nftplan.Table{p.Plan(last, cfg)}, i == 0); err != nil {
				t.Fatalf("state %d: %v", i, err)
			}
		}
		incremental = normalized(t, ns)
	})
	inNetns(t, func(ns string) {
		if _, err := New().Apply([]*nftplan.Table{nftplan.Build(last, model.IPv4, cfg)}, true); err != nil {
			t.Fatal(err)
		}
		fresh = normalized(t, ns)
	})
	if incremental != fresh {
		t.Errorf("incremental syncs ended elsewhere than a full sync:\nincremental: %s\nfull:        %s", incremental, fresh)
	}
	if !regexp.MustCompile(`hairpin-endpoints \{[^}]*elements = \{ 10\.200\.0\.`).MatchString(fresh) {
		t.Errorf("the states share no hairpin elements:\n%s", fresh)
	}
}

// replaceObjects makes objs (mt.RandomWorld's) the tracker's only services and slices.
func replaceObjects(tr *model.Tracker, objs []any) {
	for n := 0; n < 6; n++ {
		tr.DeleteService("ns", fmt.Sprintf("svc%d", n))
		tr.DeleteSlice("ns", fmt.Sprintf("svc%d-v4", n))
	}
	for _, o := range objs {
		mt.Upsert(tr, o)
	}
}

// TestFullSyncRepairsTampering deletes rules, a map element and a chain of edgegate's by
// hand and checks that the next full sync restores exactly the planned table, while a
// partial sync (which trusts its memory of the kernel) does not notice.
func TestFullSyncRepairsTampering(t *testing.T) {
	cfg := plan.Config{NodeName: "gw"}
	snap := demoSnapshot()
	inNetns(t, func(ns string) {
		k := New()
		tables := []*nftplan.Table{nftplan.Build(snap, model.IPv4, cfg)}
		if _, err := k.Apply(tables, true); err != nil {
			t.Fatal(err)
		}
		want := normalized(t, ns)
		for _, cmd := range [][]string{
			{"flush", "chain", "ip", "edgegate", "services"},
			{"delete", "element", "ip", "edgegate", "service-nodeports", "{ tcp . 30080 }"},
			{"add", "chain", "ip", "edgegate", "intruder"},
			{"add", "rule", "ip", "edgegate", "filter-forward", "drop"},
		} {
			kerneltest.NFT(t, ns, cmd...)
		}
		if _, err := k.Apply(tables, false); err != nil {
			t.Fatal(err)
		}
		if normalized(t, ns) == want {
			t.Fatal("tampering was not visible; the test cannot tell repair from nothing")
		}
		if _, err := k.Apply(tables, true); err != nil {
			t.Fatal(err)
		}
		if got := normalized(t, ns); got != want {
			t.Errorf("full sync did not repair the table:\ngot:  %s\nwant: %s", got, want)
		}
	})
}

// TestFirstFullSyncDeletesNamedCounters starts on a table an earlier build of edgegate
// left, with named counters that a rule uses: the first full sync of a process removes
// them, and the table is exactly the planned one.
func TestFirstFullSyncDeletesNamedCounters(t *testing.T) {
	tables := []*nftplan.Table{nftplan.Build(demoSnapshot(), model.IPv4, plan.Config{NodeName: "gw"})}
	inNetns(t, func(ns string) {
		if _, err := New().Apply(tables, true); err != nil {
			t.Fatal(err)
		}
		want := normalized(t, ns)
		for _, cmd := range [][]string{
			{"add", "counter", "ip", "edgegate", "endpoint-old"},
			{"add", "counter", "ip", "edgegate", "service-old"},
			{"add", "rule", "ip", "edgegate", "services", "counter", "name", "endpoint-old"},
		} {
			kerneltest.NFT(t, ns, cmd...)
		}
		if _, err := New().Apply(tables, true); err != nil {
			t.Fatal(err)
		}
		if got := normalized(t, ns); got != want {
			t.Errorf("after the first full sync:\ngot:  %s\nwant: %s", got, want)
		}
	})
}

// TestPartialSyncTouchesOnlyWhatChanged changes one endpoint among fifty services and
// checks that the batch rewrote only that service's chains and map elements.
func TestPartialSyncTouchesOnlyWhatChanged(t *testing.T) {
	build := func(moved string) *model.Snapshot {
		var objs []any
		for i := 0; i < 50; i++ {
			name := fmt.Sprintf("svc%d", i)
			objs = append(objs, mt.Service("ns", name, fmt.Sprintf("10.96.1.%d", i), mt.Port("p", v1.ProtocolTCP, 80, 8080, 0)))
			last := "10.200.0.12"
			if i == 7 {
				last = moved
			}
			objs = append(objs, mt.Slice("ns", name+"-1", name, "p", v1.ProtocolTCP, 8080, mt.EP("10.200.0.11"), mt.EP(last, mt.OnNode("gw"))))
		}
		return mt.Snapshot(objs...)
	}
	cfg := plan.Config{NodeName: "gw"}
	inNetns(t, func(ns string) {
		k := New()
		if _, err := k.Apply([]*nftplan.Table{nftplan.Build(build("10.200.0.12"), model.IPv4, cfg)}, true); err != nil {
			t.Fatal(err)
		}
		st, err := k.Apply([]*nftplan.Table{nftplan.Build(build("10.200.0.13"), model.IPv4, cfg)}, false)
		if err != nil {
			t.Fatal(err)
		}
		// The service chain, whose rules DNAT to its endpoints; the new endpoint's hairpin
		// element (the old one stays: the other services still use 10.200.0.12); nothing
		// else is touched, nothing deleted (the counters are the chain's rules').
		if st.Full || st.Chains != 1 || st.Elements != 1 || st.Deleted != 0 {
			t.Errorf("partial sync of one endpoint change: %+v, want 1 chain written, 1 element added, nothing deleted", st)
		}
	})
}

// normalizedAll is normalized for every table of edgegate's in the ip family: the main
// table and the shards of a split dispatch, each under its name.
func normalizedAll(t *testing.T, ns string) string {
	t.Helper()
	var all []string
	for _, line := range strings.Split(strings.TrimSpace(kerneltest.NFT(t, ns, "list", "tables", "ip")), "\n") {
		name := strings.TrimPrefix(line, "table ip ")
		if !owned(name) {
			continue
		}
		all = append(all, "table "+name+":\n"+normalizedText(kerneltest.NFT(t, ns, "list", "table", "ip", name)))
	}
	slices.Sort(all)
	return strings.Join(all, "\n")
}

// TestSplitPartialSyncsConverge is TestPlannerPartialSyncsConverge with the dispatch split
// over tables (nftplan.Shards) at a few endpoints a table, so that the states' sizes grow
// and shrink the split: incremental syncs, which move Services between tables and delete
// the tables a smaller split no longer uses, end where a full sync of the last state puts a
// fresh namespace; and a full sync into a namespace holding a larger split's tables
// deletes those.
func TestSplitPartialSyncsConverge(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	cfg := plan.Config{NodeName: "gw"}
	tr := model.NewTracker()
	p := &nftplan.Planner{Family: model.IPv4}
	s := &nftplan.Shards{PerTable: 3}
	var last *model.Snapshot
	var incremental, fresh string
	splits := map[int]bool{}
	inNetns(t, func(ns string) {
		k := New()
		for i := 0; i < 40; i++ {
			objs := mt.RandomWorld{Shared: true}.Objects(r)
			if i%10 >= 7 { // now and then few enough Services for fewer tables
				objs = objs[:min(len(objs), 2)]
			}
			replaceObjects(tr, objs)
			last, _ = tr.Snapshot()
			tables := s.Split(p.Plan(last, cfg))
			splits[s.Tables()] = true
			st, err := k.Apply(tables, i == 0)
			if err != nil {
				t.Fatalf("state %d (%d tables): %v", i, len(tables), err)
			}
			if i > 0 && st.Full {
				t.Fatalf("state %d was applied in full; want incremental", i)
			}
		}
		incremental = normalizedAll(t, ns)
	})
	if len(splits) < 3 {
		t.Fatalf("the states split the dispatch only %v ways: the test wants growing and shrinking splits", splits)
	}
	// The same sharder splits the last state from scratch (a table without a Delta), at the
	// number of tables it has come to.
	want := s.Split(nftplan.Build(last, model.IPv4, cfg))
	inNetns(t, func(ns string) {
		// A larger split's tables first, as a run with more Services would have left them.
		big := (&nftplan.Shards{PerTable: 1}).Split(nftplan.Build(last, model.IPv4, cfg))
		if len(big) <= len(want) {
			t.Fatalf("a split at 1 endpoint a table has %d tables, the last state's %d", len(big), len(want))
		}
		if _, err := New().Apply(big, true); err != nil {
			t.Fatal(err)
		}
		if _, err := New().Apply(want, true); err != nil {
			t.Fatal(err)
		}
		fresh = normalizedAll(t, ns)
	})
	if incremental != fresh {
		t.Errorf("incremental syncs ended elsewhere than a full sync:\nincremental: %s\nfull:        %s", incremental, fresh)
	}
}
