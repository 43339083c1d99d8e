package main

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"

	"github.com/google/nftables"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan/ipt"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// The proxy modes measured, as both programs' --proxy-mode spells them.
const (
	modeNFTables = "nftables"
	modeIPTables = "iptables"
)

// endpointRef is one endpoint of one service port, as the chain names spell it.
type endpointRef struct {
	Namespace, Service, Port string // the port's name
	Addr                     netip.Addr
	TargetPort               uint16
}

// program is one program under test: how to start it and where it keeps its rules.
type program struct {
	Name      string // column title
	MetricsNS string // its metrics' prefix
	// Flags are its own flags, given the run's environment (argv adds the rest).
	Flags func(env runEnv) []string
	// MinSyncPeriodFlag is its name for the flag that runEnv.MinSyncPeriod sets.
	MinSyncPeriodFlag string
	// Layout is where the probe finds its rules in a mode.
	Layout func(mode string) layout
}

// argv is p's command line in a mode: the mode, p's own flags, the shared ones, and the
// run's MinSyncPeriod when it sets one.
func (p program) argv(mode string, e runEnv) []string {
	argv := append([]string{"--proxy-mode=" + mode}, p.Flags(e)...)
	argv = append(argv, sharedFlags...)
	if e.MinSyncPeriod != "" {
		argv = append(argv, p.MinSyncPeriodFlag+"="+e.MinSyncPeriod)
	}
	return argv
}

// runEnv is what a program's command line needs from the run.
type runEnv struct {
	Server, TokenFile, CAFile, Kubeconfig string // the apiserver and credentials
	Node, NodeIP                          string
	StateDir                              string
	// MinSyncPeriod, if set, replaces both programs' default (1s) shortest time between syncs.
	MinSyncPeriod string
}

const metricsAddress = "127.0.0.1:10249"

// sharedFlags are the flags both programs take, with the same meaning: the health and
// metrics addresses the bench reads, and conntrack sysctls left alone (0 leaves
// nf_conntrack_max alone: it is global, not the namespace's).
var sharedFlags = []string{
	"--healthz-bind-address=0.0.0.0:10256",
	"--metrics-bind-address=" + metricsAddress,
	"--conntrack-max-per-core=0",
	"--conntrack-tcp-timeout-established=0",
	"--conntrack-tcp-timeout-close-wait=0",
}

// Both get the admin's credentials (system:masters), so neither waits on RBAC, and the same
// tuning: conntrack sysctls left alone (they are the host's), product defaults for everything
// else (both sync at most once a second).
var (
	edgegate = program{
		Name: "edgegate", MetricsNS: "edgegate_",
		Flags: func(e runEnv) []string {
			return []string{
				"--api-server", e.Server, "--token-file", e.TokenFile, "--ca-file", e.CAFile,
				"--hostname-override", e.Node,
				"--node-ip", e.NodeIP,
				"--state-dir", e.StateDir,
				"--dashboard-bind-address=",
			}
		},
		MinSyncPeriodFlag: "--min-sync-period",
		Layout: func(mode string) layout {
			if mode == modeIPTables {
				return layout{
					Table: "nat", Family: nftables.TableFamilyIPv4,
					ServicesChain: ipt.ChainServices, SvcPrefix: ipt.Prefix + "SVC-",
					PortChain: edgegateSVC, EndpointChain: edgegateSEP,
				}
			}
			return layout{
				Table: nft.TableName, Family: nftables.TableFamilyIPv4, ServiceMap: nft.MapServiceIPs,
				Tables:    nft.ModeTable,
				PortChain: func(ep endpointRef) string { return "service-" + nft.ChainBase(modelName(ep)) },
				EndpointChain: func(ep endpointRef) string {
					return nft.EndpointChain(modelName(ep), model.Endpoint{Addr: ep.Addr, Port: ep.TargetPort})
				},
			}
		},
	}
	kubeProxy = program{
		Name: "kube-proxy", MetricsNS: "kubeproxy_",
		Flags: func(e runEnv) []string {
			return []string{
				"--kubeconfig", e.Kubeconfig,
				"--hostname-override", e.Node,
				// Its default -999 would shield it from the OOM killer on a shared machine.
				"--oom-score-adj=0",
			}
		},
		// The flag's name is historical: it sets the nftables mode's, too.
		MinSyncPeriodFlag: "--iptables-min-sync-period",
		Layout: func(mode string) layout {
			if mode == modeIPTables {
				return layout{
					Table: "nat", Family: nftables.TableFamilyIPv4,
					ServicesChain: "KUBE-SERVICES", SvcPrefix: "KUBE-SVC-",
					PortChain: kubeProxySVC, EndpointChain: kubeProxySEP,
				}
			}
			return layout{
				Table: "kube-proxy", Family: nftables.TableFamilyIPv4, ServiceMap: "service-ips",
				PortChain: kubeProxyServiceChain, EndpointChain: kubeProxyEndpointChain,
			}
		},
	}
)

