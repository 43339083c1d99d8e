// Command edgegate is the edge gateway's whole userland: a Kubernetes Service proxy that
// programs the gateway's kernel from a cluster or, standalone, from a directory of manifests.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/healthcheck"
	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
	"github.com/edgegate/edgegate/daemon/kernel/kernelview"
	"github.com/edgegate/edgegate/daemon/kernel/mgmt"
	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/pid1"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/proxy"
	"github.com/edgegate/edgegate/daemon/runner"
	"github.com/edgegate/edgegate/daemon/source/manifests"
	"github.com/edgegate/edgegate/daemon/update/rollout"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	if os.Getpid() == 1 {
		// The firmware: edgegate is the machine's init (see daemon/pid1); never returns.
		pid1.Main(func(m *pid1.Machine, args []string) (func(context.Context) error, error) {
			cfg, err := parseConfig(args)
			m.SetLogLevel(cfg.LogLevel)
			fw := firmwareFor(m, cfg, err)
			return func(ctx context.Context) error { return run(ctx, cfg, m.Log(), fw) }, err
		})
	}
	cfg, err := parseConfig(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "edgegate:", err)
		os.Exit(2)
	}
	if cfg.Version {
		fmt.Println("edgegate", version)
		return
	}
	log := newLogger(cfg.LogLevel)
	if cfg.Cleanup {
		failed := false
		dp, others, err := dataplanes(cfg, nil, plan.Config{})
		if err != nil {
			log.Error("cleanup failed", "err", err)
			os.Exit(1)
		}
		for _, d := range append(others, dp) {
			if err := d.Cleanup(); err != nil {
				log.Error("cleanup failed", "mode", d.Mode(), "err", err)
				failed = true
			}
		}
		if err := (&mgmt.Kernel{}).Cleanup(); err != nil {
			log.Error("cleanup failed", "table", "inet "+mgmt.TableName, "err", err)
			failed = true
		}
		if failed {
			os.Exit(1)
		}
		log.Info("removed every rule edgegate programmed")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log, nil); err != nil {
		log.Error("edgegate stopped", "err", err)
		os.Exit(1)
	}
}

