package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/healthcheck"
	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/internal/fault"
	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
	"github.com/edgegate/edgegate/daemon/kernel/mgmt"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/pid1/ctl"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/proxy"
	"github.com/edgegate/edgegate/daemon/runner"
	"github.com/edgegate/edgegate/daemon/view"
)

// The proxy and its sync loop: the configured mode's dataplane (the others' leftovers
// removed), the proxier that programs it from the tracker, and the runner that batches the
// source's changes into syncs.

// dataplanes returns the dataplane of the configured mode and those of the other modes
// (whose leftovers are removed).
func dataplanes(cfg Config, families []model.Family, pc plan.Config) (proxy.Dataplane, []proxy.Dataplane, error) {
	return proxy.NewDataplanes(cfg.ProxyMode, proxy.Options{Families: families, Config: pc, IPVSScheduler: cfg.IPVS.Scheduler,
		NFTEndpointsPerTable: cfg.NFTables.EndpointsPerTable})
}

// planConfig turns the daemon's configuration into the planner's.
func planConfig(cfg Config) (plan.Config, error) {
	pc := plan.Config{NodeName: cfg.HostnameOverride, Zone: cfg.Zone, MasqueradeAll: cfg.MasqueradeAll, MasqueradeBit: uint(cfg.MasqueradeBit)}
	if pc.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return pc, fmt.Errorf("hostname: %w", err)
		}
		pc.NodeName = strings.ToLower(h)
	}
	nodeIPs := cfg.nodeIPAddrs()
	for _, s := range cfg.NodePortAddresses {
		if s == "primary" {
			for _, a := range nodeIPs {
				pc.NodePortAddresses = append(pc.NodePortAddresses, netip.PrefixFrom(a, a.BitLen()))
			}
			continue
		}
		pc.NodePortAddresses = append(pc.NodePortAddresses, netip.MustParsePrefix(s).Masked())
	}
	for _, s := range cfg.ClusterCIDRs {
		pc.ClusterCIDRs = append(pc.ClusterCIDRs, netip.MustParsePrefix(s).Masked())
	}
	return pc, nil
}

// proxyParts are what the proxy reports to: metrics, the health of /healthz and of the
// health-check node ports, the dashboard (which records the dataplane) and the
// LoadBalancer (which announces what was programmed). The last two may be off.
type proxyParts struct {
	metrics     *metrics.Metrics
	health      *healthz.Server
	healthCheck *healthcheck.Server
	management  management
	lbs         *loadBalancer
}

// proxyPart is the started proxy: the tracker the source fills, the proxier that programs
// the kernel from it, and the management plane's allow-list.
type proxyPart struct {
	tracker   *model.Tracker
	proxier   *proxy.Proxier
	allowList *mgmt.Kernel
	// programmed is the snapshot the kernel holds, nil before the first sync.
	programmed atomic.Pointer[model.Snapshot]
}

// newProxy opens the configured mode's dataplane, removes what the other modes left
// behind and writes the management plane's allow-list.
func newProxy(cfg Config, pc plan.Config, pp proxyParts, log *slog.Logger) (*proxyPart, error) {
	dp, others, err := dataplanes(cfg, families, pc)
	if err != nil {
		return nil, err
	}
	views := dp // the dashboard's recorder below hides the mode's own views
	// Whatever another mode left behind (a restart with a different --proxy-mode) goes first,
	// so two modes never translate the same traffic.
	for _, o := range others {
		if err := o.Cleanup(); err != nil {
			log.Warn("removing the rules of another proxy mode failed", "mode", o.Mode(), "err", err)
		}
	}
	// The management plane's allow-list is no proxy mode's: it is written after the other
	// modes' cleanup, and removed when the dashboard is off.
	mk := &mgmt.Kernel{}
	programAllowList(mk, pp.management.plane, log)
	if pp.management.dash != nil {
		dp = pp.management.dash.Record(dp)
	}
	warnForwarding(log)
	tracker := model.NewTracker()
	p := &proxy.Proxier{
		Tracker: tracker, Dataplane: dp, Conntrack: &conntrack.Kernel{}, Metrics: pp.metrics, Health: pp.health,
		HealthCheck: pp.healthCheck, Log: log.With("component", "proxy"), Config: pc,
		Families: families, FullSyncPeriod: cfg.FullSyncPeriod.Duration, Now: time.Now,
	}
	part := &proxyPart{tracker: tracker, proxier: p, allowList: mk}
	p.Programmed = func(snap *model.Snapshot) {
		part.programmed.Store(snap)
		if pp.lbs != nil {
			pp.lbs.programmed(snap)
		}
	}
	pp.metrics.WatchKernel(metrics.KernelSources{Conntrack: readConntrack, Refusals: part.refusals(views)})
	return part, nil
}

func readConntrack() (conntrack.Stats, error) { return conntrack.ReadStats(conntrack.Host) }

// refusals reads the protected service ports' refusals from a dataplane that shows them
// (nftables mode), for the programmed snapshot; nil for another.
func (pp *proxyPart) refusals(dp proxy.Dataplane) func() (map[string]view.Refusals, error) {
	v, ok := dp.(proxy.Viewer)
	if !ok {
		return nil
	}
	prot, ok := v.OperatorViews().(view.Protected)
	if !ok {
		return nil
	}
	return func() (map[string]view.Refusals, error) {
		snap := pp.programmed.Load()
		if snap == nil {
			return nil, nil
		}
		return prot.Refusals(snap)
	}
}

