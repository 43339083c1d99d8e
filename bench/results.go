package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"time"
)

// newReport starts the report with what it ran on and what it compared.
func (h *harness) newReport(began time.Time) *report {
	var progs []string
	for _, p := range h.programs {
		progs = append(progs, p.Name)
	}
	minSync := "both programs' default (1s): kube-proxy waits 1s after each sync; edgegate allows one sync a second on average, two at once"
	if h.minSync != "" {
		minSync = h.minSync + " for both (-min-sync-period)"
	}
	r := &report{
		Title: "edgegate vs upstream kube-proxy: control plane (full sync, incremental, memory), data plane, boot",
		Header: [][2]string{
			{"date", began.UTC().Format(time.RFC3339)},
			{"kernel", kernel()},
			{"CPU", cpu()},
			{"memory", memory()},
			{"edgegate", version(h.edgegateBin)},
			{"kube-proxy", version(h.kubeProxyBin)},
			{"kube-apiserver", version(h.bins.APIServer)},
			{"compared", strings.Join(progs, ", ") + " in " + strings.Join(h.modes, ", ") + " mode"},
			{"min sync period", minSync},
		},
		Notes: []string{
			"How it was measured (bench/README.md has the details):",
			"- Each program runs alone, in a fresh network namespace, against the same apiserver holding",
			"  every object before it starts; both get the same credentials and their default tuning.",
			"- \"rules in kernel\": the harness polls the namespace's nftables generation over netlink every",
			fmt.Sprintf("  %v and, at each commit, counts the dispatched service ports (nftables: service-ips", pollEvery),
			"  elements; iptables: nat KUBE-SERVICES / EG-SERVICES jumps to a service chain) and checks that",
			"  a sample of endpoints is in its service's dispatch. iptables mode is iptables-nft for both,",
			"  so the same probe reads it.",
			"- \"its sync done\": its own sync_proxy_rules_last_timestamp_seconds, minus the start.",
			"- CPU: utime+stime+cutime+cstime of the process (kube-proxy's nft and iptables-restore",
			"  children included once waited for). RSS: the program's process only, not its children.",
			"- incremental: an EndpointSlice update adding or removing one endpoint, once a second, each on",
			"  another Service; latency from just before the Update call (also the last-change-trigger-time",
			"  stamp) to the probe seeing the endpoint enter or leave its service's dispatch (the service",
			"  chain's jump, or its map's verdict or address . port). \"the write itself\": the Update",
			"  call's own duration (apiserver and etcd), inside write → kernel for both programs.",
			"- \"its metrics\" quantiles are estimated from network_programming_duration_seconds buckets;",
			fmt.Sprintf("  both use kube-proxy's buckets, the smallest %v, so below it they only say \"≤%v\".", firstBucket, firstBucket),
			"- Ratios are edgegate / kube-proxy: below 1 edgegate is faster or smaller.",
		},
	}
	return r
}

