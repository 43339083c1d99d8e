package dataplane

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/edgegate/edgegate/bench/dataplane/services"
)

// LocalOptions describe measurements in the kernel this process runs on: the host's, or
// the QEMU guest's (the guest program calls MeasureHere).
type LocalOptions struct {
	// Where names the kernel in the results: "host", "qemu-x86_64 guest".
	Where string
	// EdgegateBin is the daemon to run in the gateway namespace.
	EdgegateBin string
	// Modes and Sizes: every size is measured in every mode, sizes in order, the modes of
	// one size one after the other (so they are compared under the same conditions).
	Modes []string
	Sizes []int
	// Conns is the connections counted per series (default 2000).
	Conns int
	// MaxMeasure bounds one measurement's counted connections in time (default 2 min); it
	// stops at the end of a round with fewer connections, which Result.Conns says.
	MaxMeasure time.Duration
	// ProgramTimeout bounds the wait for edgegate to program every Service (default 5 min).
	ProgramTimeout time.Duration
	// Dir is scratch: manifests, edgegate's state and logs.
	Dir string
	// Log gets progress lines; nil discards them.
	Log io.Writer
	// Result, when set, gets each result as soon as it is measured.
	Result func(Result)
	// Load, when set, adds the load runs (load.go) to every measurement.
	Load *LoadOptions
}

// endpointsPerService is how many endpoints every Service has: "a few", as a real
// Service, so the target's DNAT picks among several.
const endpointsPerService = 2

// Measurement shape: batches short enough that the series alternate tens of times per
// second, a warm-up that fills neighbour and route caches on every path.
const (
	batchSize = 20
	warmup    = 20
)

// maxFailedShare is the share of failed connections (of all series) above which a
// measurement is an error rather than a figure: the setup is broken, not slow.
const maxFailedShare = 0.01

