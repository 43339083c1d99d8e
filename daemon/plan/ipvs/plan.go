// Package ipvs plans IPVS mode: the virtual servers of each family, the addresses of the
// dummy interface and the auxiliary nftables table (an nft.Table with nftables mode's
// dispatch maps), as one Plan.
package ipvs

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

// Names of IPVS mode's kernel objects, kube-proxy's (kube-ipvs0, KUBE-*) under edgegate's own.
const (
	// TableName is the nftables table of IPVS mode's auxiliary rules in each family.
	TableName = "edgegate-ipvs"
	// Interface is the dummy interface that holds the virtual server addresses, so
	// that traffic to them is delivered locally, where IPVS takes it.
	Interface = "edgegate-ipvs0"
	// SchedulerAnnotation picks a Service's IPVS scheduler instead of --ipvs-scheduler.
	SchedulerAnnotation = model.IPVSSchedulerAnnotation
	// DefaultScheduler is kube-proxy's default IPVS scheduler.
	DefaultScheduler = "rr"
)

// Fixed set, map and chain names of the auxiliary table that exist only in IPVS mode; the
// others (service-ips, no-endpoint-services, firewall-ips, reject-chain, masquerading, ...)
// are the nftables mode's names with the same meaning.
const (
	SetVIPs            = "vips"              // every address on the dummy interface
	SetNodePortIPs     = "nodeport-ips"      // the local addresses that have node-port virtual servers
	MapVIPPorts        = "vip-ports"         // every virtual server on a VIP: the ports a VIP answers on
	MapHairpin         = "hairpin-endpoints" // local real servers, for masquerading a pod that reaches itself
	ChainVIPCheck      = "vip-check"
	ChainClusterIPMasq = "cluster-ip-masquerade"
	ChainExternalLocal = "external-local"
	ChainHairpin       = "hairpin"
)

// Schedulers are the schedulers --ipvs-scheduler and the annotation accept (mh needs a
// kernel that has ip_vs_mh).
var Schedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh"}

// ValidScheduler reports whether s names an IPVS scheduler.
func ValidScheduler(s string) bool { return slices.Contains(Schedulers, s) }

// Config is the input of IPVS planning beyond plan.Config.
type Config struct {
	plan.Config
	// Scheduler is the default scheduler (--ipvs-scheduler); empty means rr. A Service's
	// SchedulerAnnotation (model.ServicePort.IPVSScheduler) picks another for it.
	Scheduler string
	// NodeAddrs are the node's local addresses outside the dummy interface. Node ports get
	// a virtual server on each of them that NodePortAddresses allows: IPVS matches exact
	// addresses, it has no "any local address".
	NodeAddrs []netip.Addr
}

// FrontendKind says what kind of service address a virtual server is on.
type FrontendKind int

const (
	FrontendClusterIP FrontendKind = iota
	FrontendExternalIP
	FrontendLoadBalancer
	FrontendNodePort
)

func (k FrontendKind) String() string {
	switch k {
	case FrontendExternalIP:
		return "external IP"
	case FrontendLoadBalancer:
		return "LoadBalancer IP"
	case FrontendNodePort:
		return "node port"
	}
	return "cluster IP"
}

// VSKey identifies a virtual server as the kernel does: address, protocol, port.
type VSKey struct {
	Addr  netip.Addr
	Proto model.Protocol
	Port  uint16
}

// String is ipvsadm's spelling: "TCP  10.96.0.10:80", "UDP  [fd00::1]:53".
func (k VSKey) String() string {
	return fmt.Sprintf("%-4s %s", k.Proto, netip.AddrPortFrom(k.Addr, k.Port))
}

// Compare orders keys as ipvsadm -Ln lists them: by protocol number, family, address,
// then port, so a plan's dump and the kernel's read line by line alike.
func (k VSKey) Compare(o VSKey) int {
	return cmp.Or(cmp.Compare(k.Proto.Number(), o.Proto.Number()), cmp.Compare(k.Addr.BitLen(), o.Addr.BitLen()),
		k.Addr.Compare(o.Addr), cmp.Compare(k.Port, o.Port))
}

