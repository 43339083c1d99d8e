package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/daemon/lb"
	"github.com/edgegate/edgegate/daemon/lb/alloc"
	"github.com/edgegate/edgegate/daemon/lb/announce"
	"github.com/edgegate/edgegate/daemon/lb/member"
	"github.com/edgegate/edgegate/daemon/lb/pool"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/model"
)

// loadBalancer runs the LoadBalancer IP parts the configuration asks for: the pools (a file
// or the cluster's ConfigMap), the gateways' membership on the pools' interfaces, the
// speaker and its ARP/NDP announcer, and in a cluster the node Leases that settle partitions
// and the leader-elected allocator.
type loadBalancer struct {
	cfg  LoadBalancerConfiguration
	node string
	log  *slog.Logger

	filePools *pool.Pools    // --lb-pools-file; nil: the cluster's ConfigMap
	watcher   *alloc.Watcher // the ConfigMap; nil with a file
	group     *member.Group
	announcer *announce.Announcer
	speaker   *lb.Speaker
	leases    *member.LeaseWatch // nil without a cluster
	allocator *alloc.Controller  // nil unless --lb-allocate
	keySecret *member.KeySecret  // the key's Secret; nil unless the key comes from it
	client    kubernetes.Interface

	// protect, when set, gets the pools' protection whenever the pools change.
	protect func(of func(netip.Addr) *model.Protection)

	mu   sync.Mutex
	snap *model.Snapshot // last programmed
}

// followProtection hands the pools' protection (pool.Pools.ProtectionOf) to protect now
// and at every change of the pools. Call it before the units start.
func (l *loadBalancer) followProtection(protect func(of func(netip.Addr) *model.Protection)) {
	if l == nil {
		return
	}
	l.protect = protect
	if l.filePools != nil && l.filePools.Protects() {
		protect(l.filePools.ProtectionOf)
	}
}

// newLoadBalancer opens what announcing needs (sockets belong to this namespace) and reads
// the pools file; nil when neither announcing nor allocating is asked for. Refused
// heartbeats are counted in m.
func newLoadBalancer(c Config, node string, m *metrics.Metrics, log *slog.Logger) (*loadBalancer, error) {
	cfg := c.LoadBalancer
	if !cfg.Announce && !cfg.Allocate {
		return nil, nil
	}
	l := &loadBalancer{cfg: cfg, node: node, log: log.With("component", "loadbalancer")}
	if cfg.PoolsFile != "" {
		b, err := os.ReadFile(cfg.PoolsFile)
		if err != nil {
			return nil, fmt.Errorf("--lb-pools-file: %w", err)
		}
		p, err := pool.Parse(b)
		if err != nil {
			return nil, fmt.Errorf("--lb-pools-file %s: %w", cfg.PoolsFile, err)
		}
		l.filePools = &p
		l.log.Info("LoadBalancer IP pools", "file", cfg.PoolsFile, "pools", p.String())
	}
	if !cfg.Announce {
		return l, nil
	}
	mc := member.Config{
		Name: node, Interfaces: l.interfaces(), Port: cfg.HeartbeatPort, Interval: cfg.HeartbeatInterval.Duration,
		Timeout: cfg.HeartbeatTimeout.Duration, Leases: l.leaseView, Log: l.log.With("part", "members"),
		Rejected: func(reason string) { m.HeartbeatsRejected(reason, 1) },
	}
	for _, r := range member.RejectReasons {
		m.HeartbeatsRejected(r, 0)
	}
	switch {
	case cfg.KeyFile != "":
		b, err := os.ReadFile(cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--lb-key-file: %w", err)
		}
		if mc.Key, err = member.ParseKey(b, "--lb-key-file "+cfg.KeyFile); err != nil {
			return nil, err
		}
	case cfg.InsecureUnsignedHeartbeats:
		l.log.Warn("heartbeats are NOT signed (--lb-insecure-unsigned-heartbeats): any host on the segment can take LoadBalancer IPs")
	case c.inCluster():
		// The key comes from the cluster's Secret (attach); nothing is announced before.
		mc.AwaitKey = true
	default:
		return nil, errors.New("--lb-announce: no heartbeat key (--lb-key-file)")
	}
	if !cfg.InsecureUnsignedHeartbeats {
		mc.MarksFile = filepath.Join(c.StateDir, "lb-heartbeat-marks.json")
	}
	var err error
	if l.announcer, err = announce.New(l.log.With("part", "announce")); err != nil {
		return nil, err
	}
	if l.group, err = member.Open(mc); err != nil {
		l.announcer.Close()
		return nil, err
	}
	l.speaker = lb.NewSpeaker(node, l.group, l.announcer, l.log.With("part", "speaker"))
	return l, nil
}

// close releases the sockets newLoadBalancer opened, for a start that failed before the
// components ran (their Run would release them otherwise). Safe after they ran.
func (l *loadBalancer) close() {
	if l == nil || l.group == nil {
		return
	}
	l.group.Close()
	l.announcer.Close()
}

