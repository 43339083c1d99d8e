package labtest

import "testing"

// TestTrafficMatrixIptables runs every scenario against one daemon in iptables mode.
func TestTrafficMatrixIptables(t *testing.T) { RunMatrix(t, "iptables") }

// TestModeSwitchLeavesNothingBehind restarts the daemon with the other proxy mode, both
// ways, then once more in the same mode, and checks that the previous mode's rules are
// gone while traffic still flows. (ipvs mode joins the switching inside the QEMU guest:
// qemu/testdata/ipvstest.)
func TestModeSwitchLeavesNothingBehind(t *testing.T) {
	RunModeSwitch(t, "nftables", "iptables", "nftables", "iptables", "iptables")
}
