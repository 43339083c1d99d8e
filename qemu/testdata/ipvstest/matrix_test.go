package ipvstest

import (
	"testing"

	"github.com/edgegate/edgegate/lab/labtest"
)

// TestIPVSMatrix runs the shared traffic matrix, and ipvs mode's own scenarios, against a
// daemon in ipvs mode.
func TestIPVSMatrix(t *testing.T) { labtest.RunMatrix(t, "ipvs") }

// TestModeSwitch restarts the lab's daemon in each proxy mode in turn: each start removes
// what the previous mode left (virtual servers, the dummy interface and its addresses,
// tables, iptables-nft chains). The last restart stays in ipvs mode and must remove the
// virtual servers and VIP of a service deleted while the daemon was stopped.
func TestModeSwitch(t *testing.T) {
	labtest.RunModeSwitch(t, "ipvs", "nftables", "iptables", "ipvs", "ipvs")
}
