package lab

import (
	"strings"
	"testing"
)

// TestTrafficMatrixIptables runs every scenario against one daemon in iptables mode.
func TestTrafficMatrixIptables(t *testing.T) { RunMatrix(t, "iptables") }

// TestModeSwitchLeavesNothingBehind restarts the daemon with the other proxy mode, both
// ways, and checks that the previous mode's rules are gone while traffic still flows.
func TestModeSwitchLeavesNothingBehind(t *testing.T) {
	l := New(t, Options{Prefix: "egs"})
	dir := ManifestDir(t.TempDir())
	s := clusterIPSpread()
	dir.Write(t, s.Name, s.Manifests)
	for _, step := range []struct{ mode, other string }{
		{"nftables", "iptables"}, {"iptables", "nftables"}, {"nftables", "iptables"},
	} {
		d := l.StartDaemon(t, DaemonArgs(step.mode, string(dir))...)
		expectOutcome(t, l.Client, "10.96.10.1:80", Answered)
		rules := l.Exec(t, l.Gateway, "nft", "list", "ruleset")
		for _, marker := range modes[step.mode].ruleset {
			if !strings.Contains(rules, marker) {
				t.Errorf("%s mode: the ruleset lacks %q", step.mode, marker)
			}
		}
		for _, marker := range modes[step.other].ruleset {
			if strings.Contains(rules, marker) {
				t.Errorf("after switching to %s mode the %s mode's %q is still there:\n%s", step.mode, step.other, marker, rules)
			}
		}
		d.Stop(t)
	}
}