// attach joins the cluster's parts: the pools ConfigMap (unless a file gives the pools),
// the node Leases, the allocator.
func (l *loadBalancer) attach(client kubernetes.Interface) error {
	l.client = client
	if l.filePools == nil {
		l.watcher = alloc.NewWatcher(client, alloc.WatcherOptions{Log: l.log.With("part", "pools")})
	}
	if l.group != nil {
		l.leases = member.NewLeaseWatch(nil)
		if l.cfg.KeyFile == "" && !l.cfg.InsecureUnsignedHeartbeats {
			l.keySecret = member.NewKeySecret(client, l.group, l.log.With("part", "key"))
		}
	}
	if l.cfg.Allocate {
		if l.watcher == nil {
			return errors.New("--lb-allocate with --lb-pools-file: the allocator reads the cluster's pools ConfigMap; drop the file")
		}
		var err error
		l.allocator, err = alloc.New(alloc.Options{Client: client, Identity: l.node, DefaultClass: l.cfg.DefaultClass,
			Pools: l.watcher, Log: l.log.With("part", "allocator")})
		return err
	}
	return nil
}

// leaseView is member's LeaseView over the node Leases, none without a cluster.
func (l *loadBalancer) leaseView(name string) (observed time.Time, ok bool) {
	if l.leases == nil {
		return observed, false
	}
	return l.leases.View(name)
}

// pools are the pools in force.
func (l *loadBalancer) pools() pool.Pools {
	switch {
	case l.filePools != nil:
		return *l.filePools
	case l.watcher != nil:
		return l.watcher.Pools()
	}
	return pool.Pools{}
}

// interfaces are every pool's interfaces: where heartbeats go.
func (l *loadBalancer) interfaces() []string {
	var out []string
	for _, p := range l.pools().List() {
		out = append(out, p.Interfaces...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// programmed follows the proxy: the addresses announced are the LoadBalancer IPs the
// kernel now serves.
func (l *loadBalancer) programmed(snap *model.Snapshot) {
	l.mu.Lock()
	l.snap = snap
	l.mu.Unlock()
	l.update()
}

// update gives the speaker every programmed LoadBalancer IP that a pool holds, with that
// pool's interfaces. IPs of no pool (another load balancer's, or ipMode Proxy) are not
// announced.
func (l *loadBalancer) update() {
	if l.speaker == nil {
		return
	}
	l.mu.Lock()
	snap := l.snap
	l.mu.Unlock()
	pools := l.pools()
	addrs := map[netip.Addr][]string{}
	if snap != nil {
		for _, sp := range snap.Sorted() {
			for _, ip := range sp.LoadBalancerIPs {
				if ifs := pools.Interfaces(ip.Addr); !ip.Proxy && len(ifs) > 0 {
					addrs[ip.Addr] = ifs
				}
			}
		}
	}
	l.group.SetInterfaces(l.interfaces())
	l.speaker.SetAddresses(addrs)
}

// units are the long-running parts, each ending the run when it fails: the members and
// the announcer close their sockets when their Run ends, and the others follow them.
func (l *loadBalancer) units() []Unit {
	var us []Unit
	if l.watcher != nil {
		us = append(us, Unit{Name: "lb-pools", Run: func(ctx context.Context) error {
			var wg sync.WaitGroup
			wg.Go(func() { l.followPools(ctx) })
			defer wg.Wait()
			return l.watcher.Run(ctx)
		}})
	}
	if l.allocator != nil {
		us = append(us, Unit{Name: "lb-allocator", Run: l.allocator.Run})
	}
	if l.group == nil {
		return us
	}
	us = append(us,
		Unit{Name: "lb-members", Run: l.group.Run},
		Unit{Name: "lb-announce", Run: l.announcer.Run},
		Unit{Name: "lb-speaker", Run: func(ctx context.Context) error { l.speaker.Run(ctx); return nil }})
	if l.leases != nil {
		us = append(us, Unit{Name: "lb-leases", Run: func(ctx context.Context) error { l.leases.Run(ctx, l.client); return nil }})
	}
	if l.keySecret != nil {
		us = append(us, Unit{Name: "lb-key", Run: l.keySecret.Run})
	}
	return us
}

// followPools updates the announcements when the pools ConfigMap changes.
func (l *loadBalancer) followPools(ctx context.Context) {
	var last pool.Pools
	for {
		st := l.watcher.State() // the watcher logs a ConfigMap that is not in force
		if l.protect != nil && !st.Pools.Equal(last) && (st.Pools.Protects() || last.Protects()) {
			l.protect(st.Pools.ProtectionOf)
		}
		last = st.Pools
		l.update()
		select {
		case <-ctx.Done():
			return
		case <-st.Changed:
		}
	}
}

// status is the dashboard's view.
func (l *loadBalancer) status() map[string]any {
	out := map[string]any{"pools": l.pools().String()}
	if l.speaker != nil {
		out["speaker"] = l.speaker.Status()
		peers, refused := l.group.Peers()
		out["peers"], out["refusedHeartbeats"] = peers, refused
	}
	if l.allocator != nil {
		out["allocating"] = l.allocator.Leading()
	}
	return out
}
