package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/edgegate/edgegate/daemon/plan"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/daemon/kernel/ipvslink"
	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// ipvsFixture is the proxier in ipvs mode over the IPVS applier with fake kernel parts.
type ipvsFixture struct {
	*fixture
	table *ipvs.Fake
	links *ipvslink.FakeLinks
	aux   ipvs.FakeAux
	open  error // what opening the IPVS table fails with
	log   *bytes.Buffer
}

func newIPVSFixture() *ipvsFixture {
	f := &ipvsFixture{fixture: newFixture(), table: ipvs.NewFake(), links: ipvslink.NewFakeLinks("10.200.1.1", "fd00:200:1::1"),
		aux: ipvs.NewFakeAux(), log: &bytes.Buffer{}}
	applier := &ipvs.Applier{
		Open: func() (ipvs.IPVS, error) {
			if f.open != nil {
				return nil, f.open
			}
			return f.table, nil
		},
		Links: f.links, Aux: f.aux,
	}
	f.p.Log = slog.New(slog.NewTextHandler(f.log, nil))
	f.p.Dataplane = &IPVS{Backend: applier, Families: f.p.Families,
		Config: ipvsplan.Config{Config: f.p.Config, Scheduler: "wlc"}}
	return f
}

func TestIPVSModeSync(t *testing.T) {
	f := newIPVSFixture()
	web := mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080), mt.Type(v1.ServiceTypeNodePort))
	web.Annotations = map[string]string{ipvsplan.SchedulerAnnotation: "fastest", model.ProtectionAnnotation: "{synProxy: true}"}
	f.p.Tracker.UpsertService(web)
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11")))
	f.sync(t)
	d := f.table.Dump()
	for _, want := range []string{"TCP  10.96.0.10:80 wlc\n  -> 10.200.2.11:8080", "TCP  10.200.1.1:30080 wlc\n  -> 10.200.2.11:8080"} {
		if !strings.Contains(d, want) {
			t.Errorf("IPVS table lacks %q:\n%s", want, d)
		}
	}
	if !strings.Contains(f.links.Dump(), "edgegate-ipvs0 (dummy) 10.96.0.10\n") {
		t.Errorf("dummy interface:\n%s", f.links.Dump())
	}
	if !strings.Contains(f.aux.Dump(), "table ip edgegate-ipvs") {
		t.Errorf("auxiliary table not programmed:\n%s", f.aux.Dump())
	}
	// The invalid annotation is logged once, for both families together.
	if n := strings.Count(f.log.String(), "annotation edgegate.dev/ipvs-scheduler: \\\"fastest\\\""); n != 1 {
		t.Errorf("problem logged %d times, want once:\n%s", n, f.log.String())
	}
	// So is the protection this mode does not enforce.
	if n := strings.Count(f.log.String(), "annotation edgegate.dev/protection: not enforced in ipvs mode"); n != 1 {
		t.Errorf("unenforced protection logged %d times, want once:\n%s", n, f.log.String())
	}
	if err := f.p.Sync(); err != nil || strings.Count(f.log.String(), "fastest") != 1 {
		t.Errorf("unchanged sync: err %v, log:\n%s", err, f.log.String())
	}
}