// The chain names below copy each program's naming; the incremental phase first checks that
// the probe finds an existing endpoint by them, so a renaming shows as an error, not as
// timeouts.

// modelName is the service port as daemon/plan names its chains after it.
func modelName(ep endpointRef) model.ServicePortName {
	return model.ServicePortName{ServiceName: model.ServiceName{Namespace: ep.Namespace, Name: ep.Service}, Port: ep.Port, Protocol: model.TCP}
}

// kubeProxyServiceChain is servicePortChainName of kube-proxy's nftables proxier:
// "service-" + hashAndTruncate(ns/svc/proto/port).
func kubeProxyServiceChain(ep endpointRef) string {
	name := fmt.Sprintf("%s/%s/tcp/%s", ep.Namespace, ep.Service, ep.Port)
	return "service-" + b32sha(name)[:8] + "-" + name
}

// kubeProxyEndpointChain is servicePortEndpointChainName of kube-proxy's nftables proxier
// (pkg/proxy/nftables/proxier.go): "endpoint-" + hashAndTruncate(ns/svc/proto/port__ip/port).
func kubeProxyEndpointChain(ep endpointRef) string {
	name := fmt.Sprintf("%s/%s/tcp/%s__%s/%d", ep.Namespace, ep.Service, ep.Port, ep.Addr, ep.TargetPort)
	return "endpoint-" + b32sha(name)[:8] + "-" + name
}

// kubeProxySVC is servicePortPolicyClusterChain of kube-proxy's iptables proxier: the
// service port name and the lower-case protocol, hashed.
func kubeProxySVC(ep endpointRef) string {
	return "KUBE-SVC-" + b32sha(servicePortName(ep) + "tcp")[:16]
}

// kubeProxySEP is servicePortEndpointChainName of kube-proxy's iptables proxier: the
// service port name, the lower-case protocol and the endpoint, hashed.
func kubeProxySEP(ep endpointRef) string {
	return "KUBE-SEP-" + b32sha(servicePortName(ep) + "tcp" + netip.AddrPortFrom(ep.Addr, ep.TargetPort).String())[:16]
}

// edgegateSVC is daemon/plan's iptPortChain("SVC", ...) (unexported there).
func edgegateSVC(ep endpointRef) string {
	return ipt.Prefix + "SVC-" + b32sha(servicePortName(ep) + string(model.TCP))[:16]
}

// edgegateSEP is daemon/plan's iptEndpointChain (unexported there): as kube-proxy's, with
// the protocol in upper case.
func edgegateSEP(ep endpointRef) string {
	return ipt.Prefix + "SEP-" + b32sha(servicePortName(ep) + string(model.TCP) + netip.AddrPortFrom(ep.Addr, ep.TargetPort).String())[:16]
}

// servicePortName is kube-proxy's ServicePortName.String: ns/name:port.
func servicePortName(ep endpointRef) string {
	return ep.Namespace + "/" + ep.Service + ":" + ep.Port
}

func b32sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return base32.StdEncoding.EncodeToString(h[:])
}
