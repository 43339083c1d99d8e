package proxy

import (
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/kernel/nft"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
)

type fakeConntrack struct{ calls []model.Family }

func (f *fakeConntrack) CleanUDP(fam model.Family, _ plan.UDPFrontends) (int, error) {
	f.calls = append(f.calls, fam)
	return 0, nil
}

type fixture struct {
	p     *Proxier
	rules *nft.Fake
	ct    *fakeConntrack
	now   time.Time
}

func newFixture() *fixture {
	f := &fixture{rules: nft.NewFake(), ct: &fakeConntrack{}, now: time.Unix(1_700_000_000, 0)}
	clock := func() time.Time { return f.now }
	f.p = &Proxier{
		Tracker: model.NewTracker(), Conntrack: f.ct, Metrics: metrics.New(),
		Health: healthz.New(time.Minute, clock), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Config: plan.Config{NodeName: "gw"}, Families: []model.Family{model.IPv4, model.IPv6},
		FullSyncPeriod: 10 * time.Minute, Now: clock,
	}
	f.p.Dataplane = &NFTables{Rules: f.rules, Families: f.p.Families, Config: f.p.Config}
	return f
}

// sync runs one sync and fails the test if it fails.
func (f *fixture) sync(t *testing.T) {
	t.Helper()
	if err := f.p.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestSyncFullThenPartialThenPeriodicFull(t *testing.T) {
	f := newFixture()
	f.p.Tracker.UpsertService(mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11")))
	f.sync(t)
	if n := len(f.rules.Applies); n != 1 || !f.rules.Applies[0].Full {
		t.Fatalf("first sync: applies %+v, want one full", f.rules.Applies)
	}
	f.now = f.now.Add(time.Second)
	f.sync(t)
	if n := len(f.rules.Applies); n != 1 {
		t.Fatalf("sync without changes applied rules: %+v", f.rules.Applies)
	}
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"), mt.EP("10.200.2.12")))
	f.now = f.now.Add(time.Second)
	f.sync(t)
	if last := f.rules.Applies[len(f.rules.Applies)-1]; last.Full || len(f.rules.Applies) != 2 {
		t.Fatalf("endpoint change: applies %+v, want a second, partial one", f.rules.Applies)
	}
	if !strings.Contains(f.rules.Dump(), "dnat ip to 10.200.2.12:8080") {
		t.Errorf("new endpoint not programmed:\n%s", f.rules.Dump())
	}
	f.now = f.now.Add(11 * time.Minute)
	f.sync(t)
	if last := f.rules.Applies[len(f.rules.Applies)-1]; !last.Full || len(f.rules.Applies) != 3 {
		t.Fatalf("after the full-sync period: applies %+v, want a third, full one", f.rules.Applies)
	}
	if len(f.ct.calls) != 2*2 {
		t.Errorf("conntrack cleanup ran %d times, want on the two full syncs in both families only", len(f.ct.calls))
	}
}

func TestFailedSyncKeepsRulesAndRetriesFull(t *testing.T) {
	f := newFixture()
	f.p.Tracker.UpsertService(mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0)))
	f.p.Tracker.UpsertSlice(mt.Slice("default", "dns-1", "dns", "dns", v1.ProtocolUDP, 5353, mt.EP("10.200.2.11")))
	f.sync(t)
	before := f.rules.Dump()
	f.p.Tracker.UpsertSlice(mt.Slice("default", "dns-1", "dns", "dns", v1.ProtocolUDP, 5353, mt.EP("10.200.2.12")))
	f.p.Queued()
	f.rules.FailNext = errors.New("netlink: refused")
	f.now = f.now.Add(time.Second)
	if err := f.p.Sync(); err == nil {
		t.Fatal("sync with a refused batch returned no error")
	}
	if f.rules.Dump() != before {
		t.Error("a failed sync changed the programmed rules")
	}
	f.now = f.now.Add(2 * time.Minute)
	if f.p.Health.IsHealthy() {
		t.Error("healthz stays healthy while a queued change cannot be programmed")
	}
	var told []uint64
	f.p.Programmed = func(s *model.Snapshot) { told = append(told, s.Generation) }
	if err := f.p.Sync(); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if len(told) != 1 {
		t.Errorf("Programmed told of %d snapshots after the successful retry, want 1 (and none of the failed sync)", len(told))
	}
	if last := f.rules.Applies[len(f.rules.Applies)-1]; !last.Full {
		t.Errorf("the retry after a failure was not a full sync: %+v", last)
	}
	if !strings.Contains(f.rules.Dump(), "10.200.2.12:5353") || strings.Contains(f.rules.Dump(), "10.200.2.11:5353") {
		t.Errorf("retry did not program the latest endpoints:\n%s", f.rules.Dump())
	}
	if !f.p.Health.IsHealthy() {
		t.Error("healthz not healthy after a successful sync")
	}
	// The UDP service changed: stale entries are cleaned in both families after each
	// successful sync (the first, full one, and the retry).
	if len(f.ct.calls) != 4 {
		t.Errorf("conntrack cleanup calls: %v", f.ct.calls)
	}
}

// TestSplitDispatchLogged: with few endpoints a table, nftables mode hands the backend the
// main table and the shards, says so in its result, and the proxier logs the split when it
// changes (and only then).
func TestSplitDispatchLogged(t *testing.T) {
	f := newFixture()
	var log strings.Builder
	f.p.Log = slog.New(slog.NewTextHandler(&log, nil))
	f.p.Dataplane.(*NFTables).PerTable = 2
	f.p.Tracker.UpsertService(mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11")))
	f.sync(t)
	if strings.Contains(log.String(), "split") || strings.Contains(f.rules.Dump(), nftplan.ShardTablePrefix) {
		t.Fatalf("two rules split into tables:\n%s\n%s", log.String(), f.rules.Dump())
	}
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.13")))
	f.now = f.now.Add(time.Second)
	f.sync(t)
	if !strings.Contains(log.String(), `now="IPv4: 2 tables"`) || !strings.Contains(f.rules.Dump(), "table ip "+nftplan.ShardTable(1)) {
		t.Fatalf("four rules at two a table: want the split logged and programmed:\n%s\n%s", log.String(), f.rules.Dump())
	}
	logged := log.Len()
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.14")))
	f.now = f.now.Add(time.Second)
	f.sync(t)
	if strings.Contains(log.String()[logged:], "split") {
		t.Errorf("an unchanged split logged again:\n%s", log.String()[logged:])
	}
}

// timedDataplane reports a fixed kernel time for every Program.
type timedDataplane struct{ kernel time.Duration }

func (timedDataplane) Mode() plan.Mode { return plan.ModeNFTables }
func (timedDataplane) Cleanup() error  { return nil }
func (d timedDataplane) Program(_ *model.Snapshot, full bool) (Result, error) {
	return Result{Full: full, Kernel: d.kernel}, nil
}

// The kernel's part of a sync, as the dataplane measured it, is what the metric records.
func TestSyncRecordsTheKernelsPart(t *testing.T) {
	f := newFixture()
	f.p.Dataplane = timedDataplane{kernel: 7 * time.Millisecond}
	f.sync(t)
	rec := httptest.NewRecorder()
	f.p.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"edgegate_sync_proxy_rules_kernel_duration_seconds_sum 0.007\n",
		"edgegate_sync_proxy_rules_kernel_duration_seconds_count 1\n"} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, rec.Body.String())
		}
	}
}
