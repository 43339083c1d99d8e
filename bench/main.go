// Command bench measures edgegate side by side with upstream kube-proxy (issue 10): both
// against one real kube-apiserver (lab/cluster), each in a network namespace of its own that
// the run creates and removes, measured the same way: the time from "all objects exist in the
// apiserver" to "the rules are in the kernel" (probed over netlink, and read from each
// program's own sync metrics), the CPU that took, and peak and steady RSS. It prints one
// table with ratios and writes it to out/bench/results/. Run it with `make bench` (root).
//
// For now only the full sync, one size per run, nftables mode; see README.md for what the
// issue still asks.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/lab/cluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	services := flag.Int("services", 1000, "Services to create")
	endpoints := flag.Int("endpoints", 10, "endpoints per Service (one EndpointSlice each)")
	edgegateBin := flag.String("edgegate", "../bin/edgegate", "the edgegate binary (make build)")
	kubeProxyBin := flag.String("kube-proxy", "", "the kube-proxy binary; default: build.sh's cached build")
	outDir := flag.String("out", "../out/bench/results", "directory of the result files")
	keep := flag.Bool("keep", false, "keep the run's directory (logs, cluster state)")
	only := flag.String("proxies", "edgegate,kube-proxy", "which programs to measure, comma-separated")
	flag.Parse()
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, nftables)")
	}
	if *services < 1 || *endpoints < 1 {
		return errors.New("-services and -endpoints must be at least 1")
	}
	eg, err := filepath.Abs(*edgegateBin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(eg); err != nil {
		return fmt.Errorf("-edgegate: %w (make build)", err)
	}
	kp := *kubeProxyBin
	if kp == "" {
		if kp, err = kubeProxy(); err != nil {
			return err
		}
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	bins, err := cluster.Build(ctx, os.Stderr)
	if err != nil {
		return fmt.Errorf("cluster binaries: %w", err)
	}
	dir, err := os.MkdirTemp("", "edgegate-bench-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "run directory:", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	topo := newTopology(strconv.Itoa(os.Getpid()))
	defer func() {
		if err := topo.remove(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}()
	if err := topo.create(); err != nil {
		return err
	}

	t0 := time.Now()
	c, err := cluster.Launch(ctx, cluster.Options{
		Binaries: bins,
		NetNS:    topo.API,
		Address:  mustAddr(apiAddr),
		Dir:      filepath.Join(dir, "cluster"),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintf(os.Stderr, "apiserver ready in %v at %s (netns %s)\n", time.Since(t0).Round(100*time.Millisecond), c.Server, topo.API)

	// Object creation is the harness's own load, not what is measured: no client-side limit.
	cfg := c.AdminConfig()
	cfg.QPS, cfg.Burst = -1, 0
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	egNode, kpNode := "bench-edgegate", "bench-kube-proxy"
	if err := createNodes(ctx, admin, map[string]string{
		egNode: topo.proxyAddr(topo.EG), kpNode: topo.proxyAddr(topo.KP), otherNode: "10.251.0.200",
	}); err != nil {
		return err
	}
	t0 = time.Now()
	if err := createServices(ctx, admin, *services, *endpoints); err != nil {
		return err
	}
	createTime := time.Since(t0)
	gotSvc, gotEp, err := countObjects(ctx, admin)
	if err != nil {
		return err
	}
	if gotSvc != *services || gotEp != *services**endpoints {
		return fmt.Errorf("apiserver holds %d Services and %d endpoints, want %d and %d", gotSvc, gotEp, *services, *services**endpoints)
	}
	fmt.Fprintf(os.Stderr, "created %d Services × %d endpoints in %v\n", *services, *endpoints, createTime.Round(100*time.Millisecond))

	// Both get the admin's credentials (system:masters), so neither waits on RBAC, and the
	// same tuning: conntrack sysctls left alone (they are the host's), product defaults for
	// everything else (both sync at most once a second).
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(c.AdminToken+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(caFile, c.CAPEM, 0o600); err != nil {
		return err
	}
	proxies := []proxy{
		{
			Name: "edgegate", NetNS: topo.EG, Table: "edgegate", MetricsNS: "edgegate_",
			Log: filepath.Join(dir, "edgegate.log"),
			Argv: []string{eg,
				"--proxy-mode=nftables",
				"--api-server", c.Server, "--token-file", tokenFile, "--ca-file", caFile,
				"--hostname-override", egNode,
				"--node-ip", topo.proxyAddr(topo.EG),
				"--state-dir", filepath.Join(dir, "edgegate-state"),
				"--dashboard-bind-address=",
				"--healthz-bind-address=0.0.0.0:10256",
				"--metrics-bind-address=" + metricsAddress,
				"--conntrack-max-per-core=0",
				"--conntrack-tcp-timeout-established=0",
				"--conntrack-tcp-timeout-close-wait=0",
			},
		},
		{
			Name: "kube-proxy", NetNS: topo.KP, Table: "kube-proxy", MetricsNS: "kubeproxy_",
			Log: filepath.Join(dir, "kube-proxy.log"),
			Argv: []string{kp,
				"--proxy-mode=nftables",
				"--kubeconfig", c.AdminKubeconfig,
				"--hostname-override", kpNode,
				"--healthz-bind-address=0.0.0.0:10256",
				"--metrics-bind-address=" + metricsAddress,
				// 0 leaves nf_conntrack_max alone (it is global, not the namespace's).
				"--conntrack-max-per-core=0",
				"--conntrack-tcp-timeout-established=0",
				"--conntrack-tcp-timeout-close-wait=0",
				// Its default -999 would shield it from the OOM killer on a shared machine.
				"--oom-score-adj=0",
			},
		},
	}
	results := map[string]result{}
	for _, p := range proxies {
		if !slices.Contains(strings.Split(*only, ","), p.Name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "full sync: %s ...\n", p.Name)
		r, err := p.run(ctx, *services)
		if err != nil {
			if *keep {
				fmt.Fprintln(os.Stderr, "logs in", dir)
			}
			return err
		}
		results[p.Name] = r
		fmt.Fprintf(os.Stderr, "full sync: %s programmed in %v\n", p.Name, r.Programmed.Round(time.Millisecond))
	}

	report := table(*services, *endpoints, createTime, results, kp)
	fmt.Print(report)
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	out := filepath.Join(*outDir, fmt.Sprintf("%s-%dx%d.txt", time.Now().UTC().Format("20060102T150405Z"), *services, *endpoints))
	if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "written to", out)
	return nil
}

// kubeProxy returns build.sh's kube-proxy, building it when the pins changed.
func kubeProxy() (string, error) {
	cmd := exec.Command("bash", "build.sh")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("bench/build.sh: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "kube-proxy"), nil
}

// table lays out the results; a program that was not measured (-proxies) shows "-".
func table(services, endpoints int, createTime time.Duration, results map[string]result, kpBin string) string {
	eg, egOK := results["edgegate"]
	kp, kpOK := results["kube-proxy"]
	var b strings.Builder
	fmt.Fprintf(&b, "edgegate vs kube-proxy: full sync, nftables, %d Services × %d endpoints\n", services, endpoints)
	fmt.Fprintf(&b, "machine: %s\n", machine())
	fmt.Fprintf(&b, "kube-proxy: %s; objects created in %v\n\n", version(kpBin), createTime.Round(100*time.Millisecond))
	row := func(name, egv, kpv, ratio string) {
		if !egOK {
			egv, ratio = "-", "-"
		}
		if !kpOK {
			kpv, ratio = "-", "-"
		}
		fmt.Fprintf(&b, "%-46s %12s %12s %10s\n", name, egv, kpv, ratio)
	}
	dur := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", a/b)
	}
	mib := func(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
	fmt.Fprintf(&b, "%-46s %12s %12s %10s\n", "", "edgegate", "kube-proxy", "eg/kp")
	row("start → rules in kernel (nft probe)", dur(eg.Programmed), dur(kp.Programmed), ratio(eg.Programmed.Seconds(), kp.Programmed.Seconds()))
	row("start → last sync (its metrics)", dur(eg.MetricSynced), dur(kp.MetricSynced), ratio(eg.MetricSynced.Seconds(), kp.MetricSynced.Seconds()))
	row("sync duration, mean (its metrics)", dur(time.Duration(eg.SyncSeconds*1e9)), dur(time.Duration(kp.SyncSeconds*1e9)), ratio(eg.SyncSeconds, kp.SyncSeconds))
	row("syncs by then", fmt.Sprint(eg.SyncCount), fmt.Sprint(kp.SyncCount), "")
	row("CPU time, start → rules in kernel", dur(eg.CPU), dur(kp.CPU), ratio(eg.CPU.Seconds(), kp.CPU.Seconds()))
	row("peak RSS (VmHWM)", mib(eg.PeakRSS), mib(kp.PeakRSS), ratio(float64(eg.PeakRSS), float64(kp.PeakRSS)))
	row(fmt.Sprintf("steady RSS (VmRSS, %v after)", settle), mib(eg.SteadyRSS), mib(kp.SteadyRSS), ratio(float64(eg.SteadyRSS), float64(kp.SteadyRSS)))
	row("service-ips elements", fmt.Sprint(eg.KernelElements), fmt.Sprint(kp.KernelElements), "")
	fmt.Fprintf(&b, "\nThe probe polls every %v, so kernel times are late by up to that much.\n", probeEvery)
	return b.String()
}

func machine() string {
	var parts []string
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		parts = append(parts, "Linux "+strings.TrimSpace(string(b)))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n, model := 0, ""
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				n++
				model = strings.TrimSpace(v)
			}
		}
		parts = append(parts, fmt.Sprintf("%d × %s", n, model))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		first, _, _ := strings.Cut(string(b), "\n")
		parts = append(parts, strings.Join(strings.Fields(first), " "))
	}
	return strings.Join(parts, ", ")
}

func version(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "(unknown version)"
	}
	return strings.TrimSpace(string(out))
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