// conntrackUnit logs when the connection tracking table fills (conntrackWatch), and shows
// the table on the dashboard (nil: none).
func conntrackUnit(log *slog.Logger, dash *dashboard.Dashboard) Unit {
	w := &conntrackWatch{log: log.With("component", "conntrack"), repeat: time.Minute}
	if dash != nil {
		w.show = func(s conntrack.Stats, pressed bool) {
			c := dashboard.Conntrack{Entries: s.Entries, Max: s.Max, Pressed: pressed, Dropped: s.Drop, EarlyDrops: s.EarlyDrop}
			if sp := s.SynProxy; sp != nil {
				c.SynProxy = &dashboard.SynProxy{SYNs: sp.SynReceived, Completed: sp.CookieValid, InvalidCookies: sp.CookieInvalid}
			}
			dash.SetConntrack(c)
		}
	}
	return Unit{Name: "conntrack-watch", Policy: Restart, Run: func(ctx context.Context) error { return w.run(ctx, readConntrack) }}
}

// syncLoop runs the proxier's syncs: batched after the source's changes, periodic, and
// retried after a failure. It also holds what a trial boot's health check asks of the
// daemon (daemonCheck).
type syncLoop struct {
	tracker *model.Tracker
	proxier *proxy.Proxier
	runner  *runner.Runner
	// afterFirst runs after the first successful sync: its rules have loaded nf_conntrack,
	// whose settings it tunes.
	afterFirst func()
	// clusterSynced, then ready, are told of every successful sync: the Node's readiness
	// follows the first, PID 1 prints its readiness marker on the first. Either may be nil.
	clusterSynced, ready func()

	sourceLoaded atomic.Bool // the source delivered its first whole state
	programmed   atomic.Bool // a sync programmed it
	first        sync.Once
}

func newSyncLoop(cfg Config, px *proxyPart, log *slog.Logger) *syncLoop {
	s := &syncLoop{tracker: px.tracker, proxier: px.proxier,
		afterFirst: func() { tuneConntrack(cfg.Conntrack.tuning(), log) }}
	s.runner = runner.New("sync", func() { s.sync(log) },
		cfg.MinSyncPeriod.Duration, time.Second, min(cfg.SyncPeriod.Duration, cfg.FullSyncPeriod.Duration), runner.RealClock())
	return s
}

// sync is one run of the loop.
func (s *syncLoop) sync(log *slog.Logger) {
	fault.Point(fault.Sync)
	if err := s.proxier.Sync(); err != nil {
		log.Error("sync failed; the previous rules stay in place", "err", err)
		s.runner.Retry()
		return
	}
	s.first.Do(s.afterFirst)
	if s.clusterSynced != nil {
		s.clusterSynced()
	}
	// A sync that began before the source's first load programmed nothing of it.
	if s.sourceLoaded.Load() {
		s.programmed.Store(true)
	}
	if s.ready != nil {
		s.ready()
	}
}

// changed is what the source calls when the tracker's contents changed.
// liveness is the sync loop's liveness: stuck once one sync has run longer than stuckAfter
// (a deadlock, or a kernel that stopped answering).
func (s *syncLoop) liveness(stuckAfter time.Duration, now time.Time) ctl.Component {
	c := ctl.Component{Name: "sync", Live: true}
	if since, ok := s.runner.Running(); ok && now.Sub(since) > stuckAfter {
		c.Live, c.Detail = false, fmt.Sprintf("one sync has run for %v", now.Sub(since).Round(time.Second))
	}
	return c
}

func (s *syncLoop) changed() {
	s.proxier.Queued()
	s.runner.Trigger()
}

// tuneConntrack sizes the connection tracking table and sets its timeouts. Outside the
// initial network namespace the table size is the host's business: that is a warning, the
// timeouts are set anyway.
func tuneConntrack(t conntrack.Tuning, log *slog.Logger) {
	changes, err := conntrack.Tune(conntrack.Host, t, runtime.NumCPU())
	for _, c := range changes {
		log.Info("conntrack setting changed", "setting", c.Name, "from", c.From, "to", c.To)
	}
	switch {
	case errors.Is(err, conntrack.ErrNotHere):
		log.Warn("conntrack: the table size is the host's to set (not the initial network namespace)", "err", err)
	case err != nil:
		log.Warn("conntrack settings not all made", "err", err)
	}
}

// warnForwarding says at start when the kernel does not forward a family: a gateway that
// does not forward only serves its own local traffic. edgegate does not change the setting on
// a host it does not own (the firmware's PID 1 turns forwarding on at boot).
func warnForwarding(log *slog.Logger) {
	for _, f := range []struct{ path, family, fix string }{
		{"/proc/sys/net/ipv4/ip_forward", "IPv4", "net.ipv4.ip_forward=1"},
		{"/proc/sys/net/ipv6/conf/all/forwarding", "IPv6", "net.ipv6.conf.all.forwarding=1"},
	} {
		if b, err := os.ReadFile(f.path); err == nil && strings.TrimSpace(string(b)) == "0" {
			log.Warn(f.family+" forwarding is off: traffic from other hosts to services will not reach their endpoints", "fix", "sysctl -w "+f.fix)
		}
	}
}