// Without IPVS the sync fails with a clear error, like a refused batch: the daemon keeps
// running and retries, healthz goes unhealthy, and the first sync after the module
// appears is full.
func TestIPVSModeWithoutIPVS(t *testing.T) {
	f := newIPVSFixture()
	f.open = fmt.Errorf("%w: /proc/net/ip_vs: no such file or directory", ipvs.ErrNotAvailable)
	f.p.Health.Updated(f.now) // the sync loop has started, as run does
	f.p.Tracker.UpsertService(mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
	f.p.Queued()
	err := f.p.Sync()
	if !errors.Is(err, ipvs.ErrNotAvailable) || !strings.Contains(err.Error(), "ip_vs kernel module not available") {
		t.Fatalf("sync without ip_vs: %v", err)
	}
	if strings.Contains(f.links.Dump(), "edgegate-ipvs0") || f.aux.Dump() != "" {
		t.Errorf("a sync without ip_vs changed the node:\n%s%s", f.links.Dump(), f.aux.Dump())
	}
	f.now = f.now.Add(2 * time.Minute) // the fixture's healthz timeout is one minute
	if f.p.Health.IsHealthy() {
		t.Error("healthy while nothing can be programmed")
	}
	f.open = nil
	if err := f.p.Sync(); err != nil {
		t.Fatalf("sync once ip_vs is there: %v", err)
	}
	if !strings.Contains(f.table.Dump(), "TCP  10.96.0.10:80 wlc") || !f.p.Health.IsHealthy() {
		t.Errorf("after the retry: healthy %v\n%s", f.p.Health.IsHealthy(), f.table.Dump())
	}
}

// Draining real servers are removed by the periodic sync even when nothing changed.
func TestIPVSModeDrainsWithoutChanges(t *testing.T) {
	f := newIPVSFixture()
	f.p.Tracker.UpsertService(mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"), mt.EP("10.200.2.12")))
	f.sync(t)
	cip := ipvsplan.VSKey{Addr: netip.MustParseAddr("10.96.0.10"), Proto: model.TCP, Port: 80}
	f.table.SetConns(cip, netip.MustParseAddrPort("10.200.2.12:8080"), 1, 0)
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11")))
	f.sync(t)
	if !strings.Contains(f.table.Dump(), "10.200.2.12:8080             Masq    0") {
		t.Fatalf("removed endpoint with a connection not drained at weight 0:\n%s", f.table.Dump())
	}
	f.table.SetConns(cip, netip.MustParseAddrPort("10.200.2.12:8080"), 0, 0)
	f.sync(t)
	if strings.Contains(f.table.Dump(), "10.200.2.12") {
		t.Errorf("drained real server still there after an unchanged sync:\n%s", f.table.Dump())
	}
	f.table.Reset()
	if err := f.p.Sync(); err != nil || len(f.table.Calls) != 0 {
		t.Errorf("nothing draining, nothing changed: calls %q, err %v", f.table.Calls, err)
	}
}

// A node address that comes or goes gets or loses its node-port virtual servers at the
// next periodic sync, though no service changed and no full sync is due.
func TestIPVSModeFollowsNodeAddresses(t *testing.T) {
	f := newIPVSFixture()
	f.p.Tracker.UpsertService(mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
		mt.Type(v1.ServiceTypeNodePort)))
	f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11")))
	f.sync(t)
	f.table.Reset()
	if err := f.p.Sync(); err != nil || len(f.table.Calls) != 0 {
		t.Fatalf("nothing changed: calls %q, err %v", f.table.Calls, err)
	}
	if err := f.links.AddAddr("eth0", netip.MustParseAddr("10.200.1.7")); err != nil {
		t.Fatal(err)
	}
	f.sync(t)
	if d := f.table.Dump(); !strings.Contains(d, "TCP  10.200.1.7:30080 wlc\n  -> 10.200.2.11:8080") {
		t.Errorf("no node port on the new address after a periodic sync:\n%s", d)
	}
	if err := f.links.DelAddr("eth0", netip.MustParseAddr("10.200.1.1")); err != nil {
		t.Fatal(err)
	}
	f.sync(t)
	if d := f.table.Dump(); strings.Contains(d, "10.200.1.1:30080") {
		t.Errorf("node port left on an address the node no longer has:\n%s", d)
	}
	f.table.Reset()
	if err := f.p.Sync(); err != nil || len(f.table.Calls) != 0 {
		t.Errorf("addresses settled: calls %q, err %v", f.table.Calls, err)
	}
}

func TestNewDataplanes(t *testing.T) {
	for _, mode := range plan.Modes {
		dp, others, err := NewDataplanes(mode, Options{Families: []model.Family{model.IPv4}, IPVSScheduler: "sh"})
		if err != nil || dp.Mode() != mode || len(others) != 2 {
			t.Fatalf("%s: %v, %d others, %v", mode, dp, len(others), err)
		}
		for _, o := range others {
			if o.Mode() == mode {
				t.Errorf("%s among the others of itself", mode)
			}
		}
		if d, ok := dp.(*IPVS); ok && d.Config.Scheduler != "sh" {
			t.Errorf("ipvs dataplane scheduler %q, want sh", d.Config.Scheduler)
		}
		// The dashboard takes its rules pages and traffic from the dataplane.
		if v, ok := dp.(Viewer); !ok || v.OperatorViews() == nil {
			t.Errorf("%s dataplane shows no operator views", mode)
		}
	}
	if _, _, err := NewDataplanes("userspace", Options{}); err == nil || !strings.Contains(err.Error(), `"userspace"`) {
		t.Errorf("unknown mode: %v", err)
	}
}
