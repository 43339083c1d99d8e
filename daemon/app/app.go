// Package app is the daemon's wiring: from a parsed configuration it builds each capability
// in a start step of its own (the management plane, the LoadBalancer, the proxy and its
// sync loop, the cluster or manifests source, the listeners, the firmware's health) and
// runs their long-running parts as named units, each with a restart policy. package main
// only parses the flags and chooses between PID 1 and a plain daemon.
package app

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"time"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/healthcheck"
	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/kernel/fastpath"
	"github.com/edgegate/edgegate/daemon/kernel/mgmt"
	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/pid1/ctl"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Options is what the daemon runs with.
type Options struct {
	Config Config
	// Version is the daemon's, set at build time in package main.
	Version string
	Log     *slog.Logger
	// Firmware is set when the daemon is the gateway's firmware (PID 1): it is told of
	// every successful sync (PID 1 prints its readiness marker on the first), answers the
	// updater's health check while it runs, and serves the updater on the dashboard.
	Firmware *Firmware
}

// families are the address families the daemon serves.
var families = []model.Family{model.IPv4, model.IPv6}

// Run is the daemon, until ctx ends (then it drains and returns nil) or a unit of policy
// EndRun fails (then it stops the others and returns the error). Under PID 1 a failed run
// is run again in the same process: nothing it opens may outlive it.
func Run(ctx context.Context, o Options) error {
	cfg, fw := o.Config, o.Firmware
	pc, err := planConfig(cfg)
	if err != nil {
		return err
	}
	// The components outlive the signal by a moment: a stopping gateway first hands its
	// LoadBalancer IPs over (see drainAndStop).
	stop := ctx
	ctx, stopUnits := context.WithCancel(context.WithoutCancel(ctx))
	defer stopUnits()
	m := metrics.New()
	gate := gates(cfg, m, o.Log)
	mg, log := newManagement(cfg, o.Version, pc.NodeName, gate, o.Log)
	if fw != nil {
		// Reports start before anything that may wait (the API server, the kernel): PID 1
		// counts a daemon that does not report as hung. Until the units run they say
		// the daemon is not healthy yet, and no part of it stuck.
		m.ObserveDaemonRuns(reasons(), fw.runs)
		if fw.reports != nil {
			var show func(dashboard.DaemonRuns)
			if mg.dash != nil {
				show = mg.dash.SetDaemonRuns
			}
			go fw.reportLoop(ctx, log, show)
		}
	}
	health := healthz.New(2*cfg.SyncPeriod.Duration, time.Now)
	dr := newDrains(health.SetDraining)
	lbs, err := newLoadBalancer(cfg, pc.NodeName, m, log)
	if err != nil {
		return err
	}
	defer lbs.close()
	if lbs != nil && lbs.group != nil {
		// A draining gateway hands its LoadBalancer IPs to its peers first.
		dr.follow(lbs.group.SetDraining)
	}
	mg.follow(dr, fw)
	hc := healthcheck.NewServer(nil, gate("healthcheck"), log.With("component", "healthcheck"))
	hc.UseProxyHealth(health)
	defer hc.Close()
	px, err := newProxy(cfg, pc, proxyParts{metrics: m, health: health, healthCheck: hc, management: mg, lbs: lbs}, log)
	if err != nil {
		return err
	}
	sl := newSyncLoop(cfg, px, log)
	// A pool's protection reaches its Services that have none of their own.
	lbs.followProtection(func(of func(netip.Addr) *model.Protection) {
		if px.tracker.SetPoolProtection(of) > 0 {
			// A sync looks: the Services rebuilt may come out unchanged, and a change
			// queued that no sync then records would read as one pending.
			sl.runner.Trigger()
		}
	})
	if fw != nil {
		sl.ready = fw.ready
	}
	var cl *joined // nil when standalone
	if cfg.inCluster() {
		if cl, err = joinCluster(cfg, o.Version, pc.NodeName, sl, health, dr, m, mg, lbs, fw, log); err != nil {
			return err
		}
		defer cl.close()
	}

	us := newUnits(log)
	for _, u := range listenerUnits(cfg, health, m, gate, log) {
		us.start(ctx, u)
	}
	us.start(ctx, conntrackUnit(log, mg.dash))
	var showFastPath func([]string)
	if mg.dash != nil {
		showFastPath = mg.dash.SetFastPath
	}
	us.start(ctx, fastPathUnit(cfg, fastpath.Kernel{}, log, func(devices []string) {
		m.SetFastPathInterfaces(len(devices))
		if showFastPath != nil {
			showFastPath(devices)
		}
	}))
	for _, u := range mg.units(cfg, lbs, px.allowList, log) {
		us.start(ctx, u)
	}
	health.Updated(time.Now())
	for _, u := range sourceUnits(cfg, o.Version, pc.NodeName, sl, cl, m, log) {
		us.start(ctx, u)
	}
	if fw != nil {
		fw.health.set(daemonCheck(sl, cl), func() []ctl.Component {
			return []ctl.Component{sl.liveness(fw.health.stuckAfter, time.Now())}
		})
		defer fw.health.set(nil, nil)
	}

	select {
	case <-stop.Done():
		drainAndStop(cfg, dr, lbs, log, stopUnits)
		us.wait()
		return nil
	case err := <-us.failed():
		// Stop the other units before returning, so a restarted daemon finds its ports
		// free.
		stopUnits()
		us.wait()
		return err
	}
}