// MeasureHere measures every size in every mode, in this kernel, and returns the results
// in order. It stops at the first error and returns the results measured before it.
func MeasureHere(ctx context.Context, o LocalOptions) ([]Result, error) {
	if o.Conns == 0 {
		o.Conns = 2000
	}
	if o.MaxMeasure == 0 {
		o.MaxMeasure = 2 * time.Minute
	}
	if o.ProgramTimeout == 0 {
		o.ProgramTimeout = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.EdgegateBin == "" {
		return nil, fmt.Errorf("dataplane: LocalOptions.EdgegateBin is empty")
	}
	if _, err := os.Stat(o.EdgegateBin); err != nil {
		return nil, fmt.Errorf("dataplane: LocalOptions.EdgegateBin: %w", err)
	}
	for _, m := range o.Modes {
		if _, _, err := parseMode(m); err != nil {
			return nil, fmt.Errorf("dataplane: LocalOptions.Modes: %w", err)
		}
	}
	var out []Result
	for _, n := range o.Sizes {
		dir := filepath.Join(o.Dir, "manifests-"+strconv.Itoa(n))
		t0 := time.Now()
		if _, err := services.WriteDir(dir, services.Spec{
			Count: n, Endpoints: endpointsPerService,
			Target:       map[int][]netip.Addr{n - 1: backendAddrs},
			LoadBalancer: map[int]services.LoadBalancer{n - 1: {IP: loadBalancerIP, NodePort: nodePort}},
		}); err != nil {
			return out, err
		}
		fmt.Fprintf(o.Log, "%s: wrote %d Services × %d endpoints in %v\n", o.Where, n, endpointsPerService, since(t0))
		for _, mode := range o.Modes {
			r, err := measureOne(ctx, o, mode, n, dir)
			if err != nil {
				return out, fmt.Errorf("%s, %s mode, %d Services: %w", o.Where, mode, n, err)
			}
			out = append(out, r)
			if o.Result != nil {
				o.Result(r)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return out, err
		}
	}
	return out, nil
}

// measureOne is one measurement: a fresh topology, edgegate programming n Services from
// manifests, then the three series interleaved.
func measureOne(ctx context.Context, o LocalOptions, mode string, n int, manifests string) (Result, error) {
	r := Result{Where: o.Where, Mode: mode, Services: n}
	proxyMode, extra, err := parseMode(mode)
	if err != nil {
		return r, err
	}
	topo, err := newTopology()
	if err != nil {
		return r, err
	}
	defer topo.close()
	be, err := startBackend(topo.backend, services.TargetPort)
	if err != nil {
		return r, err
	}
	defer be.close()

	name := fmt.Sprintf("%s-%d", mode, n)
	stateDir := filepath.Join(o.Dir, "state-"+name)
	defer os.RemoveAll(stateDir)
	d, err := startDaemon(topo.gateway, o.EdgegateBin, append(daemonArgs(proxyMode, manifests, stateDir), extra...), filepath.Join(o.Dir, "edgegate-"+name+".log"))
	if err != nil {
		return r, err
	}
	defer func() {
		t0 := time.Now()
		d.stop()
		if proxyMode == "ipvs" {
			if err := dropIPVS(topo.gateway); err != nil {
				fmt.Fprintf(o.Log, "%s: %v\n", o.Where, err)
			}
		}
		fmt.Fprintf(o.Log, "%s: %s: edgegate stopped and its rules dropped in %v\n", o.Where, name, since(t0))
	}()
	if r.Programmed, err = waitProgrammed(ctx, topo.gateway, d, proxyMode, n, o.ProgramTimeout); err != nil {
		return r, err
	}
	took, _ := d.lastFullSync()
	fmt.Fprintf(o.Log, "%s: %s: edgegate programmed all %d Services %v after its start (the full sync took %s; the kernel holds them)\n",
		o.Where, name, n, r.Programmed.Round(time.Millisecond), took)
	if err := waitIdle(ctx, d, 30*time.Second); err != nil {
		fmt.Fprintf(o.Log, "%s: %s: %v; measuring anyway\n", o.Where, name, err)
	}

	vip := netip.AddrPortFrom(services.ClusterIP(n-1), services.Port)
	all := []*series{
		{name: "bare", dst: netip.AddrPortFrom(backendViaRouter, services.TargetPort)},
		{name: "direct", dst: netip.AddrPortFrom(backendAddrs[0], services.TargetPort)},
		{name: "vip " + vip.String(), dst: vip},
	}
	t0 := time.Now()
	if err := measure(ctx, topo.client, all, measureOptions{conns: o.Conns, batch: batchSize, warmup: warmup, maxTime: o.MaxMeasure}); err != nil {
		return r, err
	}
	if err := d.exitError(); err != nil {
		return r, err
	}
	attempted := 0
	for _, s := range all {
		attempted += len(s.samples) + s.failed
		r.Failed += s.failed
		if s.lastErr != nil {
			fmt.Fprintf(o.Log, "%s: %s: %s: %d failed, the last: %v\n", o.Where, name, s.name, s.failed, s.lastErr)
		}
	}
	if float64(r.Failed) > maxFailedShare*float64(attempted) {
		return r, fmt.Errorf("%d of %d connections failed", r.Failed, attempted)
	}
	r.Conns = attempted / len(all)
	bare, direct, viaVIP := all[0].samples, all[1].samples, all[2].samples
	connect := func(s sample) time.Duration { return s.connect }
	reply := func(s sample) time.Duration { return s.reply }
	r.Bare, r.Direct, r.VIP = latency(bare, connect), latency(direct, connect), latency(viaVIP, connect)
	r.BareReply, r.DirectReply, r.VIPReply = latency(bare, reply), latency(direct, reply), latency(viaVIP, reply)
	fmt.Fprintf(o.Log, "%s: %s: %d connections per series in %v: %s\n", o.Where, name, r.Conns, since(t0), r)
	if o.Load != nil {
		t0 = time.Now()
		l, err := measureLoad(ctx, topo.client, netip.AddrPortFrom(loadBalancerIP, services.Port),
			netip.AddrPortFrom(gatewayToClient, nodePort), netip.AddrPortFrom(backendViaRouter, services.TargetPort), *o.Load)
		if err != nil {
			return r, fmt.Errorf("load: %w", err)
		}
		if err := d.exitError(); err != nil {
			return r, err
		}
		r.Load = &l
		tp, cr := l.LBOverBare()
		fmt.Fprintf(o.Log, "%s: %s: load in %v: LB %v; bare %v; LB/bare %.2f\n", o.Where, name, since(t0), l.LB, l.Bare, tp)
		fmt.Fprintf(o.Log, "%s: %s: conns: LB %v; node port %v; bare %v; LB/bare %.2f\n", o.Where, name, l.ConnsLB, l.ConnsNodePort, l.ConnsBare, cr)
	}
	return r, nil
}

// The load runs' Service: the last one, of type LoadBalancer.
var loadBalancerIP = netip.MustParseAddr("203.0.113.80")

const nodePort = 30080

// parseMode reads a measured mode: a proxy mode, or "nftables+fast-path" (nftables mode
// with --fast-path), and returns the proxy mode and the extra flags.
func parseMode(m string) (mode string, extra []string, err error) {
	mode, variant, _ := strings.Cut(m, "+")
	if !slices.Contains([]string{"nftables", "iptables", "ipvs"}, mode) {
		return "", nil, fmt.Errorf("%q is not nftables, iptables or ipvs", m)
	}
	switch variant {
	case "":
	case "fast-path":
		if mode == "ipvs" {
			return "", nil, fmt.Errorf("%q: ipvs mode has no fast path", m)
		}
		extra = []string{"--fast-path"}
	default:
		return "", nil, fmt.Errorf("%q: the only variant is +fast-path", m)
	}
	return mode, extra, nil
}

// waitProgrammed waits until the daemon has logged a full sync and, probed then, the
// gateway's kernel holds want Services in mode; it returns the time from the daemon's start
// to that log line. The kernel is probed only after the line: probing while the daemon
// programs would take CPU from it (the guest has one vCPU) and nftables dumps wait for its
// batch anyway.
func waitProgrammed(ctx context.Context, gw node, d *daemon, mode string, want int, timeout time.Duration) (time.Duration, error) {
	deadline := d.started.Add(timeout)
	probed, have := 0, 0
	for {
		if err := d.exitError(); err != nil {
			return 0, err
		}
		if _, syncs := d.lastFullSync(); syncs > probed {
			at := time.Since(d.started)
			probed = syncs
			n, err := programmedServices(gw, mode)
			if err != nil {
				return 0, err
			}
			switch have = n; {
			case n == want:
				return at, nil
			case n > want:
				return 0, fmt.Errorf("the kernel holds %d Services, want %d", n, want)
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("after %v edgegate had logged %d full syncs and the kernel held %d of %d Services", timeout, probed, have, want)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitIdle waits until the daemon has used no CPU for a second (it is done with the sync's
// aftermath: conntrack cleanup, health checks, garbage collection), at most within.
func waitIdle(ctx context.Context, d *daemon, within time.Duration) error {
	deadline := time.Now().Add(within)
	last, err := d.cpuTime()
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		now, err := d.cpuTime()
		if err != nil {
			return err
		}
		if now-last <= 10*time.Millisecond {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("edgegate still busy %v after programming (%v CPU in the last second)", within, now-last)
		}
		last = now
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
