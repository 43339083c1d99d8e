// Command bench measures edgegate side by side with upstream kube-proxy (issue 10): both
// against one real kube-apiserver (lab/cluster), each run alone in a fresh network namespace
// that the harness creates and removes, both measured the same way, in nftables and in
// iptables mode, at several sizes (Services × endpoints per Service):
//
//   - full sync: from the program's start (every object already in the apiserver) to every
//     service port dispatched in the kernel (probed over netlink), and to the end of its
//     first sync by its own metrics; the CPU that took (its children's included); RSS;
//   - incremental: one endpoint added or removed per second for a minute, each time the
//     latency from the EndpointSlice write to the endpoint's rule in (or out of) the kernel,
//     by the probe and by the program's network_programming_duration_seconds.
//
// It prints one table with ratios and writes it to out/bench/results/. Run it with
// `make bench` (root); README.md says how to read it.
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
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// size is one Services × endpoints-per-Service configuration.
type size struct{ Services, Endpoints int }

func (s size) String() string { return fmt.Sprintf("%dx%d", s.Services, s.Endpoints) }

const defaultSizes = "1000x10,10000x10,5000x50"

func parseSizes(s string) ([]size, error) {
	var out []size
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, b, ok := strings.Cut(f, "x")
		sv, err1 := strconv.Atoi(a)
		ep, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || sv < 1 || ep < 1 {
			return nil, fmt.Errorf("-sizes: %q is not SERVICESxENDPOINTS (e.g. 1000x10)", f)
		}
		out = append(out, size{sv, ep})
	}
	if len(out) == 0 {
		return nil, errors.New("-sizes: none given")
	}
	return out, nil
}

// list splits a comma-separated flag and checks every item is known.
func list(flagName, s string, known ...string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(known, f) {
			return nil, fmt.Errorf("-%s: %q is not one of %s", flagName, f, strings.Join(known, ", "))
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s: none given", flagName)
	}
	return out, nil
}

// harness is one invocation's settings and state.
type harness struct {
	edgegateBin, kubeProxyBin string
	programs                  []program
	modes                     []string
	changes                   int
	incrFor                   time.Duration
	minSync                   string        // both programs' min sync period; "" leaves their default
	limit                     time.Duration // a full sync's
	dir                       string        // the run directory: logs, cluster state
	bins                      cluster.Binaries
	topo                      *topology
	rep                       *report
}

