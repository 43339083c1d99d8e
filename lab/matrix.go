package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Scenario is one row of the traffic matrix: the manifests it needs and a check that drives
// real traffic through the gateway. Every scenario uses its own services, addresses and
// ports, so all of them are loaded at once into one daemon.
type Scenario struct {
	Name      string
	Manifests string // YAML written as <Name>.yaml before the daemon starts; "" for none
	Check     func(t *testing.T, l *Lab, g *Gateway)
}

// Gateway is the daemon under test as a scenario sees it.
type Gateway struct {
	Mode      string // --proxy-mode
	Manifests ManifestDir
	Daemon    *Daemon
	traits    modeTraits
}

// modeTraits is what differs between proxy modes when a scenario looks at the rules
// themselves instead of at traffic.
type modeTraits struct {
	// ruleset are texts `nft list ruleset` in the gateway shows while the daemon runs and
	// no longer shows after `edgegate --cleanup`.
	ruleset []string
	// breakRules removes programmed rules by hand, as a careless operator would, so that
	// traffic to services fails until the daemon repairs it.
	breakRules func(t *testing.T, l *Lab)
}

// modes holds the traits of every proxy mode the matrix can run against.
var modes = map[string]modeTraits{
	"nftables": {
		ruleset:    []string{"table ip edgegate", "table ip6 edgegate"},
		breakRules: flushNFTServices,
	},
	// iptables mode lives in the shared ip/ip6 nat and filter tables, under EG- chains.
	"iptables": {
		ruleset:    []string{"chain EG-SERVICES", "chain EG-POSTROUTING", "jump EG-SERVICES"},
		breakRules: flushIptServices,
	},
}

// flushIptServices empties nat EG-SERVICES, through which every service lookup goes, with
// nft (the lab needs no iptables binary to break iptables-mode rules).
func flushIptServices(t *testing.T, l *Lab) {
	t.Helper()
	l.Exec(t, l.Gateway, "nft", "flush", "chain", "ip", "nat", "EG-SERVICES")
}

// flushNFTServices empties the chain every service lookup goes through (kube-proxy's
// layout, which edgegate follows), or the whole table's rules if the layout has no such
// chain.
func flushNFTServices(t *testing.T, l *Lab) {
	t.Helper()
	if _, err := l.Run(l.Gateway, "nft", "flush", "chain", "ip", "edgegate", "services"); err != nil {
		t.Logf("no services chain to flush (%v); flushing every rule of table ip edgegate", err)
		l.Exec(t, l.Gateway, "nft", "flush", "table", "ip", "edgegate")
	}
}

// BreakRules removes programmed rules by hand (how depends on the mode).
func (g *Gateway) BreakRules(t *testing.T, l *Lab) {
	t.Helper()
	g.traits.breakRules(t, l)
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

// DaemonArgs are the flags the matrix starts edgegate with.
func DaemonArgs(mode, manifestDir string) []string {
	return []string{
		"--proxy-mode=" + mode,
		"--manifests", manifestDir,
		"--hostname-override", GatewayNodeName,
		"--node-ip", NodeIPv4.String() + "," + NodeIPv6.String(),
		"--zone", "lab-a",
		"--healthz-bind-address", "0.0.0.0:10256",
		"--metrics-bind-address", "127.0.0.1:10249",
		"--min-sync-period", "100ms",
		"--sync-period", "30s",
		"--full-sync-period", "2s",
	}
}

// RunMatrix builds a lab, starts one daemon in the given proxy mode with every scenario's
// manifests, runs each scenario as a subtest, and finally checks that `edgegate --cleanup`
// removes the mode's rules.
func RunMatrix(t *testing.T, mode string) {
	traits, ok := modes[mode]
	if !ok {
		t.Fatalf("the traffic matrix knows no proxy mode %q (add its traits to modes in lab/matrix.go)", mode)
	}
	l := New(t, Options{Prefix: "egm"})
	dir := ManifestDir(t.TempDir())
	scenarios := Scenarios()
	for _, s := range scenarios {
		if s.Manifests != "" {
			dir.Write(t, s.Name, s.Manifests)
		}
	}
	d := l.StartDaemon(t, DaemonArgs(mode, string(dir))...)
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
		out := l.Exec(t, l.Gateway, DaemonBinary(t), "--cleanup")
		t.Logf("edgegate --cleanup: %s", strings.TrimSpace(out))
		rules := l.Exec(t, l.Gateway, "nft", "list", "ruleset")
		for _, s := range traits.ruleset {
			if strings.Contains(rules, s) {
				t.Errorf("after --cleanup the ruleset still has %q:\n%s", s, rules)
			}
		}
	})
}

// eventually polls cond every 100ms until it reports done, for at most within (capped at
// 10s); it fails the test with cond's last state otherwise.
func eventually(t *testing.T, within time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	within = min(within, 10*time.Second)
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
func tally(t *testing.T, h *Host, addr string, n int) (byBackend, bySource map[string]int) {
	t.Helper()
	byBackend, bySource = map[string]int{}, map[string]int{}
	for i := range n {
		r := h.Probe(addr)
		if r.Outcome != Answered {
			t.Fatalf("%s -> %s, probe %d of %d: %v", h.Name, addr, i+1, n, r)
		}
		byBackend[r.Reply.Backend]++
		bySource[r.Reply.Source.String()]++
	}
	return byBackend, bySource
}

// expectOutcome probes addr from h once and requires the outcome want.
func expectOutcome(t *testing.T, h *Host, addr string, want Outcome) Result {
	t.Helper()
	r := h.Probe(addr)
	if r.Outcome != want {
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
