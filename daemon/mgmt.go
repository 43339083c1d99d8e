package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/kernel/mgmt"
	"github.com/edgegate/edgegate/daemon/lb/pool"
	"github.com/edgegate/edgegate/daemon/node"
)

// The management plane: where the dashboard and operator API listen, with which
// certificate, and the kernel's source allow-list in front of it.

// managementPlane resolves the dashboard's addresses and loads its certificate when one of
// them is off loopback. An error disables the dashboard: never a fallback to plain HTTP.
func managementPlane(cfg Config, nodeName string, log *slog.Logger) (dashboard.Plane, *dashboard.Cert, error) {
	var nodeIPs []netip.Addr
	for _, s := range cfg.NodeIPs {
		nodeIPs = append(nodeIPs, netip.MustParseAddr(s)) // validated with the configuration
	}
	skip := func(netip.Addr) string { return "" }
	if !cfg.DashboardOnLBInterfaces {
		var err error
		if skip, err = poolInterfaceOf(cfg.LoadBalancer.PoolsFile); err != nil {
			return dashboard.Plane{}, nil, err
		}
	}
	binds, notes, err := dashboard.ResolveBinds(cfg.DashboardBindAddress, nodeIPs, skip)
	if err != nil {
		return dashboard.Plane{}, nil, err
	}
	for _, n := range notes {
		log.Warn("dashboard: " + n)
	}
	allowed, err := dashboard.ParseCIDRs("--dashboard-allowed-cidrs", cfg.DashboardAllowedCIDRs)
	if err != nil {
		return dashboard.Plane{}, nil, err
	}
	plane := dashboard.Plane{Binds: binds, Allowed: allowed}
	offLoopback := false
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

// poolInterfaceOf returns a function naming why a node IP must not carry the dashboard:
// its interface carries LoadBalancer pools of --lb-pools-file. Pools from the cluster's
// ConfigMap arrive after the start and are not looked at.
func poolInterfaceOf(poolsFile string) (func(netip.Addr) string, error) {
	if poolsFile == "" {
		return func(netip.Addr) string { return "" }, nil
	}
	b, err := os.ReadFile(poolsFile)
	if err != nil {
		return nil, fmt.Errorf("--lb-pools-file: %w", err)
	}
	ps, err := pool.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("--lb-pools-file %s: %w", poolsFile, err)
	}
	carries := map[string]string{} // interface -> a pool on it
	for _, p := range ps.List() {
		for _, ifc := range p.Interfaces {
			carries[ifc] = p.Name
		}
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