func mainErr() error {
	sizesFlag := flag.String("sizes", envOr("BENCH_SIZES", defaultSizes), "sizes to measure, SERVICESxENDPOINTS comma-separated (env BENCH_SIZES)")
	modesFlag := flag.String("modes", envOr("BENCH_MODES", "nftables,iptables"), "proxy modes, comma-separated (env BENCH_MODES)")
	only := flag.String("proxies", envOr("BENCH_PROXIES", "edgegate,kube-proxy"), "programs to measure, comma-separated (env BENCH_PROXIES)")
	changes := flag.Int("changes", 60, "endpoint changes in the incremental phase (at most; 0 skips it)")
	incrFor := flag.Duration("incremental", time.Minute, "the incremental phase's length (one change a second)")
	edgegateBin := flag.String("edgegate", "../bin/edgegate", "the edgegate binary (make build)")
	kubeProxyBin := flag.String("kube-proxy", "", "the kube-proxy binary; default: build.sh's cached build")
	outDir := flag.String("out", "../out/bench/results", "directory of the result files")
	keep := flag.Bool("keep", false, "keep the run's directory (logs, cluster state)")
	limit := flag.Duration("full-sync-limit", 90*time.Second, "how long a full sync may take; a program still short of it is stopped and reported so")
	dpFlag := flag.String("dataplane", envOr("BENCH_DATAPLANE", "1000,10000,30000"), "Service counts of the data-plane measurement, comma-separated, or none (env BENCH_DATAPLANE)")
	bootFlag := flag.Bool("boot", envOr("BENCH_BOOT", "1") != "0", "boot every QEMU board's firmware and time it (env BENCH_BOOT=0 skips)")
	minSync := flag.Duration("min-sync-period", -1, "both programs' shortest time between syncs (default: theirs, 1s); 0 syncs at every change")
	flag.Parse()
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, nftables)")
	}
	sizes, err := parseSizes(*sizesFlag)
	if err != nil {
		return err
	}
	var dpSizes []int
	if *dpFlag != "none" && *dpFlag != "" {
		for _, f := range strings.Split(*dpFlag, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fmt.Errorf("-dataplane: %q is not a Service count", f)
			}
			dpSizes = append(dpSizes, n)
		}
	}
	h := &harness{changes: min(max(*changes, 0), 60), incrFor: *incrFor, limit: *limit}
	if *minSync >= 0 {
		h.minSync = minSync.String()
	}
	if h.modes, err = list("modes", *modesFlag, modeNFTables, modeIPTables); err != nil {
		return err
	}
	names, err := list("proxies", *only, edgegate.Name, kubeProxy.Name)
	if err != nil {
		return err
	}
	for _, p := range []program{edgegate, kubeProxy} {
		if slices.Contains(names, p.Name) {
			h.programs = append(h.programs, p)
		}
	}
	if h.edgegateBin, err = filepath.Abs(*edgegateBin); err != nil {
		return err
	}
	if _, err := os.Stat(h.edgegateBin); err != nil {
		return fmt.Errorf("-edgegate: %w (make build)", err)
	}
	if h.kubeProxyBin = *kubeProxyBin; h.kubeProxyBin == "" {
		if h.kubeProxyBin, err = buildKubeProxy(); err != nil {
			return err
		}
	}
	for _, tool := range []string{"ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s: %w", tool, err)
		}
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	began := time.Now()
	if h.bins, err = cluster.Build(ctx, os.Stderr); err != nil {
		return fmt.Errorf("cluster binaries: %w", err)
	}
	if h.dir, err = os.MkdirTemp("", "edgegate-bench-"); err != nil {
		return err
	}
	if *keep {
		fmt.Fprintln(os.Stderr, "run directory:", h.dir)
	} else {
		defer os.RemoveAll(h.dir)
	}
	h.topo = newTopology(strconv.Itoa(os.Getpid()))
	defer func() {
		if err := h.topo.remove(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}()
	if err := h.topo.create(); err != nil {
		return err
	}
	progress("namespace %s ready; sizes %s, modes %s, %d changes over %v per run",
		h.topo.API, *sizesFlag, strings.Join(h.modes, ","), h.changes, h.incrFor)

	h.rep = h.newReport(began)
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	out := filepath.Join(*outDir, began.UTC().Format("20060102T150405Z")+".txt")
	var runErr error
	for _, sz := range sizes {
		if runErr = h.size(ctx, sz); runErr != nil {
			break
		}
		// A long run leaves its table so far behind should a later size fail.
		if err := os.WriteFile(out, []byte(h.rep.String()), 0o644); err != nil {
			return err
		}
	}
	// The data plane and the boot after the control plane: each makes its own namespaces
	// or QEMU guests, and a failure there keeps the figures measured so far.
	if runErr == nil && len(dpSizes) > 0 {
		progress("data plane: %v Services, nftables and iptables here, ipvs and nftables in a QEMU guest", dpSizes)
		dataPlaneSections(ctx, h.rep, h.edgegateBin, dpSizes, nil, os.Stderr)
	}
	if runErr == nil && *bootFlag {
		progress("boot: every QEMU board")
		bootSection(ctx, h.rep, os.Stderr)
	}
	h.rep.Header = append(h.rep.Header, [2]string{"wall time", time.Since(began).Round(time.Second).String()})
	fmt.Print(h.rep.String())
	if err := os.WriteFile(out, []byte(h.rep.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "written to", out)
	if runErr != nil && *keep {
		fmt.Fprintln(os.Stderr, "logs in", h.dir)
	}
	return runErr
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// The node names the programs run as, with their addresses on the bridge.
var nodes = []struct{ Prog, Node, Role, Addr string }{
	{edgegate.Name, "bench-edgegate", "eg", "10.251.0.2"},
	{kubeProxy.Name, "bench-kube-proxy", "kp", "10.251.0.3"},
}

// size measures every program in every mode at one size, against an apiserver of its own
// (a fresh one is faster than deleting tens of thousands of objects), and adds a section per
// mode to the report. A run that fails is reported in its section; the others go on.
func (h *harness) size(ctx context.Context, sz size) error {
	progress("%v: starting an apiserver", sz)
	dir := filepath.Join(h.dir, sz.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	t0 := time.Now()
	c, err := cluster.Launch(ctx, cluster.Options{
		Binaries: h.bins, NetNS: h.topo.API, Address: netip.MustParseAddr(apiAddr), Dir: filepath.Join(dir, "cluster"),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	progress("%v: apiserver ready in %v at %s", sz, time.Since(t0).Round(100*time.Millisecond), c.Server)

	// Object creation is the harness's own load, not what is measured: no client-side limit.
	cfg := c.AdminConfig()
	cfg.QPS, cfg.Burst = -1, 0
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	addrs := map[string]string{otherNode: "10.251.0.200"}
	for _, n := range nodes {
		addrs[n.Node] = n.Addr
	}
	if err := createNodes(ctx, admin, addrs); err != nil {
		return err
	}
	t0 = time.Now()
	if err := createServices(ctx, admin, sz.Services, sz.Endpoints); err != nil {
		return err
	}
	created := time.Since(t0)
	gotSvc, gotEp, err := countObjects(ctx, admin)
	if err != nil {
		return err
	}
	if gotSvc != sz.Services || gotEp != sz.Services*sz.Endpoints {
		return fmt.Errorf("apiserver holds %d Services and %d endpoints in %s, want %d and %d", gotSvc, gotEp, benchNamespace, sz.Services, sz.Services*sz.Endpoints)
	}
	want, err := dispatched(ctx, admin)
	if err != nil {
		return err
	}
	progress("%v: created %d Services × %d endpoints in %v; %d service ports to dispatch", sz, sz.Services, sz.Endpoints, created.Round(100*time.Millisecond), want)

	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(c.AdminToken+"\n"), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(caFile, c.CAPEM, 0o600); err != nil {
		return err
	}
	for _, mode := range h.modes {
		results := map[string]result{}
		failed := map[string]string{}
		for _, p := range h.programs {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res, err := h.one(ctx, sz, mode, p, admin, want, runEnv{
				Server: c.Server, TokenFile: tokenFile, CAFile: caFile, Kubeconfig: c.AdminKubeconfig,
				StateDir: filepath.Join(dir, p.Name+"-"+mode+"-state"), MinSyncPeriod: h.minSync,
			}, dir)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				first, _, _ := strings.Cut(err.Error(), "\n")
				failed[p.Name] = first
				progress("%v %s %s: FAILED: %v", sz, mode, p.Name, err)
				continue
			}
			results[p.Name] = res
		}
		h.section(sz, mode, created, want, results, failed)
	}
	return nil
}

// one is one run: a fresh namespace, the program, its measurements, the objects restored.
func (h *harness) one(ctx context.Context, sz size, mode string, p program, admin kubernetes.Interface, want int, env runEnv, dir string) (result, error) {
	var n struct{ Prog, Node, Role, Addr string }
	for _, x := range nodes {
		if x.Prog == p.Name {
			n = x
		}
	}
	env.Node, env.NodeIP = n.Node, n.Addr
	ns, err := h.topo.addProxy(n.Role, n.Addr)
	if err != nil {
		return result{}, err
	}
	bin := h.edgegateBin
	if p.Name == kubeProxy.Name {
		bin = h.kubeProxyBin
	}
	r := &run{
		Prog: p, Mode: mode, Binary: bin, Env: env, NS: ns,
		Log:  filepath.Join(dir, p.Name+"-"+mode+".log"),
		Want: want, Limit: h.limit, Services: sz.Services, Endpoint: sz.Endpoints,
		Changes: plannedChanges(sz.Services, sz.Endpoints, h.changes), IncrFor: h.incrFor,
		Client: admin,
	}
	progress("%v %s %s: full sync ...", sz, mode, p.Name)
	res, made, err := r.do(ctx)
	switch {
	case err != nil:
	case res.Unfinished:
		progress("%v %s %s: the kernel dispatches %d of %d service ports after %v: stopped", sz, mode, p.Name, res.Dispatched, want, h.limit)
	default:
		progress("%v %s %s: rules in the kernel after %v, its sync done after %v",
			sz, mode, p.Name, res.Programmed.Round(time.Millisecond), res.MetricSynced.Round(time.Millisecond))
		if res.Incr != nil {
			progress("%v %s %s: incremental: %d changes, p50 %v p99 %v of those seen in time (probe), %d timed out", sz, mode, p.Name,
				res.Incr.Changes, fmtDur(percentile(res.Incr.Latencies, 0.5)), fmtDur(percentile(res.Incr.Latencies, 0.99)), res.Incr.Timeouts)
		}
	}
	// The program is stopped by now (r.do); put the objects back and the namespace away
	// before the next run, whatever happened.
	rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	if rerr := restore(rctx, admin, made, sz.Endpoints); rerr != nil {
		return res, errors.Join(err, rerr)
	}
	t1 := time.Now()
	if nerr := h.topo.removeProxy(ns); nerr != nil {
		return res, errors.Join(err, nerr)
	}
	progress("%v %s %s: %d EndpointSlices restored in %v, namespace removed in %v", sz, mode, p.Name,
		len(made), t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	return res, err
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// buildKubeProxy returns build.sh's kube-proxy, building it when the pins changed.
func buildKubeProxy() (string, error) {
	cmd := exec.Command("bash", "build.sh")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("bench/build.sh: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "kube-proxy"), nil
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
