package dataplane

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Load: what a gateway's users feel at peak, measured after the connection-setup series
// on the same topology and rules: bytes per second through a Service's LoadBalancer IP
// over several TCP streams, and new connections per second to the LoadBalancer IP and the
// node port from many source ports, with the setup latency under that load; each next to
// the same load through the rule-free router (bare forwarding, the physical limit).
//
// The streams and connections are the harness's own Go code in both kernels (the guest has
// no iperf3): TCP sockets of the client namespace writing 128 KiB at a time to a sink in
// the backend namespace, which counts what it received and sends the count back when the
// stream ends. Forwarding runs in softirq, on whatever core the packets arrive, so CPU is
// read system-wide from /proc/stat over each run: "CPU per Gbit/s" is the busy cores
// (user, system, irq, softirq) per Gbit/s carried, every process on the machine included.

// LoadOptions shape the load runs.
type LoadOptions struct {
	// Streams are the parallel TCP streams of a throughput run, Duration each run's length.
	Streams  int
	Duration time.Duration
	// Workers connect in parallel in a connection-rate run.
	Workers int
	// Rounds: each series runs this many times, interleaved (default 3); figures are medians.
	Rounds int
}

func (o LoadOptions) withDefaults() LoadOptions {
	if o.Streams == 0 {
		o.Streams = 4
	}
	if o.Duration == 0 {
		o.Duration = 3 * time.Second
	}
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	return o
}

// Throughput is one throughput run.
type Throughput struct {
	Gbps       float64 // payload bits per second, in Gbit/s
	CPUPerGbps float64 // busy cores per Gbit/s
	Streams    int
}

// ConnRate is one connection-rate run: new connections per second and their setup
// latency (connect() to established) under that load.
type ConnRate struct {
	PerSecond      float64
	P50, P99, P999 time.Duration
	Conns, Failed  int
	setups         []time.Duration // every connection's, for merging rounds
}

// Load is the load measured through one gateway configuration.
type Load struct {
	LB, Bare                          Throughput // through the LoadBalancer IP; through the rule-free router
	ConnsLB, ConnsNodePort, ConnsBare ConnRate
}

// Ratio is a figure over the same figure of bare forwarding (0 without one).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// LBOverBare are the LoadBalancer IP's throughput and connection rate as shares of bare
// forwarding's.
func (l Load) LBOverBare() (throughput, conns float64) {
	return ratio(l.LB.Gbps, l.Bare.Gbps), ratio(l.ConnsLB.PerSecond, l.ConnsBare.PerSecond)
}

func (t Throughput) String() string {
	return fmt.Sprintf("%.2f Gbit/s over %d streams, %.2f cores per Gbit/s", t.Gbps, t.Streams, t.CPUPerGbps)
}

func (c ConnRate) String() string {
	return fmt.Sprintf("%.0f conns/s, setup p50 %v p99 %v p99.9 %v, %d failed of %d",
		c.PerSecond, us(c.P50), us(c.P99), us(c.P999), c.Failed, c.Conns+c.Failed)
}

// measureLoad runs the throughput and connection-rate runs in rounds (o.Rounds), bare and
// through the gateway alternating with the order rotating each round, so that whatever else
// changes on the machine meanwhile (another process, a TCG guest's host) hits every series
// alike; each figure is the median of its rounds, latencies are over every round's
// connections.
func measureLoad(ctx context.Context, client node, lb, nodePort, bare netip.AddrPort, o LoadOptions) (Load, error) {
	o = o.withDefaults()
	tps := []*loadSeries[Throughput]{{name: "bare", dst: bare}, {name: "LoadBalancer IP " + lb.String(), dst: lb}}
	crs := []*loadSeries[ConnRate]{{name: "bare", dst: bare}, {name: "LoadBalancer IP " + lb.String(), dst: lb},
		{name: "node port " + nodePort.String(), dst: nodePort}}
	for round := range o.Rounds {
		for k := range tps {
			s := tps[(round+k)%len(tps)]
			t, err := throughput(ctx, client, s.dst, o)
			if err != nil {
				return Load{}, fmt.Errorf("throughput, %s: %w", s.name, err)
			}
			s.runs = append(s.runs, t)
		}
		for k := range crs {
			s := crs[(round+k)%len(crs)]
			c, err := connRate(ctx, client, s.dst, o)
			if err != nil {
				return Load{}, fmt.Errorf("connection rate, %s: %w", s.name, err)
			}
			s.runs = append(s.runs, c)
		}
	}
	return Load{Bare: medianThroughput(tps[0].runs), LB: medianThroughput(tps[1].runs),
		ConnsBare: mergeRates(crs[0].runs), ConnsLB: mergeRates(crs[1].runs), ConnsNodePort: mergeRates(crs[2].runs)}, nil
}

// loadSeries is one destination of a kind of load run, and its rounds.
type loadSeries[R any] struct {
	name string
	dst  netip.AddrPort
	runs []R
}

// medianThroughput is the run with the median Gbit/s.
func medianThroughput(runs []Throughput) Throughput {
	slices.SortFunc(runs, func(a, b Throughput) int { return cmp.Compare(a.Gbps, b.Gbps) })
	return runs[len(runs)/2]
}

