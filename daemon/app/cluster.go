package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/kernel/route"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/node"
	"github.com/edgegate/edgegate/daemon/source/cache"
	"github.com/edgegate/edgegate/daemon/source/cluster"
	"github.com/edgegate/edgegate/daemon/update/rollout"
)

// toBeDeletedTaint is the cluster autoscaler's mark on a node it is about to remove; with a
// deletion timestamp it is what makes kube-proxy's /healthz fail (KEP-3836), so that load
// balancers stop sending new connections to a node that is going away.
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// joined is the gateway in a cluster: the source that feeds the proxy's tracker, the Node
// and its Lease, and the routes to the other nodes' pods.
type joined struct {
	source     *cluster.Source
	rejections *cluster.Rejections
	client     kubernetes.Interface
	rest       *rest.Config
	member     *node.Member
	routes     *node.Routes
	table      *route.Kernel
	health     *healthz.Server
	drains     *drains
	log        *slog.Logger
	// rollouts is the firmware's part of fleet rollouts; nil but on the firmware.
	rollouts *rollout.Controller

	// programmed is set by the first successful sync: what the Node's Ready means.
	programmed atomic.Bool
	draining   atomic.Bool
}

// join builds the cluster mode's components; nothing talks to the API server before run.
// changed is called when the tracker's contents changed; annotations are kept on the Node;
// version is the daemon's.
func join(cfg Config, version, nodeName string, tracker *model.Tracker, changed func(), health *healthz.Server,
	dr *drains, m *metrics.Metrics, annotations map[string]string, log *slog.Logger) (*joined, error) {
	rc, err := cfg.clusterConfig(version).RESTConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	// The Node and its Lease get a client of their own, as kubelet's heartbeat does: the
	// informers' lists and watches never hold a renewal behind the rate limiter.
	memberClient, err := kubernetes.NewForConfig(rest.CopyConfig(rc))
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	table, err := route.New(0)
	if err != nil {
		return nil, err
	}
	j := &joined{table: table, client: client, rest: rc, health: health, drains: dr, log: log}
	var file *cache.File
	if cfg.StateDir != "" {
		file = cache.NewFile(cfg.StateDir)
	}
	// Cluster objects pass the manifests' validation before they reach the tracker: a bad
	// version keeps the last good one, a Service with none refuses its traffic.
	j.rejections = cluster.NewRejections(client, nodeName, log.With("component", "admission"))
	admission := model.NewAdmission(tracker, func(r model.Rejection) {
		m.ObjectRejected(r.Kind(), string(r.Outcome))
		j.rejections.Report(r)
	})
	j.source, err = cluster.New(client, admission, cluster.Options{
		NodeName: nodeName, Changed: changed, NodesChanged: j.nodesChanged, Cache: file,
		Log: log.With("component", "cluster"),
	})
	if err != nil {
		table.Close()
		return nil, err
	}
	j.routes = node.NewRoutes(table, nodeName, j.source.Nodes, log.With("component", "routes"))
	var ips []netip.Addr
	for _, s := range cfg.NodeIPs {
		ips = append(ips, netip.MustParseAddr(s)) // validated with the configuration
	}
	j.member = node.NewMember(memberClient, node.Config{
		Name: nodeName, Zone: cfg.Zone, Region: cfg.Region, InternalIPs: ips, Version: version, Annotations: annotations,
	}, j.programmed.Load, log.With("component", "node"))
	dr.follow(j.member.SetDraining)

	health.AddCheck("cluster", func() (bool, any) {
		lk := j.source.Link()
		return lk.Reachable && lk.Synced && !lk.FromCache, lk
	})
	health.AddCheck("node", func() (bool, any) {
		st := j.member.Status()
		return st.Registered && st.LastError == "", st
	})
	health.AddCheck("routes", func() (bool, any) {
		st := j.routes.Status()
		return st.LastError == "", st
	})
	m.ObserveCluster(func() metrics.ClusterState {
		lk := j.source.Link()
		return metrics.ClusterState{
			Reachable: lk.Reachable, Synced: lk.Synced, FromCache: lk.FromCache,
			LastContact: lk.LastSuccess, CacheSaved: lk.CacheWritten, LeaseRenewed: j.member.Status().LastLeaseRenew,
		}
	})
	return j, nil
}