// gates returns each HTTP listener's gate: a flood of one leaves the others answering;
// the health-check node ports share one.
func gates(cfg Config, m *metrics.Metrics, log *slog.Logger) func(name string) *listener.Gate {
	return func(name string) *listener.Gate {
		return listener.NewGate(name, cfg.Listeners.config(), m, log.With("component", name))
	}
}

// drainAndStop ends a run that was asked to stop. Draining: /healthz fails, the Node turns
// not ready, and the LoadBalancer IPs go to the peers: this gateway stops answering for
// them, then says so in a heartbeat, which the peers wait for before they answer. Two
// heartbeat intervals give that heartbeat time to leave; a slower speaker only makes the
// peers take over at their heartbeat timeout instead (a gap, never two answers).
func drainAndStop(cfg Config, dr *drains, lbs *loadBalancer, log *slog.Logger, stopUnits func()) {
	dr.set(drainShutdown, true)
	if lbs != nil && lbs.group != nil {
		time.Sleep(2 * cfg.LoadBalancer.HeartbeatInterval.Duration)
	}
	log.Info("stopping; programmed rules stay in place (edgegate --cleanup removes them)")
	stopUnits()
}

// daemonCheck is the daemon's part of a trial boot's health check: the source loaded, the
// rules programmed and, in a cluster, synced with the API server and the Node registered.
func daemonCheck(sl *syncLoop, cl *joined) func() error {
	return func() error {
		switch {
		case !sl.sourceLoaded.Load():
			return errors.New("the Services and EndpointSlices have not loaded yet")
		case !sl.programmed.Load():
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
	}
}

// Cleanup removes every rule edgegate programmed, in every proxy mode, and the management
// plane's allow-list; it logs each failure and reports whether any happened.
func Cleanup(cfg Config, log *slog.Logger) error {
	dp, others, err := dataplanes(cfg, nil, plan.Config{})
	if err != nil {
		log.Error("cleanup failed", "err", err)
		return err
	}
	var errs []error
	for _, d := range append(others, dp) {
		if err := d.Cleanup(); err != nil {
			log.Error("cleanup failed", "mode", d.Mode(), "err", err)
			errs = append(errs, err)
		}
	}
	if err := (&mgmt.Kernel{}).Cleanup(); err != nil {
		log.Error("cleanup failed", "table", "inet "+mgmt.TableName, "err", err)
		errs = append(errs, err)
	}
	if err := (fastpath.Kernel{}).Cleanup(); err != nil {
		log.Error("cleanup failed", "table", "inet "+fastpath.TableName, "err", err)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
