package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/kernel/kernelview"
	"github.com/edgegate/edgegate/daemon/kernel/mgmt"
	"github.com/edgegate/edgegate/daemon/lb/alloc"
	"github.com/edgegate/edgegate/daemon/lb/pool"
	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/node"
)

// The management plane: where the dashboard and operator API listen, with which
// certificate, and the kernel's source allow-list in front of it.

// management is the started management plane; dash is nil when the dashboard is off (then
// plane is empty: no address, no allow-list), cert nil without an address off loopback.
type management struct {
	dash  *dashboard.Dashboard
	plane dashboard.Plane
	cert  *dashboard.Cert
}

// newManagement resolves the plane and builds the dashboard (its listener's gate from
// gates), which records the daemon's log from then on: it returns the logger the other
// steps use. Any failure here turns the dashboard off, never the daemon.
func newManagement(cfg Config, version, nodeName string, gates func(name string) *listener.Gate, log *slog.Logger) (management, *slog.Logger) {
	if cfg.DashboardBindAddress == "" {
		return management{}, log
	}
	plane, cert, err := managementPlane(cfg, nodeName, log)
	if err != nil {
		log.Error("dashboard disabled", "err", err)
		return management{}, log
	}
	// The rules pages and the traffic are the dataplane's (dash.Record in newProxy).
	dash, log := dashboard.ForDaemon(dashboard.Options{Version: version, Mode: cfg.ProxyMode, Node: nodeName, Families: families,
		Kernel: kernelview.Kernel{}, Gate: gates("dashboard")},
		plane.Binds, cfg.DashboardTokenFile, cfg.StateDir, log)
	if dash == nil {
		return management{}, log
	}
	if cert != nil {
		log.Info("dashboard TLS certificate: pin it", "certSHA256", cert.SHA256, "spkiSHA256", cert.SPKISHA256, "file", cert.CertFile)
	}
	return management{dash: dash, plane: plane, cert: cert}, log
}

// follow shows the drain state on the dashboard and lets its operator drain, and serves
// the firmware's updater (fw nil: not the firmware).
func (mg management) follow(dr *drains, fw *Firmware) {
	if mg.dash == nil {
		return
	}
	if fw != nil {
		mg.dash.ServeUpdates(fw.updates)
	}
	dr.changed = mg.dash.ShowDrain
	mg.dash.OnDrain(func(on bool) bool { return dr.set(drainOperator, on) })
}

// units are the dashboard's, and the LoadBalancer's, whose status it shows. The dashboard
// addresses that follow the cluster's pools restart on their own: they hold nothing but
// the pools' state they read again.
func (mg management) units(cfg Config, lbs *loadBalancer, allowList *mgmt.Kernel, log *slog.Logger) []Unit {
	var us []Unit
	if mg.dash != nil {
		us = append(us, Unit{Name: "dashboard", Run: func(ctx context.Context) error { mg.dash.Start(ctx, mg.plane); return nil }})
	}
	if lbs == nil {
		return us
	}
	if mg.dash != nil {
		mg.dash.WatchLoadBalancer(func() any { return lbs.status() })
	}
	us = append(us, lbs.units()...)
	if mg.dash != nil && lbs.watcher != nil && followsClusterPools(cfg) {
		us = append(us, Unit{Name: "dashboard-addresses", Policy: Restart, Run: func(ctx context.Context) error {
			return followPools(ctx, cfg, lbs.watcher, mg.plane, mg.dash, allowList, log.With("component", "dashboard"))
		}})
	}
	return us
}

// managementPlane resolves the dashboard's addresses and loads its certificate when one of
// them is off loopback, or may be once the cluster's pools are known. An error disables the
// dashboard: never a fallback to plain HTTP.
func managementPlane(cfg Config, nodeName string, log *slog.Logger) (dashboard.Plane, *dashboard.Cert, error) {
	nodeIPs := cfg.nodeIPAddrs()
	var filePools pool.Pools
	if cfg.LoadBalancer.PoolsFile != "" && !cfg.DashboardOnLBInterfaces {
		b, err := os.ReadFile(cfg.LoadBalancer.PoolsFile)
		if err != nil {
			return dashboard.Plane{}, nil, fmt.Errorf("--lb-pools-file: %w", err)
		}
		if filePools, err = pool.Parse(b); err != nil {
			return dashboard.Plane{}, nil, fmt.Errorf("--lb-pools-file %s: %w", cfg.LoadBalancer.PoolsFile, err)
		}
	}
	binds, err := dashboardBinds(cfg, filePools, log)
	if err != nil {
		return dashboard.Plane{}, nil, err
	}
	allowed, err := dashboard.ParseCIDRs("--dashboard-allowed-cidrs", cfg.DashboardAllowedCIDRs)
	if err != nil {
		return dashboard.Plane{}, nil, err
	}
	plane := dashboard.Plane{Binds: binds, Allowed: allowed}
	offLoopback := followsClusterPools(cfg) && len(nodeIPs) > 0
	for _, b := range binds {
		offLoopback = offLoopback || !b.Loopback()
	}
	if !offLoopback {
		return plane, nil, nil
	}
	c, err := dashboard.LoadCert(dashboard.CertRequest{CertFile: cfg.DashboardTLSCertFile, KeyFile: cfg.DashboardTLSPrivateKeyFile,
		StateDir: cfg.StateDir, Names: []string{nodeName}, IPs: nodeIPs})
	if err != nil {
		return dashboard.Plane{}, nil, err
	}
	switch {
	case c.Replaced:
		log.Warn("dashboard TLS certificate unreadable; generated a new one, whose fingerprint differs from the one pinned",
			"file", c.CertFile, "problem", c.Problem)
	case c.Generated:
		log.Info("dashboard TLS certificate generated", "file", c.CertFile, "key", c.KeyFile)
	}
	plane.TLS = dashboard.TLSConfig(c)
	return plane, &c, nil
}

