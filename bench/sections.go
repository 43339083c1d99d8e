package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/edgegate/edgegate/bench/boot"
	"github.com/edgegate/edgegate/bench/dataplane"
)

// dataPlaneSections measures connection setup through edgegate's rules against the same
// path without them (bench/dataplane) and adds one section per kernel. A failure is
// reported in the table with what was measured before it: the control-plane figures of
// the run stay valid.
func dataPlaneSections(ctx context.Context, r *report, edgegate string, sizes []int, modes []string, log io.Writer) {
	res, err := dataplane.Run(ctx, dataplane.Options{EdgegateBin: edgegate, Sizes: sizes, Modes: modes, Log: log,
		Load: &dataplane.LoadOptions{}})
	sections := perKernel(r, "data plane (%s): TCP connection setup, connect() to established, p50 / p99 / mean",
		[]string{"VIP", "direct", "bare", "VIP/direct", "VIP/bare", "conns", "programmed"},
		"VIP: to the last Service's ClusterIP through edgegate's rules; direct: to the backend through the same",
		"gateway, matching no Service; bare: through a twin gateway with no rules at all (the physical limit).",
		"Ratios are p50 / p99 / mean; series interleaved in batches of 20 so load changes hit all three.")
	for _, x := range res {
		s := sections(x.Where)
		p50, p99, mean := dataplane.Ratio(x.VIP, x.Direct)
		b50, b99, bmean := dataplane.Ratio(x.VIP, x.Bare)
		s.row(fmt.Sprintf("%s, %d Services", x.Mode, x.Services),
			latency(x.VIP), latency(x.Direct), latency(x.Bare),
			fmt.Sprintf("%.2f / %.2f / %.2f", p50, p99, mean), fmt.Sprintf("%.2f / %.2f / %.2f", b50, b99, bmean),
			fmt.Sprintf("%d (%d failed)", x.Conns, x.Failed), x.Programmed.Round(100*time.Millisecond).String())
	}
	loadSections(r, res)
	if err != nil {
		s := r.add("data plane: stopped", "")
		s.Notes = []string{fmt.Sprintf("the data-plane measurement failed: %v", err)}
	}
}

// perKernel returns the section of a kernel ("host", "qemu-x86_64 guest"), added to r the
// first time it is asked for: title has one %s for the kernel.
func perKernel(r *report, title string, columns []string, notes ...string) func(where string) *section {
	byWhere := map[string]*section{}
	return func(where string) *section {
		s := byWhere[where]
		if s == nil {
			s = r.add(fmt.Sprintf(title, where), columns...)
			s.Notes = notes
			byWhere[where] = s
		}
		return s
	}
}

// loadSections adds the load runs' figures, one section per kernel.
func loadSections(r *report, res []dataplane.Result) {
	sections := perKernel(r, "data plane under load (%s): through the LoadBalancer IP / bare forwarding",
		[]string{"Gbit/s", "LB/bare", "cores per Gbit/s", "new conns/s (LB, node port, bare)", "LB/bare", "setup p50 / p99 / p99.9 (LB)", "(bare)"},
		"Gbit/s: 4 TCP streams for 3 s to the last Service's LoadBalancer IP, and to the backend through the",
		"rule-free router (bare); cores per Gbit/s: the whole machine's busy CPU (softirq included) per Gbit/s.",
		"new conns/s: 8 threads connecting back to back for 3 s, each connection an exchange ended by a reset.",
		"Every series runs 3 times, interleaved; figures are medians, latencies over all rounds' connections.")
	for _, x := range res {
		l := x.Load
		if l == nil {
			continue
		}
		s := sections(x.Where)
		tp, cr := l.LBOverBare()
		us := func(c dataplane.ConnRate) string {
			return fmt.Sprintf("%d / %d / %d µs", c.P50.Microseconds(), c.P99.Microseconds(), c.P999.Microseconds())
		}
		s.row(fmt.Sprintf("%s, %d Services", x.Mode, x.Services),
			fmt.Sprintf("%.2f / %.2f", l.LB.Gbps, l.Bare.Gbps), fmt.Sprintf("%.2f", tp),
			fmt.Sprintf("%.2f / %.2f", l.LB.CPUPerGbps, l.Bare.CPUPerGbps),
			fmt.Sprintf("%.0f, %.0f, %.0f", l.ConnsLB.PerSecond, l.ConnsNodePort.PerSecond, l.ConnsBare.PerSecond),
			fmt.Sprintf("%.2f", cr), us(l.ConnsLB), us(l.ConnsBare))
	}
}

// bootSection boots the firmware of every QEMU board (bench/boot) and adds its phases.
func bootSection(ctx context.Context, r *report, log io.Writer) {
	res, err := boot.Run(ctx, boot.Options{Log: log})
	if len(res) > 0 {
		s := r.add(fmt.Sprintf("boot: seconds from QEMU's start, %d Services in %s mode", res[0].Services, res[0].Mode), boot.Columns...)
		for _, x := range res {
			var cells []string
			for _, c := range boot.Columns {
				if d, ok := x.At(c); ok {
					cells = append(cells, fmt.Sprintf("%.2f", d.Seconds()))
				} else {
					cells = append(cells, "-")
				}
			}
			s.row(x.Board, cells...)
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %s; kernel %s; first full sync %v", x.Board, x.Emulation, x.Kernel, x.Sync.Round(10*time.Millisecond)))
		}
	}
	if err != nil {
		s := r.add("boot: stopped", "")
		s.Notes = []string{fmt.Sprintf("the boot measurement failed: %v", err)}
	}
}

func latency(l dataplane.Latency) string {
	us := func(d time.Duration) string { return fmt.Sprintf("%d", d.Microseconds()) }
	return us(l.P50) + " / " + us(l.P99) + " / " + us(l.Mean) + " µs"
}