// section adds one size and mode's table.
func (h *harness) section(sz size, mode string, created time.Duration, want int, results map[string]result, failed map[string]string) {
	s := h.rep.add(fmt.Sprintf("%d Services × %d endpoints, %s mode (objects created in %v)",
		sz.Services, sz.Endpoints, mode, created.Round(100*time.Millisecond)),
		"edgegate", "kube-proxy", "eg/kp")
	names := [2]string{edgegate.Name, kubeProxy.Name}
	var res [2]result
	var ok [2]bool
	for i, n := range names {
		res[i], ok[i] = results[n]
	}
	// row adds a row from one value per program; whole says the row means something for a
	// run that did not finish its full sync. ratio gets both values' numbers.
	type value struct {
		text string
		num  float64
	}
	row := func(name string, whole bool, ratioToo bool, f func(r result) value) {
		var cells [2]string
		var nums [2]float64
		complete := true
		for i := range names {
			switch {
			case !ok[i] && failed[names[i]] != "":
				cells[i], complete = "failed", false
			case !ok[i]:
				cells[i], complete = "-", false
			case res[i].Unfinished && !whole:
				cells[i], complete = "-", false
			default:
				v := f(res[i])
				cells[i], nums[i] = v.text, v.num
			}
		}
		r := ""
		if ratioToo && complete {
			r = ratio(nums[0], nums[1])
		}
		s.row(name, cells[0], cells[1], r)
	}
	dur := func(d time.Duration) value { return value{fmtDur(d), d.Seconds()} }
	mib := func(kib int64) value { return value{fmt.Sprintf("%.1f MiB", float64(kib)/1024), float64(kib)} }
	plain := func(v any) value { return value{text: fmt.Sprint(v)} }
	kernel := func(mean *float64) value { // a metric of edgegate's only
		if mean == nil {
			return value{text: "-"}
		}
		return dur(secs(*mean))
	}

	// The full sync's time, bounded where one did not finish: the ratio is then a bound too.
	programmed := func(i int) string {
		if res[i].Unfinished {
			return fmt.Sprintf(">%v (%d of %d)", h.limit, res[i].Dispatched, want)
		}
		return fmtDur(res[i].Programmed)
	}
	if ok[0] && ok[1] {
		r := ratio(res[0].Programmed.Seconds(), res[1].Programmed.Seconds())
		switch {
		case res[0].Unfinished && res[1].Unfinished:
			r = ""
		case res[1].Unfinished:
			r = "<" + r
		case res[0].Unfinished:
			r = ">" + r
		}
		s.row("full sync: start → rules in kernel (probe)", programmed(0), programmed(1), r)
	} else {
		row("full sync: start → rules in kernel (probe)", true, false, func(r result) value { return dur(r.Programmed) })
	}
	row("full sync: start → its sync done (its metrics)", false, true, func(r result) value { return dur(r.MetricSynced) })
	row("sync duration, mean (its metrics)", false, true, func(r result) value { return dur(secs(r.SyncSeconds)) })
	row("  of which the kernel's part (its metrics)", false, false, func(r result) value { return kernel(r.Kernel) })
	row("syncs by then (its metrics)", false, false, func(r result) value { return plain(r.SyncCount) })
	row("CPU, start → its sync done (incl. children)", true, true, func(r result) value {
		if r.Unfinished {
			return value{"≥" + fmtDur(r.CPU), math.NaN()} // by the limit
		}
		return dur(r.CPU)
	})
	row("service ports in the kernel", true, false, func(r result) value { return plain(r.Dispatched) })
	row("tables holding the dispatch", false, false, func(r result) value { return plain(r.Tables) })
	row(fmt.Sprintf("RSS %v after the full sync (VmRSS)", settle), false, true, func(r result) value { return mib(r.SteadyRSS) })
	row("peak RSS, whole run (VmHWM)", true, true, func(r result) value { return mib(r.PeakRSS) })

	incr := func(name string, ratioToo bool, f func(i *incrResult) value) {
		row(name, false, ratioToo, func(r result) value {
			if r.Incr == nil {
				return value{text: "-"}
			}
			return f(r.Incr)
		})
	}
	if (!ok[0] || res[0].Incr == nil) && (!ok[1] || res[1].Incr == nil) {
		s.Notes = append(s.Notes, h.notes(results, failed)...)
		return
	}
	incr("incremental: changes seen in time (probe)", false, func(i *incrResult) value {
		return plain(fmt.Sprintf("%d of %d", len(i.Latencies), i.Changes))
	})
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.5}, {"p99", 0.99}, {"max", 1}} {
		incr("incremental "+q.name+": write → kernel (probe)", true, func(i *incrResult) value {
			d, censored := i.quantile(q.p)
			if censored {
				return value{">" + fmtDur(changeTimeout), math.Inf(1)}
			}
			return dur(d)
		})
	}
	for _, q := range []struct {
		name string
		p    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		// Part of write → kernel for both programs, neither's doing: no ratio.
		incr("incremental "+q.name+": the write itself (Update call)", false, func(i *incrResult) value {
			if len(i.Writes) == 0 {
				return value{text: "-"}
			}
			return dur(percentile(i.Writes, q.p))
		})
	}
	incr("incremental: observations (its metrics)", false, func(i *incrResult) value { return plain(i.MetricCount) })
	for _, q := range []struct {
		name string
		get  func(i *incrResult) quantile
	}{{"p50", func(i *incrResult) quantile { return i.MetricP50 }}, {"p99", func(i *incrResult) quantile { return i.MetricP99 }}} {
		incr("incremental "+q.name+" (its metrics, estimate)", true, func(i *incrResult) value {
			v := q.get(i)
			if v.Bucket <= firstBucket {
				// Inside the first bucket the estimate says nothing: no ratio.
				return value{fmtQuantile(v), math.NaN()}
			}
			return value{fmtQuantile(v), v.Value.Seconds()}
		})
	}
	incr("incremental: syncs (its metrics)", false, func(i *incrResult) value { return plain(i.Syncs) })
	incr("incremental: sync duration, mean (its metrics)", true, func(i *incrResult) value { return dur(secs(i.SyncSeconds)) })
	incr("  of which the kernel's part (its metrics)", false, func(i *incrResult) value { return kernel(i.Kernel) })
	incr("CPU during the incremental phase", true, func(i *incrResult) value { return dur(i.CPU) })
	s.Notes = append(s.Notes, h.notes(results, failed)...)
}

func (h *harness) notes(results map[string]result, failed map[string]string) []string {
	var out []string
	for _, name := range []string{edgegate.Name, kubeProxy.Name} {
		if failed[name] != "" {
			out = append(out, fmt.Sprintf("%s failed: %s", name, failed[name]))
		}
		if r, ok := results[name]; ok && r.Unfinished {
			out = append(out, fmt.Sprintf("%s did not finish its full sync within %v: stopped then (its CPU and peak RSS are by then)", name, h.limit))
		}
	}
	return out
}

func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return ""
	}
	return fmt.Sprintf("%.3f", a/b)
}

// fmtDur prints a duration with three significant digits or so.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3fs", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d > 0:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	}
	return "0"
}

func fmtQuantile(q quantile) string {
	switch {
	case !q.OK:
		return "-"
	case q.Bucket <= firstBucket:
		return "≤" + fmtDur(firstBucket)
	}
	return "~" + fmtDur(q.Value)
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return "Linux " + strings.TrimSpace(string(b))
}

func cpu() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	n, model := 0, ""
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			n++
			model = strings.TrimSpace(v)
		}
	}
	return fmt.Sprintf("%d × %s", n, model)
}

func memory() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.Join(strings.Fields(first), " ")
}

func version(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "(unknown version)"
	}
	return strings.TrimSpace(string(out))
}
