package labtest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/kernel/fastpath"
	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/daemon/plan/nft"
	"github.com/edgegate/edgegate/lab"
)

// Scenario is one row of the traffic matrix: the manifests it needs and a check that drives
// real traffic through the gateway. Every scenario uses its own services, addresses and
// ports, so all of them are loaded at once into one daemon.
type Scenario struct {
	Name      string
	Manifests string // YAML written as <Name>.yaml before the daemon starts; "" for none
	Check     func(t *testing.T, l *lab.Lab, g *Gateway)
}

// Gateway is the daemon under test as a scenario sees it.
type Gateway struct {
	Mode      string // --proxy-mode
	Manifests ManifestDir
	Daemon    *Daemon
	traits    modeTraits
}

// modeTraits is what differs between proxy modes when a scenario looks at the kernel's
// state itself instead of at traffic.
type modeTraits struct {
	// ruleset are lines of lab.KernelState.String that the gateway shows while the daemon runs
	// in this mode (with the matrix's services).
	ruleset []string
	// owned lists what of this mode the kernel holds: tables, chains and jumps, virtual
	// servers, links. Empty after `edgegate --cleanup` and after a start in another mode.
	owned func(lab.KernelState) []string
	// breakRules removes programmed rules by hand, as a careless operator would, so that
	// traffic to services fails until the daemon repairs it.
	breakRules func(t *testing.T, l *lab.Lab)
	// scenarios are the mode's own rows of the matrix, run after the shared ones.
	scenarios func() []Scenario
}

// modes holds the traits of every proxy mode the matrix can run against.
var modes = map[string]modeTraits{
	"nftables": {
		ruleset:    []string{"table ip edgegate", "table ip6 edgegate"},
		owned:      func(s lab.KernelState) []string { return s.TablesMatching(nft.ModeTable) },
		breakRules: flushNFTServices,
		scenarios:  func() []Scenario { return []Scenario{serviceIPOverNodePort()} },
	},
	// iptables mode lives in the shared ip/ip6 nat and filter tables, under EG- chains.
	"iptables": {
		ruleset:    []string{"chain EG-SERVICES", "chain EG-POSTROUTING", "jump EG-SERVICES"},
		owned:      iptablesOwned,
		breakRules: flushIptServices,
		scenarios:  func() []Scenario { return []Scenario{serviceIPOverNodePort()} },
	},
	// ipvs mode: virtual servers on the dummy interface's addresses, and the auxiliary
	// rules in a table of their own. It needs IPVS in the kernel: the QEMU guest's.
	"ipvs": {
		ruleset:    []string{"table ip edgegate-ipvs", "table ip6 edgegate-ipvs", "link edgegate-ipvs0 dummy", "TCP  10.96.10.1:80 rr"},
		owned:      ipvsOwned,
		breakRules: flushIPVS,
		scenarios:  ipvsScenarios,
	},
}

// iptablesOwned lists the EG- chains of every table and the jumps into them.
func iptablesOwned(s lab.KernelState) []string {
	var out []string
	for _, t := range s.Tables {
		for _, c := range t.Chains {
			if strings.HasPrefix(c.Name, "EG-") {
				out = append(out, fmt.Sprintf("chain %s %s %s", t.Family, t.Name, c.Name))
				continue
			}
			for _, j := range c.Jumps {
				if _, to, _ := strings.Cut(j, " "); strings.HasPrefix(to, "EG-") {
					out = append(out, fmt.Sprintf("%s in %s %s %s", j, t.Family, t.Name, c.Name))
				}
			}
		}
	}
	return out
}

// ipvsOwned lists the auxiliary tables, the dummy interface and every virtual server (the
// lab's gateway has no others).
func ipvsOwned(s lab.KernelState) []string {
	out := s.TablesNamed("edgegate-ipvs")
	if l, ok := s.Link("edgegate-ipvs0"); ok {
		out = append(out, fmt.Sprintf("link %s %s %v local %v", l.Name, l.Type, l.Addrs, l.Local))
	}
	for _, e := range s.IPVS {
		out = append(out, "virtual server "+e.VSKey.String())
	}
	return out
}