// nodeIPAddrs are the --node-ip addresses, validated with the configuration.
func (c Config) nodeIPAddrs() []netip.Addr {
	var out []netip.Addr
	for _, s := range c.NodeIPs {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// followsClusterPools says the dashboard's node-ip addresses follow the pools of the
// cluster's ConfigMap (followPools): they leave out what those pools' interfaces carry.
func followsClusterPools(cfg Config) bool {
	host, _, err := net.SplitHostPort(cfg.DashboardBindAddress)
	return err == nil && host == dashboard.NodeIPHost && !cfg.DashboardOnLBInterfaces &&
		cfg.LoadBalancer.PoolsFile == "" && cfg.LoadBalancer.Announce && cfg.inCluster()
}

// dashboardBinds resolves --dashboard-bind-address, leaving out the node IPs on interfaces
// that carry the pools ps (unless --dashboard-on-lb-interfaces), and logs what it left out.
func dashboardBinds(cfg Config, ps pool.Pools, log *slog.Logger) ([]dashboard.Bind, error) {
	skip := func(netip.Addr) string { return "" }
	if !cfg.DashboardOnLBInterfaces {
		var err error
		if skip, err = poolInterfaceOf(ps); err != nil {
			return nil, err
		}
	}
	binds, notes, err := dashboard.ResolveBinds(cfg.DashboardBindAddress, cfg.nodeIPAddrs(), skip)
	if err != nil {
		return nil, err
	}
	for _, n := range notes {
		log.Warn("dashboard: " + n)
	}
	return binds, nil
}

// poolInterfaceOf returns a function naming why a node IP must not carry the dashboard:
// its interface carries LoadBalancer pools of ps.
func poolInterfaceOf(ps pool.Pools) (func(netip.Addr) string, error) {
	carries := map[string]string{} // interface -> a pool on it
	for _, p := range ps.List() {
		for _, ifc := range p.Interfaces {
			carries[ifc] = p.Name
		}
	}
	if len(carries) == 0 {
		return func(netip.Addr) string { return "" }, nil
	}
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("dashboard: interfaces: %w", err)
	}
	onIfc := map[netip.Addr]string{}
	for _, ifc := range ifcs {
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("dashboard: addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				onIfc[p.Addr().Unmap()] = ifc.Name
			}
		}
	}
	return func(a netip.Addr) string {
		ifc := onIfc[a.Unmap()]
		if p, ok := carries[ifc]; ok {
			return fmt.Sprintf("on %s, which carries LoadBalancer pool %s", ifc, p)
		}
		return ""
	}, nil
}

// followPools moves the dashboard as the cluster's pools ConfigMap changes: a node IP whose
// interface comes to carry a pool is closed, one whose interface no longer does is opened.
// Until the ConfigMap is first read (an unreachable apiserver at boot), the dashboard stays
// where the start put it, so that an operator can still reach a gateway that is offline.
// The kernel's allow-list changes first, so an address opens behind it.
func followPools(ctx context.Context, cfg Config, w *alloc.Watcher, plane dashboard.Plane, dash *dashboard.Dashboard, k *mgmt.Kernel, log *slog.Logger) error {
	for {
		st := w.State()
		if st.Loaded {
			binds, err := dashboardBinds(cfg, st.Pools, log)
			switch {
			case err != nil:
				log.Error("dashboard addresses not changed for the new pools", "err", err)
			case !slices.Equal(binds, plane.Binds):
				plane.Binds = binds
				addrs := make([]string, len(binds))
				for i, b := range binds {
					addrs[i] = b.Addr
				}
				log.Info("dashboard addresses follow the LoadBalancer pools", "addrs", strings.Join(addrs, ","))
				programAllowList(k, plane, log)
				dash.Rebind(plane)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-st.Changed:
		}
	}
}

// fingerprintAnnotations are the Node annotations that publish the certificate; empty
// values (no certificate) remove earlier ones.
func fingerprintAnnotations(c *dashboard.Cert) map[string]string {
	a := map[string]string{node.DashboardCertAnnotation: "", node.DashboardSPKIAnnotation: ""}
	if c != nil {
		a[node.DashboardCertAnnotation], a[node.DashboardSPKIAnnotation] = c.SHA256, c.SPKISHA256
	}
	return a
}

// programAllowList writes the kernel's allow-list for the plane's addresses off loopback
// (none: the table goes). A failure leaves the daemon's own check in place and says so.
func programAllowList(k *mgmt.Kernel, plane dashboard.Plane, log *slog.Logger) {
	eps, err := dashboard.BindPorts(plane.Binds)
	if err == nil {
		err = k.Apply(mgmt.Rules{Endpoints: eps, Allowed: plane.Allowed})
	}
	switch {
	case err != nil && len(eps) == 0:
		log.Warn("an earlier dashboard allow-list table could not be removed", "table", "inet "+mgmt.TableName, "err", err)
		return
	case err != nil:
		log.Error("dashboard allow-list not in the kernel; the daemon still refuses other sources", "err", err)
		return
	}
	if len(eps) > 0 {
		log.Info("dashboard allow-list in the kernel", "table", "inet "+mgmt.TableName, "allowed", fmt.Sprint(plane.Allowed))
	}
}
