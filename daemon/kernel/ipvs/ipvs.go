// Package ipvs programs IPVS mode into the kernel: the virtual and real servers (through
// github.com/moby/ipvs) and, through its Applier, the dummy interface, sysctls and modules
// of package ipvslink and the auxiliary nftables tables (through the nftables backend).
// IPVS has no transactions, so the Applier diffs what the kernel holds against the plan,
// changes only the difference and reads back what it changed.
package ipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/daemon/kernel/ipvslink"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// ErrNotAvailable is returned when the kernel has no IPVS: ip_vs is neither built in nor
// loaded, and could not be loaded.
var ErrNotAvailable = ipvslink.ErrNotAvailable

// Service is an IPVS virtual server as edgegate sees it. Virtual servers keyed by firewall
// mark, or of a protocol other than TCP, UDP and SCTP, are never edgegate's and are left out.
type Service struct {
	ipvsplan.VSKey
	Scheduler string
	// Timeout is the persistence timeout in seconds; 0 means not persistent. Persistence
	// is always per client address (netmask /32 or /128).
	Timeout uint32
	Stats   Counters
}

// Persistent reports whether the virtual server keeps a client on its real server.
func (s Service) Persistent() bool { return s.Timeout > 0 }

// Forward is a real server's forwarding method.
type Forward uint32

// Forwarding methods, as IPVS numbers them. edgegate uses Masq (NAT) only.
const (
	Masq   Forward = 0
	Local  Forward = 1
	Tunnel Forward = 2
	Route  Forward = 3
)

func (f Forward) String() string {
	switch f {
	case Masq:
		return "Masq"
	case Local:
		return "Local"
	case Tunnel:
		return "Tunnel"
	case Route:
		return "Route"
	}
	return fmt.Sprintf("fwd%d", uint32(f))
}

// Destination is a real server.
type Destination struct {
	Addr    netip.Addr
	Port    uint16
	Weight  int
	Forward Forward
	// ActiveConns and InactiveConns are the kernel's connection counts (read only).
	ActiveConns, InactiveConns int
	Stats                      Counters
}

// AddrPort is the real server's address and port.
func (d Destination) AddrPort() netip.AddrPort { return netip.AddrPortFrom(d.Addr, d.Port) }

// Counters are the kernel's counters of a virtual or real server (ipvsadm --stats).
type Counters struct {
	Connections           uint32
	PacketsIn, PacketsOut uint32
	BytesIn, BytesOut     uint64
}

// IPVS is the kernel's IPVS table, as small as the Applier needs it; Kernel and Fake
// implement it.
type IPVS interface {
	GetServices() ([]Service, error)
	GetDestinations(s Service) ([]Destination, error)
	NewService(s Service) error
	UpdateService(s Service) error
	DelService(s Service) error
	NewDestination(s Service, d Destination) error
	UpdateDestination(s Service, d Destination) error
	DelDestination(s Service, d Destination) error
	// Flush deletes every virtual server, edgegate's or not. The Applier never calls it;
	// it is for tests and for an operator's explicit reset.
	Flush() error
}

// Entry is a virtual server with its real servers, as the kernel holds them.
type Entry struct {
	Service
	Destinations []Destination
}

// Flags is the virtual server's scheduler and persistence as ipvsadm -Ln shows them:
// "rr", "sh persistent 600".
func (e Entry) Flags() string {
	if e.Persistent() {
		return fmt.Sprintf("%s persistent %d", e.Scheduler, e.Timeout)
	}
	return e.Scheduler
}

// RealServers lists the real servers' address:port, in the order read.
func (e Entry) RealServers() []string {
	out := make([]string, 0, len(e.Destinations))
	for _, d := range e.Destinations {
		out = append(out, d.AddrPort().String())
	}
	return out
}

// List reads the whole IPVS table, sorted as ipvsadm -Ln lists it.
func List(t IPVS) ([]Entry, error) {
	svcs, err := t.GetServices()
	if err != nil {
		return nil, fmt.Errorf("list virtual servers: %w", err)
	}
	out := make([]Entry, 0, len(svcs))
	for _, s := range svcs {
		ds, err := t.GetDestinations(s)
		if err != nil {
			return nil, fmt.Errorf("list real servers of %s: %w", s.VSKey, err)
		}
		slices.SortFunc(ds, func(a, b Destination) int { return a.AddrPort().Compare(b.AddrPort()) })
		out = append(out, Entry{Service: s, Destinations: ds})
	}
	slices.SortFunc(out, func(a, b Entry) int { return a.VSKey.Compare(b.VSKey) })
	return out, nil
}

// Format prints entries as `ipvsadm -Ln` does (without its version line), or as
// `ipvsadm -Ln --stats --exact` with stats set.
func Format(entries []Entry, stats bool) string {
	var b strings.Builder
	if stats {
		fmt.Fprintf(&b, "%-33s %8s %8s %8s %8s %8s\n  -> RemoteAddress:Port\n", "Prot LocalAddress:Port",
			"Conns", "InPkts", "OutPkts", "InBytes", "OutBytes")
	} else {
		b.WriteString("Prot LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n")
	}
	for _, e := range entries {
		if stats {
			fmt.Fprintf(&b, "%-33s %8d %8d %8d %8d %8d\n", e.VSKey.String(), e.Stats.Connections,
				e.Stats.PacketsIn, e.Stats.PacketsOut, e.Stats.BytesIn, e.Stats.BytesOut)
		} else {
			b.WriteString(e.VSKey.String() + " " + e.Flags() + "\n")
		}
		for _, d := range e.Destinations {
			if stats {
				fmt.Fprintf(&b, "  -> %-28s %8d %8d %8d %8d %8d\n", d.AddrPort(), d.Stats.Connections,
					d.Stats.PacketsIn, d.Stats.PacketsOut, d.Stats.BytesIn, d.Stats.BytesOut)
			} else {
				fmt.Fprintf(&b, "  -> %-28s %-7s %-6d %-10d %-10d\n", d.AddrPort(), d.Forward, d.Weight, d.ActiveConns, d.InactiveConns)
			}
		}
	}
	return b.String()
}

// PortRange is an inclusive range of ports.
type PortRange struct{ First, Last uint16 }

// DefaultNodePorts is Kubernetes' default node-port range (--service-node-port-range).
var DefaultNodePorts = PortRange{30000, 32767}

// Contains reports whether p is in the range.
func (r PortRange) Contains(p uint16) bool { return p >= r.First && p <= r.Last }
