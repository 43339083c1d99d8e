// Package plan decides, purely from a model.Snapshot and the node's configuration, what the
// proxy modes share: which endpoints serve which traffic (traffic policies, topology,
// terminating fallback), what is rejected or dropped, what is masqueraded, which UDP
// conntrack entries are stale, and the proxy modes themselves. Each mode's rule plan, with
// a readable Dump, is in its own package: plan/nft, plan/ipt and plan/ipvs, each with a
// Planner (New, then Plan). No syscalls, clocks or goroutines live here.
package plan

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/edgegate/edgegate/daemon/model"
)

// Config is the node-level input of planning.
type Config struct {
	NodeName string
	Zone     string
	// NodePortAddresses limits where node ports answer; empty means every local address
	// except loopback.
	NodePortAddresses []netip.Prefix
	// ClusterCIDRs: traffic to a ClusterIP from outside these is masqueraded.
	ClusterCIDRs  []netip.Prefix
	MasqueradeAll bool
	// MasqueradeBit is the fwmark bit that flags a connection for SNAT (kube-proxy: 14).
	MasqueradeBit uint
}

// MasqueradeMark is the fwmark value of the masquerade bit.
func (c Config) MasqueradeMark() uint32 {
	if c.MasqueradeBit == 0 || c.MasqueradeBit > 31 {
		return 1 << 14
	}
	return 1 << c.MasqueradeBit
}

// Outcome says what happens to new traffic for a frontend that has no usable endpoints.
type Outcome int

const (
	// Forward means the frontend has endpoints: traffic is load-balanced.
	Forward Outcome = iota
	// Reject means the service has no usable endpoint anywhere: refuse at once.
	Reject
	// Drop means endpoints exist but none this traffic may use (Local policy, none local).
	Drop
)

// PortPolicy is the per-family decision for one ServicePort.
type PortPolicy struct {
	SP        *model.ServicePort
	Family    model.Family
	ClusterIP netip.Addr

	ExternalIPs []netip.Addr
	LBIPs       []netip.Addr // ipMode VIP only; Proxy-mode addresses are not captured here

	// Cluster are the endpoints for cluster-wide policy, Local the node-local ones.
	Cluster, Local []model.Endpoint
	// Reachable is every endpoint some traffic may reach (each has a counter and a hairpin element).
	Reachable []model.Endpoint

	Internal Outcome // traffic to the ClusterIP
	External Outcome // traffic to node ports, external and LoadBalancer IPs
	// UsesClusterForExternal: external traffic is spread over Cluster (eTP Cluster).
	UsesClusterForExternal bool
	// UsesLocalForInternal: ClusterIP traffic goes to Local only (iTP Local).
	UsesLocalForInternal bool
	// MasqueradeCluster: ClusterIP traffic from outside the cluster CIDRs is masqueraded
	// (or all of it with masquerade-all).
	MasqueradeCluster bool
	// HasAnyEndpoints is false when the service has no serving endpoint in the cluster at all.
	HasAnyEndpoints bool
}

// IsExternal reports whether the port is reachable from outside in this family.
func (p *PortPolicy) IsExternal() bool {
	return p.SP.NodePort != 0 || len(p.ExternalIPs) > 0 || len(p.LBIPs) > 0
}

// Policy computes the decisions for one ServicePort in one family. ok is false when the
// service has no ClusterIP in that family (it is not proxied there, as in kube-proxy).
func Policy(sp *model.ServicePort, f model.Family, cfg Config) (PortPolicy, bool) {
	cip, ok := sp.ClusterIP(f)
	if !ok {
		return PortPolicy{}, false
	}
	p := PortPolicy{SP: sp, Family: f, ClusterIP: cip}
	for _, a := range sp.ExternalIPs {
		if model.FamilyOf(a) == f {
			p.ExternalIPs = append(p.ExternalIPs, a)
		}
	}
	for _, ing := range sp.LoadBalancerIPs {
		if model.FamilyOf(ing.Addr) == f && !ing.Proxy {
			p.LBIPs = append(p.LBIPs, ing.Addr)
		}
	}
	eps := filter(sp.Endpoints, func(e model.Endpoint) bool { return model.FamilyOf(e.Addr) == f })
	external := p.IsExternal()
	// External traffic needs the cluster endpoints even under eTP Local: traffic from the
	// node itself short-circuits to them (kube-proxy's UsesClusterEndpoints).
	usesCluster := !sp.InternalLocal || external
	usesLocal := sp.InternalLocal || (external && sp.ExternalLocal)
	p.Cluster, p.Local, p.Reachable, p.HasAnyEndpoints = categorize(eps, usesCluster, usesLocal, sp, cfg)

	p.UsesLocalForInternal = sp.InternalLocal
	p.UsesClusterForExternal = !sp.ExternalLocal
	p.MasqueradeCluster = cfg.MasqueradeAll || len(FamilyPrefixes(cfg.ClusterCIDRs, f)) > 0

	switch {
	case !p.HasAnyEndpoints:
		// Endpoints on other nodes only make a Local policy drop, not reject.
		p.Internal, p.External = Reject, Reject
	default:
		p.Internal = forwardOrDrop(p.UsesLocalForInternal, p.Local, p.Cluster)
		p.External = forwardOrDrop(!p.UsesClusterForExternal, p.Local, p.Cluster)
	}
	return p, true
}