// dataplanes returns the dataplane of the configured mode and those of the other modes
// (whose leftovers are removed).
func dataplanes(cfg Config, families []model.Family, pc plan.Config) (proxy.Dataplane, []proxy.Dataplane, error) {
	return proxy.NewDataplanes(cfg.ProxyMode, proxy.Options{Families: families, Config: pc, IPVSScheduler: cfg.IPVS.Scheduler,
		NFTEndpointsPerTable: cfg.NFTables.EndpointsPerTable})
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
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
	var nodeIPs []netip.Addr
	for _, s := range cfg.NodeIPs {
		nodeIPs = append(nodeIPs, netip.MustParseAddr(s))
	}
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

// run is the daemon. fw is set when it is the gateway's firmware (PID 1): it is told of
// every successful sync (PID 1 prints its readiness marker on the first), answers the
// updater's health check while it runs, and serves the updater on the dashboard.
func run(ctx context.Context, cfg Config, log *slog.Logger, fw *firmware) error {
	pc, err := planConfig(cfg)
	if err != nil {
		return err
	}
	// The components outlive the signal by a moment: a stopping gateway first hands its
	// LoadBalancer IPs over (see the end of run).
	stop := ctx
	ctx, stopComponents := context.WithCancel(context.WithoutCancel(ctx))
	defer stopComponents()
	families := []model.Family{model.IPv4, model.IPv6}
	m := metrics.New()
	// Every HTTP listener has a gate of its own, so that a flood of one leaves the others
	// answering; the health-check node ports share one.
	gate := func(name string) *listener.Gate {
		return listener.NewGate(name, cfg.Listeners.config(), m, log.With("component", name))
	}
	var dash *dashboard.Dashboard // nil when disabled
	var plane dashboard.Plane
	var cert *dashboard.Cert // nil without an address off loopback
	if cfg.DashboardBindAddress != "" {
		if plane, cert, err = managementPlane(cfg, pc.NodeName, log); err != nil {
			log.Error("dashboard disabled", "err", err)
		} else {
			// The rules pages and the traffic are the dataplane's (dash.Record below).
			dash, log = dashboard.ForDaemon(dashboard.Options{Version: version, Mode: cfg.ProxyMode, Node: pc.NodeName, Families: families,
				Kernel: kernelview.Kernel{}, Gate: gate("dashboard")},
				plane.Binds, cfg.DashboardTokenFile, cfg.StateDir, log)
		}
	}
	if dash == nil {
		plane, cert = dashboard.Plane{}, nil
	}
	if cert != nil {
		log.Info("dashboard TLS certificate: pin it", "certSHA256", cert.SHA256, "spkiSHA256", cert.SPKISHA256, "file", cert.CertFile)
	}
	health := healthz.New(2*cfg.SyncPeriod.Duration, time.Now)
	dr := newDrains(health.SetDraining)
	lbs, err := newLoadBalancer(cfg, pc.NodeName, m, log)
	if err != nil {
		return err
	}
	// Under PID 1 a failed run is run again in the same process: nothing may leak.
	defer lbs.close()
	if lbs != nil && lbs.group != nil {
		// A draining gateway hands its LoadBalancer IPs to its peers first.
		dr.follow(lbs.group.SetDraining)
	}
	if dash != nil && fw != nil {
		dash.ServeUpdates(fw.updates)
	}
	if dash != nil {
		dr.changed = dash.ShowDrain
		dash.OnDrain(func(on bool) bool { return dr.set(drainOperator, on) })
	}
	hc := healthcheck.NewServer(nil, gate("healthcheck"), log.With("component", "healthcheck"))
	hc.UseProxyHealth(health)
	defer hc.Close()
	tracker := model.NewTracker()
	dp, others, err := dataplanes(cfg, families, pc)
	if err != nil {
		return err
	}
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
	programAllowList(mk, plane, log)
	if dash != nil {
		dp = dash.Record(dp)
	}
	warnForwarding(log)
	p := &proxy.Proxier{
		Tracker: tracker, Dataplane: dp, Conntrack: &conntrack.Kernel{}, Metrics: m, Health: health,
		HealthCheck: hc, Log: log.With("component", "proxy"), Config: pc,
		Families: families, FullSyncPeriod: cfg.FullSyncPeriod.Duration, Now: time.Now,
	}
	if lbs != nil {
		p.Programmed = lbs.programmed
	}
	var r *runner.Runner
	var cl *joined                   // nil when standalone
	var rollouts *rollout.Controller // nil but on the firmware in cluster mode
	// What a trial boot's health check asks of the daemon (see daemonHealth).
	var sourceLoaded, programmed atomic.Bool
	var tuned sync.Once
	r = runner.New("sync", func() {
		if err := p.Sync(); err != nil {
			log.Error("sync failed; the previous rules stay in place", "err", err)
			r.Retry()
			return
		}
		// After the first sync: its rules have loaded nf_conntrack, whose settings these are.
		tuned.Do(func() { tuneConntrack(cfg.Conntrack.tuning(), log) })
		if cl != nil {
			cl.synced()
		}
		// A sync that began before the source's first load programmed nothing of it.
		if sourceLoaded.Load() {
			programmed.Store(true)
		}
		if fw != nil {
			fw.ready()
		}
	}, cfg.MinSyncPeriod.Duration, time.Second, min(cfg.SyncPeriod.Duration, cfg.FullSyncPeriod.Duration), runner.RealClock())
	changed := func() {
		p.Queued()
		r.Trigger()
	}
	if cfg.clusterConfig().Enabled() {
		if cl, err = join(cfg, pc.NodeName, tracker, changed, health, dr, m, fingerprintAnnotations(cert), log); err != nil {
			return err
		}
		defer cl.close()
		if lbs != nil {
			if err := lbs.attach(cl.client); err != nil {
				return err
			}
		}
		if fw != nil {
			if rollouts, err = cl.rolloutController(pc.NodeName, fw.updates, dr, cfg.Update.DrainSettle.Duration); err != nil {
				return err
			}
		}
		if dash != nil {
			dash.WatchCluster(func() dashboard.ClusterLink {
				lk, st := cl.source.Link(), cl.member.Status()
				return dashboard.ClusterLink{Mode: "cluster", Reachable: lk.Reachable, Synced: lk.Synced, WatchesHealthy: lk.WatchesHealthy,
					FromCache: lk.FromCache, LastContact: lk.LastSuccess, LeaseRenewed: st.LastLeaseRenew, Problem: cmp.Or(lk.LastError, st.LastError)}
			})
		}
	}

	var wg sync.WaitGroup
	errc := make(chan error, 8)
	// A panic in a component ends run with an error instead of the process: under PID 1
	// the supervisor then restarts the daemon, and the kernel rules stay meanwhile.
	start := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pid1.Protect(fn); err != nil {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	if cfg.HealthzBindAddress != "" {
		start("healthz", func() error {
			return health.Serve(ctx, cfg.HealthzBindAddress, gate("healthz"), log.With("component", "healthz"))
		})
	}
	if cfg.MetricsBindAddress != "" {
		start("metrics", func() error {
			return serveMetrics(ctx, cfg.MetricsBindAddress, metricsMux(m, cfg.EnableProfiling), gate("metrics"))
		})
	}
	if dash != nil {
		start("dashboard", func() error { dash.Start(ctx, plane); return nil })
	}
	if lbs != nil {
		if dash != nil {
			dash.WatchLoadBalancer(func() any { return lbs.status() })
		}
		for name, fn := range lbs.components() {
			start(name, func() error { return fn(ctx) })
		}
		if dash != nil && lbs.watcher != nil && followsClusterPools(cfg) {
			start("dashboard-addresses", func() error {
				return followPools(ctx, cfg, lbs.watcher, plane, dash, mk, log.With("component", "dashboard"))
			})
		}
	}
	health.Updated(time.Now())
	switch {
	case cl != nil:
		// The cluster source's own state (synced, from the cache) is in the health check.
		sourceLoaded.Store(true)
		log.Info("starting", "version", version, "mode", cfg.ProxyMode, "node", pc.NodeName, "cluster", cfg.clusterServer(), "stateDir", cfg.StateDir)
		for name, fn := range cl.components(r.Run) {
			start(name, func() error { fn(ctx); return nil })
		}
		if rollouts != nil {
			start("rollout", func() error { return rollouts.Run(ctx) })
		}
	case cfg.Manifests != "":
		log.Info("starting", "version", version, "mode", cfg.ProxyMode, "node", pc.NodeName, "manifests", cfg.Manifests)
		dir := manifests.NewDir(cfg.Manifests, log.With("component", "manifests"))
		start("manifests", func() error {
			return dir.Run(ctx, tracker, func() {
				m.SetManifestProblems(len(dir.Problems()))
				sourceLoaded.Store(true)
				changed()
			})
		})
		start("sync", func() error { r.Run(ctx); return nil })
	default:
		log.Info("starting", "version", version, "mode", cfg.ProxyMode, "node", pc.NodeName)
		services, slices, problems := manifests.NewLoader(manifests.Default()).Load()
		for _, pr := range problems {
			log.Error("embedded manifests", "problem", pr)
		}
		log.Info("standalone mode on the embedded demo manifests", "services", len(services), "endpointslices", len(slices))
		tracker.Replace(services, slices)
		sourceLoaded.Store(true)
		changed()
		start("sync", func() error { r.Run(ctx); return nil })
	}

	if fw != nil {
		fw.health.set(func() error {
			switch {
			case !sourceLoaded.Load():
				return errors.New("the Services and EndpointSlices have not loaded yet")
			case !programmed.Load():
				return errors.New("the rules are not programmed yet")
			}
			if cl != nil {
				if lk := cl.source.Link(); !lk.Synced || lk.FromCache {
					return errors.New("cluster: not synced with the API server yet")
				}
				if !cl.member.Status().Registered {
					return errors.New("cluster: the Node is not registered yet")
				}
			}
			return nil
		})
		defer fw.health.set(nil)
	}

	select {
	case <-stop.Done():
		// Draining: /healthz fails, the Node turns not ready, and the LoadBalancer IPs go to
		// the peers: this gateway stops answering for them, then says so in a heartbeat,
		// which the peers wait for before they answer. Two heartbeat intervals give that
		// heartbeat time to leave; a slower speaker only makes the peers take over at their
		// heartbeat timeout instead (a gap, never two answers).
		dr.set(drainShutdown, true)
		if lbs != nil && lbs.group != nil {
			time.Sleep(2 * cfg.LoadBalancer.HeartbeatInterval.Duration)
		}
		log.Info("stopping; programmed rules stay in place (edgegate --cleanup removes them)")
		stopComponents()
		wg.Wait()
		return nil
	case err := <-errc:
		// Stop the other components before returning, so a restarted daemon finds its
		// ports free.
		stopComponents()
		wg.Wait()
		return err
	}
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

// metricsMux serves /metrics and, with profiling, Go's profiles under /debug/pprof/.
func metricsMux(m *metrics.Metrics, profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func serveMetrics(ctx context.Context, addr string, mux http.Handler, gate *listener.Gate) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	return listener.Serve(ctx, gate.Server(mux), gate.Listen(ln))
}
