// Package proxy is the sync loop's body: it folds source changes into a Snapshot, plans
// the rules of every family, applies them in one transaction, cleans stale UDP conntrack
// entries and keeps health, metrics and the health-check node ports up to date.
package proxy

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/edgegate/edgegate/daemon/healthcheck"
	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
)

// Proxier programs the data plane from a Tracker.
type Proxier struct {
	Tracker     *model.Tracker
	Dataplane   Dataplane
	Conntrack   conntrack.Cleaner
	Metrics     *metrics.Metrics
	Health      *healthz.Server
	HealthCheck *healthcheck.Server // may be nil
	Log         *slog.Logger
	Config      plan.Config
	Families    []model.Family
	// FullSyncPeriod bounds the time between full syncs, which repair rules changed by hand.
	FullSyncPeriod time.Duration
	Now            func() time.Time
	// Programmed, if set, is told each snapshot once the kernel holds it (the LoadBalancer
	// IPs to announce follow what is programmed, never what is merely wanted).
	Programmed func(*model.Snapshot)

	mu       sync.Mutex
	lastFull time.Time
	synced   bool
	// needFull and pending carry a failed sync over to the next one: the tracker has
	// already handed its changes out, so they are kept here until they are programmed.
	needFull    bool
	pending     map[model.ServicePortName]struct{}
	lastTrigger map[model.ServicePortName]int64
	conflicts   []string
	layout      string // the last Result.Layout
	problems    []string
	release     releaser
}

// Queued records that a change is waiting for the next sync (health and metrics).
func (p *Proxier) Queued() {
	now := p.Now()
	p.Health.QueuedUpdate(now)
	p.Metrics.Queued(now)
}

// Sync runs one sync. It is not safe to call concurrently (the runner never does).
func (p *Proxier) Sync() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := p.Now()
	snap, changes := p.Tracker.Snapshot()
	p.Metrics.ServiceChanges(changes.Services)
	p.Metrics.EndpointChanges(changes.Endpoints)
	if p.pending == nil {
		p.pending = map[model.ServicePortName]struct{}{}
	}
	for n := range changes.Ports {
		p.pending[n] = struct{}{}
	}
	changes.Ports = p.pending
	full := !p.synced || p.needFull || start.Sub(p.lastFull) >= p.FullSyncPeriod
	if changes.Empty() && !full && !p.draining() {
		p.Health.Updated(start)
		return nil
	}

	res, err := p.Dataplane.Program(snap, full)
	if !slices.Equal(res.Conflicts, p.conflicts) {
		for _, c := range res.Conflicts {
			p.Log.Warn("conflicting services", "conflict", c)
		}
		p.conflicts = res.Conflicts
	}
	if !slices.Equal(res.Problems, p.problems) {
		for _, pr := range res.Problems {
			p.Log.Warn("ignored service input", "problem", pr)
		}
		p.problems = res.Problems
	}
	if err != nil {
		p.Metrics.SyncFailed(p.Dataplane.Mode())
		p.needFull = true
		return fmt.Errorf("sync: %w", err)
	}
	p.needFull = false
	p.pending = nil
	if res.Layout != p.layout {
		// Splitting the dispatch anew moves Services between tables: worth a line.
		p.Log.Info("nftables dispatch split over tables (--nftables-endpoints-per-table)",
			"was", cmp.Or(p.layout, "one table"), "now", cmp.Or(res.Layout, "one table"))
		p.layout = res.Layout
	}
	end := p.Now()
	if res.Full {
		p.lastFull = start
	}
	p.synced = true
	p.Metrics.ObserveSync(res.Full, end.Sub(start), res.Kernel)
	p.Metrics.Synced(end)
	p.Health.Updated(end)
	p.observeProgramming(snap, changes, end)
	p.cleanConntrack(snap, changes, res.Full)
	p.syncHealthChecks(snap)
	if p.Programmed != nil {
		p.Programmed(snap)
	}
	level := slog.LevelDebug
	if res.Full {
		level = slog.LevelInfo
	}
	p.Log.Log(context.Background(), level, "rules programmed", "mode", p.Dataplane.Mode(), "full", res.Full,
		"changed", len(changes.Ports), "chains", res.Written, "elements", res.Elements, "deleted", res.Deleted,
		"took", end.Sub(start), "kernel", res.Kernel)
	p.release.after(res)
	return nil
}

// draining reports whether the dataplane has work left without any change.
func (p *Proxier) draining() bool {
	d, ok := p.Dataplane.(Draining)
	return ok && d.Pending()
}

// observeProgramming records network programming latency once per EndpointSlice change,
// from the time the controller stamped on it to now.
func (p *Proxier) observeProgramming(snap *model.Snapshot, changes model.Changes, now time.Time) {
	if p.lastTrigger == nil {
		p.lastTrigger = map[model.ServicePortName]int64{}
	}
	for n := range changes.Ports {
		sp, ok := snap.Ports.Get(n)
		if !ok {
			delete(p.lastTrigger, n)
			continue
		}
		if sp.TriggerTimeNanos > p.lastTrigger[n] {
			p.lastTrigger[n] = sp.TriggerTimeNanos
			if d := now.Sub(time.Unix(0, sp.TriggerTimeNanos)); d >= 0 {
				p.Metrics.ObserveNetworkProgramming(d)
			}
		}
	}
}

// cleanConntrack deletes stale UDP entries after a sync that touched a UDP service (or a
// full one, which also covers a restart).
func (p *Proxier) cleanConntrack(snap *model.Snapshot, changes model.Changes, full bool) {
	udp := full
	for n := range changes.Ports {
		udp = udp || n.Protocol == model.UDP
	}
	if !udp || p.Conntrack == nil {
		return
	}
	for _, f := range p.Families {
		n, err := p.Conntrack.CleanUDP(f, plan.UDP(snap, f, p.Config))
		if err != nil {
			p.Log.Warn("conntrack cleanup failed", "family", f, "err", err)
		}
		p.Metrics.ConntrackDeleted(n)
		if n > 0 {
			p.Log.Info("deleted stale UDP conntrack entries", "family", f, "count", n)
		}
	}
}

// syncHealthChecks serves healthCheckNodePort for eTP Local services and counts their
// node-local endpoints.
func (p *Proxier) syncHealthChecks(snap *model.Snapshot) {
	ports := map[model.ServiceName]uint16{}
	counts := map[model.ServiceName]int{}
	noLocal := map[string]int{}
	for _, sp := range snap.Ports.All() {
		local := 0
		for _, e := range sp.Endpoints {
			if e.Ready && e.NodeName != "" && e.NodeName == p.Config.NodeName {
				local++
			}
		}
		if sp.ExternalLocal {
			if sp.HealthCheckPort != 0 {
				ports[sp.Name.ServiceName] = sp.HealthCheckPort
			}
			counts[sp.Name.ServiceName] += local
			if local == 0 {
				noLocal["external"]++
			}
		}
		if sp.InternalLocal && local == 0 {
			noLocal["internal"]++
		}
	}
	p.Metrics.SetNoLocalEndpoints("external", noLocal["external"])
	p.Metrics.SetNoLocalEndpoints("internal", noLocal["internal"])
	if p.HealthCheck != nil {
		p.HealthCheck.SyncServices(ports)
		p.HealthCheck.SyncEndpoints(counts)
	}
}