func forwardOrDrop(local bool, localEps, clusterEps []model.Endpoint) Outcome {
	if local && len(localEps) == 0 || !local && len(clusterEps) == 0 {
		return Drop
	}
	return Forward
}

// IsLocal reports whether an endpoint runs on this node.
func (c Config) IsLocal(e model.Endpoint) bool { return e.NodeName != "" && e.NodeName == c.NodeName }

// categorize follows kube-proxy's CategorizeEndpoints: ready endpoints (filtered by
// topology), else serving-terminating ones; local endpoints for Local policies with the same
// fallback; and the union every chain must exist for.
func categorize(eps []model.Endpoint, usesCluster, usesLocal bool, sp *model.ServicePort, cfg Config) (cluster, local, reachable []model.Endpoint, hasAny bool) {
	useTopology := ""
	if usesCluster {
		useTopology = topologyMode(eps, sp, cfg)
		cluster = filter(eps, func(e model.Endpoint) bool { return e.Ready && availableForTopology(e, useTopology, cfg) })
		if len(cluster) == 0 {
			cluster = filter(eps, func(e model.Endpoint) bool { return e.Serving && e.Terminating })
		}
		hasAny = len(cluster) > 0
	}
	if !usesLocal {
		return cluster, nil, cluster, hasAny
	}
	var localReady, localTerminating bool
	for _, e := range eps {
		if e.Ready || e.Serving && e.Terminating {
			hasAny = true
			if cfg.IsLocal(e) {
				localReady = localReady || e.Ready
				localTerminating = localTerminating || !e.Ready
			}
		}
	}
	servingTerminating := false
	if localReady {
		local = filter(eps, func(e model.Endpoint) bool { return e.Ready && cfg.IsLocal(e) })
	} else if localTerminating {
		servingTerminating = true
		local = filter(eps, func(e model.Endpoint) bool { return cfg.IsLocal(e) && e.Serving && e.Terminating })
	}
	if !usesCluster {
		return nil, local, local, hasAny
	}
	if useTopology == "" && !servingTerminating {
		return cluster, local, cluster, hasAny
	}
	reachable = slices.Clone(cluster)
	for _, e := range local {
		if !slices.ContainsFunc(reachable, func(r model.Endpoint) bool { return r.Addr == e.Addr && r.Port == e.Port }) {
			reachable = append(reachable, e)
		}
	}
	slices.SortFunc(reachable, compareEndpoints)
	return cluster, local, reachable, hasAny
}

const (
	topoNode = "node"
	topoZone = "zone"
	// topoZoneField is edgegate's standalone fallback: a PreferSameZone service whose
	// slices carry no hints at all (no EndpointSlice controller wrote them) prefers ready
	// endpoints whose zone field is the node's zone.
	topoZoneField = "zone-field"
)

func topologyMode(eps []model.Endpoint, sp *model.ServicePort, cfg Config) string {
	allNodeHints, anyForNode := true, false
	allZoneHints, anyForZone := true, false
	anyHints, anyZoneField := false, false
	for _, e := range eps {
		if !e.Ready {
			continue
		}
		anyHints = anyHints || len(e.NodeHints()) > 0 || len(e.ZoneHints()) > 0
		anyZoneField = anyZoneField || cfg.Zone != "" && e.Zone == cfg.Zone
		if len(e.NodeHints()) == 0 {
			allNodeHints = false
		} else if slices.Contains(e.NodeHints(), cfg.NodeName) {
			anyForNode = true
		}
		if len(e.ZoneHints()) == 0 {
			allZoneHints = false
		} else if slices.Contains(e.ZoneHints(), cfg.Zone) {
			anyForZone = true
		}
	}
	switch {
	case allNodeHints && anyForNode && cfg.NodeName != "":
		return topoNode
	case allZoneHints && anyForZone && cfg.Zone != "":
		return topoZone
	case !anyHints && sp.PreferSameZone && anyZoneField:
		return topoZoneField
	}
	return ""
}

func availableForTopology(e model.Endpoint, mode string, cfg Config) bool {
	switch mode {
	case topoNode:
		return slices.Contains(e.NodeHints(), cfg.NodeName)
	case topoZone:
		return slices.Contains(e.ZoneHints(), cfg.Zone)
	case topoZoneField:
		return e.Zone == cfg.Zone
	}
	return true
}

// filter returns the endpoints keep keeps: eps itself when it keeps them all (the usual
// case, and a plan filters 100,000 endpoints), so the result is only ever read.
func filter(eps []model.Endpoint, keep func(model.Endpoint) bool) []model.Endpoint {
	all := true
	for _, e := range eps {
		if all = keep(e); !all {
			break
		}
	}
	if all {
		return eps
	}
	var out []model.Endpoint
	for _, e := range eps {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

func compareEndpoints(a, b model.Endpoint) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return int(a.Port) - int(b.Port)
}

// FamilyPrefixes returns the prefixes of ps in family f.
func FamilyPrefixes(ps []netip.Prefix, f model.Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if model.FamilyOf(p.Addr()) == f {
			out = append(out, p)
		}
	}
	return out
}

// ProtoName is the name nft and iptables give an IP protocol number.
func ProtoName(p uint8) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return fmt.Sprint(p)
}
