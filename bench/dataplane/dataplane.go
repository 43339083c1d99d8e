// Package dataplane measures what edgegate's rules cost a new connection (issue 10, "data
// plane"): TCP connection setup through a service VIP with N Services installed, against
// the same connection to the backend without a VIP, in nftables and iptables modes on the
// host and, since the host kernel has no IPVS, in ipvs and nftables modes inside one QEMU
// guest booted from the firmware (Debian's kernel).
//
// Each measurement builds four network namespaces of its own (see topology.go): a client,
// edgegate's gateway, a twin router without any rule, and a backend. edgegate runs as a
// plain daemon in the gateway on N Services from a manifests directory; only the last
// Service (last in edgegate's sorted rule layout) has the backend as its endpoints. Once
// the kernel holds all N Services, the client connects, interleaved in batches with the
// same code, to three destinations:
//
//   - VIP: the last Service's ClusterIP, through edgegate's rules;
//   - Direct: the backend's address through the gateway, matching no Service (in iptables
//     mode the packet still walks the SERVICES chain, as all traffic does there);
//   - Bare: the backend through the router, where no rule at all is walked: the physical
//     limit of the topology.
//
// Connection setup is connect() until established: the SYN is the packet that walks the
// rules, later packets only conntrack. The Reply figures add the first request's round
// trip. Every figure comes from the same kernel, machine and moment; only ratios between
// them mean something across machines.
package dataplane

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Options describe a run.
type Options struct {
	// EdgegateBin is the daemon (bin/edgegate, make build): run on the host, and /init of
	// the guest's firmware.
	EdgegateBin string
	// Sizes are the Service counts (default 1000, 10000, 30000).
	Sizes []int
	// Modes: "nftables" and "iptables" are measured on the host; "ipvs" in the QEMU
	// guest, together with nftables in the same guest for comparison (default all three).
	Modes []string
	// Log gets progress lines, the guest's console among them; nil discards them.
	Log io.Writer
	// Dir is scratch (default a temporary directory, removed afterwards).
	Dir string

	// Conns is the connections counted per series on the host (default 2000).
	Conns int
	// GuestSizes are the Service counts in the guest (default: Sizes) and GuestConns the
	// connections per series there (default 500): TCG emulation makes every step slower.
	// Measured: ipvs mode's first sync of 30k took 5m08s in the guest (47 s at 10k, 5 s at
	// 1k), nftables' 34 s, and the whole guest run at 30k alone 7m11s.
	GuestSizes []int
	GuestConns int
	// GuestMemoryMiB is the guest's memory (default 2048): the board's 512 MiB is a test
	// gateway's, too small for 30k Services' manifests, daemon and kernel state at once.
	GuestMemoryMiB int
	// GuestTimeout bounds the guest's whole life, boot to power-off (default 20 min; 1k,
	// 10k and 30k Services take about 9.5).
	GuestTimeout time.Duration
	// Load, when set, adds the load runs to every measurement, on the host and in the
	// guest; the guest then also measures nftables mode with the fast path
	// (GuestModes' default).
	Load *LoadOptions
	// GuestModes are the modes measured in the guest (default ipvs and nftables, and
	// nftables+fast-path with Load).
	GuestModes []string
}

// Latency summarises one series.
type Latency struct {
	P50, P99, Mean time.Duration
}

// Result is one measurement: one mode, one size, one kernel.
type Result struct {
	Where    string // "host" or "qemu-x86_64 guest"
	Mode     string // nftables, iptables or ipvs
	Services int    // Services installed
	Conns    int    // connections per series (each series had as many)

	// Connection setup: connect() until established.
	Direct Latency // to the backend through the gateway, matching no Service
	VIP    Latency // to the last Service's VIP through edgegate's rules
	Bare   Latency // to the backend through the rule-free router: the physical limit

	// Connection setup plus the first request's round trip.
	DirectReply, VIPReply, BareReply Latency

	// Failed counts failed connections, all series together (at most 1%, else the
	// measurement is an error).
	Failed int
	// Programmed is the time from edgegate's start until it logged the full sync that
	// wrote every Service (the kernel, probed then, held them all).
	Programmed time.Duration
	// Load is the load runs' figures, when they ran (LocalOptions.Load).
	Load *Load `json:",omitempty"`
}

// Ratio is a/b for each figure.
func Ratio(a, b Latency) (p50, p99, mean float64) {
	div := func(x, y time.Duration) float64 {
		if y == 0 {
			return 0
		}
		return float64(x) / float64(y)
	}
	return div(a.P50, b.P50), div(a.P99, b.P99), div(a.Mean, b.Mean)
}

func (r Result) String() string {
	p50, p99, mean := Ratio(r.VIP, r.Direct)
	b50, _, _ := Ratio(r.VIP, r.Bare)
	return fmt.Sprintf("connect p50/p99/mean: vip %v/%v/%v, direct %v/%v/%v, bare %v/%v/%v; vip/direct %.2f/%.2f/%.2f, vip/bare p50 %.2f; %d failed",
		us(r.VIP.P50), us(r.VIP.P99), us(r.VIP.Mean), us(r.Direct.P50), us(r.Direct.P99), us(r.Direct.Mean),
		us(r.Bare.P50), us(r.Bare.P99), us(r.Bare.Mean), p50, p99, mean, b50, r.Failed)
}

func us(d time.Duration) time.Duration { return d.Round(time.Microsecond) }

// Run measures the host's modes, then the guest's, and returns every result, host first.
// It needs root (namespaces, rules). A failure stops the run; the results measured before
// it are returned with the error.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if len(o.Sizes) == 0 {
		o.Sizes = []int{1000, 10000, 30000}
	}
	if len(o.Modes) == 0 {
		o.Modes = []string{"nftables", "iptables", "ipvs"}
	}
	if len(o.GuestSizes) == 0 {
		o.GuestSizes = o.Sizes
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("dataplane: needs root (network namespaces, rules)")
	}
	var host []string
	for _, m := range o.Modes {
		switch m {
		case "nftables", "iptables":
			host = append(host, m)
		case "ipvs":
		default:
			return nil, fmt.Errorf("dataplane: Options.Modes: %q is not nftables, iptables or ipvs", m)
		}
	}
	eg, err := filepath.Abs(o.EdgegateBin)
	if err != nil {
		return nil, fmt.Errorf("dataplane: Options.EdgegateBin: %w", err)
	}
	if _, err := os.Stat(eg); err != nil {
		return nil, fmt.Errorf("dataplane: Options.EdgegateBin: %w (make build)", err)
	}
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "edgegate-dataplane-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(o.Dir)
	}

	var out []Result
	if len(host) > 0 {
		t0 := time.Now()
		res, err := MeasureHere(ctx, LocalOptions{
			Where: "host", EdgegateBin: eg, Modes: host, Sizes: o.Sizes, Conns: o.Conns,
			Dir: filepath.Join(o.Dir, "host"), Log: o.Log, Load: o.Load,
		})
		out = append(out, res...)
		if err != nil {
			return out, err
		}
		fmt.Fprintf(o.Log, "host: %s at %v Services done in %v\n", host, o.Sizes, since(t0))
	}
	if slices.Contains(o.Modes, "ipvs") {
		t0 := time.Now()
		res, err := runGuest(ctx, o, eg)
		out = append(out, res...)
		if err != nil {
			return out, err
		}
		fmt.Fprintf(o.Log, "guest: ipvs and nftables at %v Services done in %v, build and boot included\n", o.GuestSizes, since(t0))
	}
	return out, nil
}