// VirtualServer is one IPVS virtual server with its real servers.
type VirtualServer struct {
	VSKey
	Scheduler string
	// Timeout is the persistence timeout in seconds (ClientIP affinity); 0 means the
	// virtual server is not persistent. Persistence is per client address (/32, /128).
	Timeout uint32
	Service model.ServicePortName
	Kind    FrontendKind
	// Reals are sorted by address and port.
	Reals []RealServer
}

// Persistent reports whether a client sticks to its real server (ClientIP affinity).
func (v *VirtualServer) Persistent() bool { return v.Timeout > 0 }

// RealServer is one endpoint of a virtual server. Weight 1 takes new connections; weight
// 0 marks a terminating endpoint kept only for the connections it still has: the applier
// removes it once the kernel counts none (kube-proxy's graceful termination).
type RealServer struct {
	Addr   netip.Addr
	Port   uint16
	Weight int
}

// AddrPort is the real server's address and port.
func (r RealServer) AddrPort() netip.AddrPort { return netip.AddrPortFrom(r.Addr, r.Port) }

// Plan is IPVS mode's plan of one family: the virtual servers, the addresses the dummy
// interface must hold, and the auxiliary nftables table (programmed by the nftables
// backend like any nft.Table).
type Plan struct {
	Family model.Family
	// Servers are sorted by VSKey.
	Servers []VirtualServer
	// VIPs are the addresses of the dummy interface, sorted: cluster, external and
	// LoadBalancer IPs. Node-port virtual servers use the node's own addresses.
	VIPs []netip.Addr
	// NodePortAddrs are the local addresses that carry node-port virtual servers, sorted.
	NodePortAddrs []netip.Addr
	Aux           *nft.Table
	// Conflicts lists frontends that two service ports claim; the first in sorted order keeps it.
	Conflicts []string
	// Problems lists input that was ignored (an invalid scheduler annotation).
	Problems []string
}

// Schedulers lists the distinct schedulers the plan uses, sorted.
func (p *Plan) Schedulers() []string {
	var out []string
	for _, vs := range p.Servers {
		out = append(out, vs.Scheduler)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Dump renders the plan as `ipvsadm -Ln` prints the virtual servers (without connection
// counts; each virtual server names its service), then the dummy interface's addresses,
// the node-port addresses, conflicts and problems, then the auxiliary table.
func (p *Plan) Dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "IP Virtual Server plan (%s)\n", p.Family)
	b.WriteString("Prot LocalAddress:Port Scheduler Flags\n")
	b.WriteString("  -> RemoteAddress:Port           Forward Weight\n")
	for i := range p.Servers {
		vs := &p.Servers[i]
		line := vs.VSKey.String() + " " + vs.Scheduler
		if vs.Persistent() {
			line += fmt.Sprintf(" persistent %d", vs.Timeout)
		}
		fmt.Fprintf(&b, "%s  # %s %s\n", line, vs.Service, vs.Kind)
		for _, r := range vs.Reals {
			fmt.Fprintf(&b, "  -> %-28s %-7s %d", r.AddrPort(), "Masq", r.Weight)
			if r.Weight == 0 {
				b.WriteString("  # terminating")
			}
			b.WriteString("\n")
		}
	}
	fmt.Fprintf(&b, "dummy interface %s\n", Interface)
	for _, a := range p.VIPs {
		fmt.Fprintf(&b, "  %s\n", netip.PrefixFrom(a, a.BitLen()))
	}
	b.WriteString("node-port addresses\n")
	for _, a := range p.NodePortAddrs {
		fmt.Fprintf(&b, "  %s\n", a)
	}
	for _, c := range p.Conflicts {
		fmt.Fprintf(&b, "conflict: %s\n", c)
	}
	for _, pr := range p.Problems {
		fmt.Fprintf(&b, "problem: %s\n", pr)
	}
	b.WriteString(p.Aux.Dump())
	return b.String()
}