// flushIptServices empties nat EG-SERVICES, through which every service lookup goes.
func flushIptServices(t *testing.T, l *lab.Lab) {
	t.Helper()
	if err := l.Gateway.FlushNFTChain(nftables.TableFamilyIPv4, "nat", "EG-SERVICES"); err != nil {
		t.Fatal(err)
	}
}

// flushNFTServices empties the chain every service lookup goes through (kube-proxy's
// layout, which edgegate follows), in every table of a split dispatch, or the whole
// table's rules if the layout has no such chain.
func flushNFTServices(t *testing.T, l *lab.Lab) {
	t.Helper()
	if shards := kernelState(t, l).TablesMatching(nft.IsShardTable); len(shards) > 0 {
		for _, s := range shards {
			name, ok := strings.CutPrefix(s, "table ip ")
			if !ok {
				continue // IPv6: the scenario breaks IPv4 traffic
			}
			if err := l.Gateway.FlushNFTChain(nftables.TableFamilyIPv4, name, "services"); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if err := l.Gateway.FlushNFTChain(nftables.TableFamilyIPv4, "edgegate", "services"); err != nil {
		t.Logf("no services chain to flush (%v); flushing every rule of table ip edgegate", err)
		if err := l.Gateway.FlushNFTTable(nftables.TableFamilyIPv4, "edgegate"); err != nil {
			t.Fatal(err)
		}
	}
}

// flushIPVS deletes every virtual server (ipvsadm -C): the VIPs stay on the dummy
// interface, so connections reach the gateway's own closed ports instead.
func flushIPVS(t *testing.T, l *lab.Lab) {
	t.Helper()
	if err := l.Gateway.FlushIPVS(); err != nil {
		t.Fatal(err)
	}
}

// BreakRules removes programmed rules by hand (how depends on the mode).
func (g *Gateway) BreakRules(t *testing.T, l *lab.Lab) {
	t.Helper()
	g.traits.breakRules(t, l)
}

// kernelState reads the gateway's kernel state or fails the test.
func kernelState(t *testing.T, l *lab.Lab) lab.KernelState {
	t.Helper()
	s, err := l.Gateway.KernelState()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ManifestDir is the directory the daemon reads manifests from (--manifests).
type ManifestDir string

// Write replaces <name>.yaml atomically (write, then rename), so the daemon never reads a
// half-written file.
func (d ManifestDir) Write(t testing.TB, name, yaml string) {
	t.Helper()
	tmp := filepath.Join(string(d), "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		t.Fatalf("write manifests %s: %v", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(string(d), name+".yaml")); err != nil {
		t.Fatalf("write manifests %s: %v", name, err)
	}
}

// Remove deletes <name>.yaml.
func (d ManifestDir) Remove(t testing.TB, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(string(d), name+".yaml")); err != nil {
		t.Fatalf("remove manifests %s: %v", name, err)
	}
}

// RunMatrix builds a lab, starts one daemon in the given proxy mode with every scenario's
// manifests (the shared ones and the mode's own), runs each scenario as a subtest, and
// finally checks that `edgegate --cleanup` leaves nothing of any mode behind.
func RunMatrix(t *testing.T, mode string) { RunMatrixWith(t, mode, nil, nil) }

// RunMatrixWith is RunMatrix with extra daemon flags, and a first scenario that checks
// what they do (may be nil).
func RunMatrixWith(t *testing.T, mode string, extra []string, first *Scenario) {
	traits, ok := modes[mode]
	if !ok {
		t.Fatalf("the traffic matrix knows no proxy mode %q (add its traits to modes in lab/labtest/matrix.go)", mode)
	}
	l := New(t, lab.Options{Prefix: "egm"})
	dir := ManifestDir(t.TempDir())
	scenarios := Scenarios()
	if first != nil {
		scenarios = append([]Scenario{*first}, scenarios...)
	}
	if traits.scenarios != nil {
		scenarios = append(scenarios, traits.scenarios()...)
	}
	for _, s := range scenarios {
		if s.Manifests != "" {
			dir.Write(t, s.Name, s.Manifests)
		}
	}
	d := StartDaemon(t, l.Gateway, append(lab.DaemonArgs(mode, string(dir)), extra...)...)
	g := &Gateway{Mode: mode, Manifests: dir, Daemon: d, traits: traits}
	for _, s := range scenarios {
		t.Run(s.Name, func(t *testing.T) {
			s.Check(t, l, g)
			if gone, err := d.Exited(); gone {
				t.Fatalf("edgegate exited during the scenario: %v", err)
			}
		})
	}
	t.Run("cleanup", func(t *testing.T) {
		d.Stop(t)
		cleanupLeavesNothing(t, l)
	})
}

// cleanupLeavesNothing runs `edgegate --cleanup` in the gateway and checks that no mode
// owns anything there afterwards.
func cleanupLeavesNothing(t *testing.T, l *lab.Lab) {
	t.Helper()
	out := Exec(t, l.Gateway, DaemonBinary(t), "--cleanup")
	t.Logf("edgegate --cleanup: %s", strings.TrimSpace(out))
	s := kernelState(t, l)
	for _, name := range slices.Sorted(maps.Keys(modes)) {
		if left := modes[name].owned(s); len(left) > 0 {
			t.Errorf("after --cleanup %s mode's state is still there: %s\n%s", name, strings.Join(left, "; "), s)
		}
	}
	if left := s.TablesNamed(fastpath.TableName); len(left) > 0 {
		t.Errorf("after --cleanup the fast path is still there: %s\n%s", strings.Join(left, "; "), s)
	}
}

// RunModeSwitch restarts the daemon in each of the given proxy modes in turn, on the same
// lab, and checks after each start that traffic flows, that the mode's own state is there
// and that no other mode's is; finally that --cleanup removes everything. A second service
// is there for every start but the last, and is removed while the daemon is stopped: the
// last start must remove what the previous run programmed for it (a restart in the same
// mode finds its own state, which it no longer wants, and owns it by address).
func RunModeSwitch(t *testing.T, sequence ...string) {
	l := New(t, lab.Options{Prefix: "egs"})
	dir := ManifestDir(t.TempDir())
	s := clusterIPSpread()
	dir.Write(t, s.Name, s.Manifests)
	const stale, staleAddr = "switch-stale", "10.96.10.30"
	staleSvc := service(stale, []string{staleAddr}, nodePort(30130))
	dir.Write(t, stale, manifests(staleSvc, slice(staleSvc, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	for i, mode := range sequence {
		traits, ok := modes[mode]
		if !ok {
			t.Fatalf("no proxy mode %q", mode)
		}
		last := i == len(sequence)-1
		if last {
			dir.Remove(t, stale)
		}
		t.Run(fmt.Sprintf("%d-%s", i+1, mode), func(t *testing.T) {
			d := StartDaemon(t, l.Gateway, lab.DaemonArgs(mode, string(dir))...)
			defer d.Stop(t)
			byBackend, _ := tally(t, l.Client, "10.96.10.1:80", 6)
			t.Logf("%s mode: 6 connections: %s", mode, describe(byBackend))
			st := kernelState(t, l)
			for _, line := range traits.ruleset {
				if !st.Has(line) {
					t.Errorf("%s mode: the gateway lacks %q:\n%s", mode, line, st)
				}
			}
			for _, other := range slices.Sorted(maps.Keys(modes)) {
				if other == mode {
					continue
				}
				if left := modes[other].owned(st); len(left) > 0 {
					t.Errorf("after a start in %s mode, %s mode's state is still there: %s", mode, other, strings.Join(left, "; "))
				}
			}
			if !last {
				tally(t, l.Client, staleAddr+":80", 2)
				tally(t, l.Client, lab.NodeIPv4.String()+":30130", 2)
			} else {
				for _, addr := range []string{staleAddr + ":80", lab.NodeIPv4.String() + ":30130"} {
					if r := l.Client.Probe(addr); r.Outcome == lab.Answered {
						t.Errorf("%s answers after its service was removed while the daemon was stopped: %v", addr, r)
					}
				}
				// Virtual servers and dummy addresses list addresses; nftables and
				// iptables rules do not show in the state (traffic proves them).
				if strings.Contains(st.String(), staleAddr) || strings.Contains(st.String(), ":30130") {
					t.Errorf("the removed service's %s or node port 30130 is still in the kernel:\n%s", staleAddr, st)
				}
			}
			if t.Failed() {
				t.Logf("the gateway's state:\n%s", st)
			}
		})
	}
	t.Run("cleanup", func(t *testing.T) { cleanupLeavesNothing(t, l) })
}

// eventually polls cond every 100ms until it reports done, for at most within; it fails
// the test with cond's last state otherwise. within bounds a hang, it claims no speed: it
// was once silently capped at 10s, which cut the 15s a slow guest's dashboard needs.
func eventually(t *testing.T, within time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	var state string
	for {
		var done bool
		if done, state = cond(); done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, within, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tally probes addr n times from h, requires every probe answered and counts answers per
// backend and per source address the backend saw.
func tally(t *testing.T, h *lab.Host, addr string, n int) (byBackend, bySource map[string]int) {
	t.Helper()
	byBackend, bySource = map[string]int{}, map[string]int{}
	for i := range n {
		r := h.Probe(addr)
		if r.Outcome != lab.Answered {
			logGateway(t, h.Lab())
			t.Fatalf("%s -> %s, probe %d of %d: %v", h.Name, addr, i+1, n, r)
		}
		byBackend[r.Reply.Backend]++
		bySource[r.Reply.Source.String()]++
	}
	return byBackend, bySource
}

// expectOutcome probes addr from h once and requires the outcome want.
func expectOutcome(t *testing.T, h *lab.Host, addr string, want lab.Outcome) lab.Result {
	t.Helper()
	r := h.Probe(addr)
	if r.Outcome != want {
		logGateway(t, h.Lab())
		t.Errorf("%s -> %s: %v; want %v", h.Name, addr, r, want)
	}
	return r
}

// onlySource requires that every answer saw the source want.
func onlySource(t *testing.T, what string, bySource map[string]int, want string) {
	t.Helper()
	if len(bySource) != 1 || bySource[want] == 0 {
		t.Errorf("%s: backends saw sources %v; want only %s", what, bySource, want)
	}
}

func describe(m map[string]int) string {
	var parts []string
	for _, b := range []string{"backend-1", "backend-2", "backend-3"} {
		parts = append(parts, fmt.Sprintf("%s=%d", b, m[b]))
	}
	return strings.Join(parts, " ")
}

// logGateway logs what explains a failed probe and no other test output shows: the
// gateway's IPVS connection table (a kernel with IPVS only), as ipvsadm -Lnc would list it.
func logGateway(t testing.TB, l *lab.Lab) {
	t.Helper()
	if l == nil || ipvs.Available() != nil {
		return
	}
	conns, err := l.Gateway.IPVSConnections()
	if err != nil {
		t.Logf("the gateway's IPVS connections: %v", err)
		return
	}
	lines := strings.Split(strings.TrimSpace(conns), "\n")
	if len(lines) > 80 {
		lines = append(lines[:80], fmt.Sprintf("... %d more", len(lines)-80))
	}
	t.Logf("the gateway's IPVS connections (/proc/net/ip_vs_conn, addresses in hex):\n%s", strings.Join(lines, "\n"))
}
