// Command dataplane runs the data-plane benchmark alone (package dataplane) and prints its
// table: connection setup through a service VIP against the same connection without one,
// per mode and size, on the host and in the QEMU guest. Root only.
//
//	cd bench && go run ./cmd/dataplane -edgegate ../bin/edgegate [-sizes 1000,10000,30000] [-modes nftables,iptables,ipvs]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/edgegate/edgegate/bench/dataplane"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dataplane:", err)
		os.Exit(1)
	}
}

func run() error {
	edgegate := flag.String("edgegate", "../bin/edgegate", "the edgegate binary (make build)")
	sizes := flag.String("sizes", "1000,10000,30000", "Service counts, comma-separated")
	modes := flag.String("modes", "nftables,iptables,ipvs", "modes, comma-separated (ipvs runs in a QEMU guest, with nftables there too)")
	conns := flag.Int("conns", 2000, "connections per series on the host")
	guestSizes := flag.String("guest-sizes", "", "Service counts in the guest (default: those of -sizes)")
	guestConns := flag.Int("guest-conns", 500, "connections per series in the guest")
	dir := flag.String("dir", "", "scratch directory, kept (default a temporary one, removed)")
	quiet := flag.Bool("q", false, "no progress lines on stderr")
	load := flag.Bool("load", false, "add the load runs: throughput through the LoadBalancer IP and bare, new connections per second (the guest also measures nftables with --fast-path)")
	var lo dataplane.LoadOptions
	flag.IntVar(&lo.Streams, "load-streams", 4, "load: parallel TCP streams")
	flag.DurationVar(&lo.Duration, "load-duration", 3*time.Second, "load: length of each run")
	flag.IntVar(&lo.Rounds, "load-rounds", 3, "load: runs of each series, interleaved; figures are medians")
	flag.IntVar(&lo.Workers, "load-workers", 8, "load: parallel connecting threads")
	flag.Parse()

	o := dataplane.Options{EdgegateBin: *edgegate, Modes: strings.Split(*modes, ","), Conns: *conns, GuestConns: *guestConns, Dir: *dir, Log: os.Stderr}
	if *quiet {
		o.Log = io.Discard
	}
	if *load {
		o.Load = &lo
	}
	var err error
	if o.Sizes, err = ints(*sizes); err != nil {
		return fmt.Errorf("-sizes: %w", err)
	}
	if *guestSizes != "" {
		if o.GuestSizes, err = ints(*guestSizes); err != nil {
			return fmt.Errorf("-guest-sizes: %w", err)
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	t0 := time.Now()
	results, err := dataplane.Run(ctx, o)
	Table(os.Stdout, results)
	fmt.Printf("took %v\n", time.Since(t0).Round(time.Second))
	return err
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, errors.New("sizes must be at least 1")
		}
		out = append(out, n)
	}
	return out, nil
}

// Table prints the results: connection setup p50/p99/mean in µs for the VIP, the backend
// through the gateway (direct) and through the rule-free router (bare), and the ratios.
func Table(w io.Writer, results []dataplane.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "where\tmode\tservices\tconns\tvip p50/p99/mean µs\tdirect p50/p99/mean µs\tbare p50/p99/mean µs\tvip/direct p50/p99/mean\tvip/bare p50\tfirst reply vip/direct p50\tprogrammed\t")
	for _, r := range results {
		d50, d99, dm := dataplane.Ratio(r.VIP, r.Direct)
		b50, _, _ := dataplane.Ratio(r.VIP, r.Bare)
		rr, _, _ := dataplane.Ratio(r.VIPReply, r.DirectReply)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%.2f/%.2f/%.2f\t%.2f\t%.2f\t%v\t\n",
			r.Where, r.Mode, r.Services, r.Conns, lat(r.VIP), lat(r.Direct), lat(r.Bare), d50, d99, dm, b50, rr,
			r.Programmed.Round(10*time.Millisecond))
	}
	tw.Flush()
	LoadTable(w, results)
}

// LoadTable prints the load runs' figures, each with its ratio to bare forwarding in the
// same kernel.
func LoadTable(w io.Writer, results []dataplane.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "where\tmode\tservices\tLB Gbit/s\tbare Gbit/s\tLB/bare\tLB cores/Gbit\tbare cores/Gbit\tLB conns/s\tnode port conns/s\tbare conns/s\tLB/bare\tLB setup p50/p99/p99.9 µs\tbare setup p50/p99/p99.9 µs\t")
	for _, r := range results {
		l := r.Load
		if l == nil {
			continue
		}
		tp, cr := l.LBOverBare()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.2f\t%s\t%s\t\n",
			r.Where, r.Mode, r.Services, l.LB.Gbps, l.Bare.Gbps, tp, l.LB.CPUPerGbps, l.Bare.CPUPerGbps,
			l.ConnsLB.PerSecond, l.ConnsNodePort.PerSecond, l.ConnsBare.PerSecond, cr, setup(l.ConnsLB), setup(l.ConnsBare))
	}
	tw.Flush()
}

func setup(c dataplane.ConnRate) string {
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	return us(c.P50) + "/" + us(c.P99) + "/" + us(c.P999)
}

func lat(l dataplane.Latency) string {
	us := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 0, 64)
	}
	return us(l.P50) + "/" + us(l.P99) + "/" + us(l.Mean)
}