// nodesChanged follows the Nodes: routes to their pod CIDRs, and the gateway's own Node
// marked for deletion, which drains it.
func (j *joined) nodesChanged() {
	j.routes.Trigger()
	own := j.source.OwnNode()
	draining := own != nil && (own.DeletionTimestamp != nil || slices.ContainsFunc(own.Spec.Taints, func(t v1.Taint) bool {
		return t.Key == toBeDeletedTaint
	}))
	if j.draining.Swap(draining) != draining {
		if draining {
			j.log.Warn("this gateway's Node is being removed: draining (healthz fails, Node not ready)", "node", own.Name)
		} else {
			j.log.Info("this gateway's Node is no longer being removed: serving again")
		}
		j.drains.set(drainNodeRemoval, draining)
	}
}

// synced is called after every successful sync.
func (j *joined) synced() {
	if !j.programmed.Swap(true) {
		j.member.Trigger()
	}
}

// units returns the cluster mode's long-running parts, each ending the run when it fails
// (informers and leader elections start once). syncer, the proxy's sync loop, and the
// routes start only once the source holds a whole state (the API server's or the cache's):
// a sync of the empty state would remove the rules that still forward from before a
// restart.
func (j *joined) units(syncer func(context.Context)) []Unit {
	loop := func(run func(context.Context)) func(context.Context) error {
		return func(ctx context.Context) error { run(ctx); return nil }
	}
	us := []Unit{
		{Name: "cluster", Run: loop(j.source.Run)},
		{Name: "rejections", Run: loop(j.rejections.Run)},
		{Name: "node", Run: loop(j.member.Run)},
		{Name: "sync", Run: loop(func(ctx context.Context) {
			start := time.Now()
			if j.waitReady(ctx) {
				lk := j.source.Link()
				j.log.Info("cluster state ready; programming", "fromCache", lk.FromCache, "after", time.Since(start).Round(time.Millisecond))
				syncer(ctx)
			}
		})},
		{Name: "routes", Run: loop(func(ctx context.Context) {
			if j.waitReady(ctx) {
				j.routes.Run(ctx)
			}
		})},
	}
	if j.rollouts != nil {
		us = append(us, Unit{Name: "rollout", Run: j.rollouts.Run})
	}
	return us
}

func (j *joined) waitReady(ctx context.Context) bool {
	select {
	case <-j.source.Ready():
		return true
	case <-ctx.Done():
		return false
	}
}

// close releases what join opened; the routes stay in the kernel.
func (j *joined) close() { j.table.Close() }

// rolloutController is the firmware's part of fleet rollouts (FirmwareRollout objects):
// it drains the gateway through dr, downloads the bundle and hands it to the updater.
// Bundles on https are verified against the cluster's CA and the system's, where the
// firmware has any.
func (j *joined) rolloutController(nodeName string, updates rollout.Updater, dr *drains, cfg UpdateConfiguration) (*rollout.Controller, error) {
	dyn, err := dynamic.NewForConfig(j.rest)
	if err != nil {
		return nil, fmt.Errorf("cluster client for FirmwareRollouts: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	ca := j.rest.TLSClientConfig.CAData
	if len(ca) == 0 && j.rest.TLSClientConfig.CAFile != "" {
		if ca, err = os.ReadFile(j.rest.TLSClientConfig.CAFile); err != nil {
			return nil, fmt.Errorf("cluster CA for bundle downloads: %w", err)
		}
	}
	roots.AppendCertsFromPEM(ca)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return &rollout.Controller{
		NodeName: nodeName, Client: j.client, Dynamic: dyn, Updater: updates,
		Drain:         func(on bool) { dr.set(drainUpdate, on) },
		Settle:        cfg.DrainSettle.Duration,
		LeaseDuration: cfg.RolloutLease.Duration,
		HTTPClient:    &http.Client{Transport: transport},
		Log:           j.log.With("component", "rollout"),
	}, nil
}