// mergeRates is the median rate of the runs, with the latency percentiles over all their
// connections.
func mergeRates(runs []ConnRate) ConnRate {
	var out ConnRate
	var setups []time.Duration
	rates := make([]float64, len(runs))
	for i, r := range runs {
		rates[i] = r.PerSecond
		out.Conns += r.Conns
		out.Failed += r.Failed
		setups = append(setups, r.setups...)
	}
	slices.Sort(rates)
	slices.Sort(setups)
	out.PerSecond = rates[len(rates)/2]
	if len(setups) > 0 {
		out.P50, out.P99, out.P999 = rank(setups, 0.50), rank(setups, 0.99), rank(setups, 0.999)
	}
	return out
}

// sinkMagic starts a throughput stream; what the backend's port gets otherwise is a
// connection-setup exchange (request).
var sinkMagic = []byte("sink\n")

// throughput runs o.Streams streams to dst for o.Duration.
func throughput(ctx context.Context, client node, dst netip.AddrPort, o LoadOptions) (Throughput, error) {
	conns := make([]net.Conn, o.Streams)
	for i := range conns {
		err := client.Do(func() error {
			var err error
			conns[i], err = (&net.Dialer{Timeout: connectTimeout}).DialContext(ctx, "tcp4", dst.String())
			return err
		})
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return Throughput{}, err
		}
	}
	cpu0, err := readCPU()
	if err != nil {
		return Throughput{}, err
	}
	start := time.Now()
	stop := start.Add(o.Duration)
	got := make([]uint64, o.Streams)
	errs := make([]error, o.Streams)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			defer c.Close()
			got[i], errs[i] = stream(c, stop)
		})
	}
	wg.Wait()
	took := time.Since(start)
	cpu1, err := readCPU()
	if err != nil {
		return Throughput{}, err
	}
	var total uint64
	for i := range got {
		if errs[i] != nil {
			return Throughput{}, fmt.Errorf("stream %d: %w", i+1, errs[i])
		}
		total += got[i]
	}
	gbps := float64(total) * 8 / took.Seconds() / 1e9
	busy := cpu1.busy - cpu0.busy
	return Throughput{Gbps: gbps, CPUPerGbps: ratio(busy/took.Seconds(), gbps), Streams: o.Streams}, nil
}

// stream writes to c until stop, then half-closes it and returns the count the sink read.
func stream(c net.Conn, stop time.Time) (uint64, error) {
	if _, err := c.Write(sinkMagic); err != nil {
		return 0, err
	}
	buf := bytes.Repeat([]byte("edgegate"), 128<<10/8)
	_ = c.SetWriteDeadline(stop)
	for time.Now().Before(stop) {
		if _, err := c.Write(buf); err != nil {
			if os.IsTimeout(err) {
				break
			}
			return 0, err
		}
	}
	_ = c.SetWriteDeadline(time.Time{})
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var n [8]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return 0, fmt.Errorf("the sink's count: %w", err)
	}
	return binary.BigEndian.Uint64(n[:]), nil
}

// sink reads a stream to its end and answers with the count of bytes it read.
func sink(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	n, err := io.Copy(io.Discard, c)
	if err != nil {
		return
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	_, _ = c.Write(b[:])
}

// connRate has o.Workers threads of the client namespace connect to dst back to back for
// o.Duration, each connection a full exchange ended by a reset (dial).
func connRate(ctx context.Context, client node, dst netip.AddrPort, o LoadOptions) (ConnRate, error) {
	var mu sync.Mutex
	var setups []time.Duration
	var r ConnRate
	var firstErr error
	start := time.Now()
	stop := start.Add(o.Duration)
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Go(func() {
			var mine []time.Duration
			failed := 0
			var last error
			err := client.Do(func() error {
				for time.Now().Before(stop) && ctx.Err() == nil {
					s, err := dial(dst)
					if err != nil {
						failed++
						last = err
						continue
					}
					mine = append(mine, s.connect)
				}
				return nil
			})
			mu.Lock()
			defer mu.Unlock()
			setups = append(setups, mine...)
			r.Failed += failed
			if firstErr == nil {
				firstErr = cmp.Or(err, last)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	r.Conns = len(setups)
	if r.Conns == 0 {
		return r, fmt.Errorf("no connection in %v: %v", took.Round(time.Millisecond), firstErr)
	}
	if float64(r.Failed) > maxFailedShare*float64(r.Conns+r.Failed) {
		return r, fmt.Errorf("%d of %d connections failed, the last: %v", r.Failed, r.Conns+r.Failed, firstErr)
	}
	slices.Sort(setups)
	r.PerSecond = float64(r.Conns) / took.Seconds()
	r.P50, r.P99, r.P999 = rank(setups, 0.50), rank(setups, 0.99), rank(setups, 0.999)
	r.setups = setups
	return r, nil
}

// cpuTimes is the machine's CPU time from /proc/stat's "cpu" line, in seconds.
type cpuTimes struct{ busy float64 }

func readCPU() (cpuTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return cpuTimes{}, fmt.Errorf("/proc/stat: first line %q", line)
	}
	var busy float64
	// user nice system idle iowait irq softirq steal: all but idle and iowait are busy.
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += float64(n)
	}
	// USER_HZ is 100 on every Linux this runs on.
	return cpuTimes{busy: busy / 100}, nil
}
