package app

import (
	"cmp"
	"context"
	"log/slog"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/source/manifests"
)

// Where the Services and EndpointSlices come from: a cluster (with the cache of its last
// state), a directory of manifests, or the embedded demo.

// joinCluster is the cluster mode's start: the source, the Node and its Lease, the routes,
// and what rides on the cluster's client: the LoadBalancer's pools, Leases and allocator,
// the firmware's fleet rollouts, the dashboard's view of the link.
func joinCluster(cfg Config, version, nodeName string, sl *syncLoop, health *healthz.Server, dr *drains,
	m *metrics.Metrics, mg management, lbs *loadBalancer, fw *Firmware, log *slog.Logger) (*joined, error) {
	cl, err := join(cfg, version, nodeName, sl.tracker, sl.changed, health, dr, m, fingerprintAnnotations(mg.cert), log)
	if err != nil {
		return nil, err
	}
	sl.clusterSynced = cl.synced
	if lbs != nil {
		if err := lbs.attach(cl.client); err != nil {
			cl.close()
			return nil, err
		}
	}
	if fw != nil {
		if cl.rollouts, err = cl.rolloutController(nodeName, fw.updates, dr, cfg.Update); err != nil {
			cl.close()
			return nil, err
		}
	}
	if mg.dash != nil {
		mg.dash.WatchCluster(func() dashboard.ClusterLink {
			lk, st := cl.source.Link(), cl.member.Status()
			return dashboard.ClusterLink{Mode: "cluster", Reachable: lk.Reachable, Synced: lk.Synced, WatchesHealthy: lk.WatchesHealthy,
				FromCache: lk.FromCache, LastContact: lk.LastSuccess, LeaseRenewed: st.LastLeaseRenew, Problem: cmp.Or(lk.LastError, st.LastError)}
		})
	}
	return cl, nil
}

// sourceUnits starts the source the configuration names and returns its units, with the
// sync loop's: cl when joined to a cluster, else --manifests, else the embedded demo
// manifests (loaded here, once).
func sourceUnits(cfg Config, version, nodeName string, sl *syncLoop, cl *joined, m *metrics.Metrics, log *slog.Logger) []Unit {
	syncUnit := Unit{Name: "sync", Run: func(ctx context.Context) error { sl.runner.Run(ctx); return nil }}
	switch {
	case cl != nil:
		// The cluster source's own state (synced, from the cache) is in the health check.
		sl.sourceLoaded.Store(true)
		log.Info("starting", "version", version, "mode", cfg.ProxyMode, "node", nodeName, "cluster", cfg.clusterServer(), "stateDir", cfg.StateDir)
		return cl.units(sl.runner.Run)
	case cfg.Manifests != "":
		log.Info("starting", "version", version, "mode", cfg.ProxyMode, "node", nodeName, "manifests", cfg.Manifests)
		dir := manifests.NewDir(cfg.Manifests, log.With("component", "manifests"))
		return []Unit{{Name: "manifests", Run: func(ctx context.Context) error {
			return dir.Run(ctx, sl.tracker, func() {
				m.SetManifestProblems(len(dir.Problems()))
				sl.sourceLoaded.Store(true)
				sl.changed()
			})
		}}, syncUnit}
	default:
		log.Info("starting", "version", version, "mode", cfg.ProxyMode, "node", nodeName)
		services, slices, problems := manifests.NewLoader(manifests.Default()).Load()
		for _, pr := range problems {
			log.Error("embedded manifests", "problem", pr)
		}
		log.Info("standalone mode on the embedded demo manifests", "services", len(services), "endpointslices", len(slices))
		sl.tracker.Replace(services, slices)
		sl.sourceLoaded.Store(true)
		sl.changed()
		return []Unit{syncUnit}
	}
}
