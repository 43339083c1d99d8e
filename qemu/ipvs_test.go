package qemu

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
)

// ipvsBoards are the boards TestIPVS boots. qemu-x86_64 runs every guest test;
// qemu-arm64, whose TCG emulation is slower and which shares the host's cores with the
// other guest, runs a smoke subset (ipvsGuestRun): PID 1's IPVS state and the matrix's
// basic scenarios, ipvs mode's table, rr and its counters, and the cleanup.
var ipvsBoards = []string{"qemu-x86_64", "qemu-arm64"}

// ipvsGuestRun is the guest's -test.run by board; none runs everything.
var ipvsGuestRun = map[string]string{
	"qemu-arm64": "^(TestPID1IPVSMode|TestIPVSMatrix)$/^(ruleset-listing|clusterip-spreads-over-all-endpoints|" +
		"nodeport-on-node-ip|session-affinity-clientip|no-endpoints-rejected|udp-flow-moves-when-its-endpoint-goes|" +
		"ipvs-virtual-servers-addresses-and-sysctls|ipvs-rr-spreads-evenly|ipvs-stats-match-traffic|cleanup)$",
}

// ipvsDaemonStart matches PID 1's daemon starting in ipvs mode on the baked manifests.
var ipvsDaemonStart = regexp.MustCompile(`msg=starting .*mode=ipvs .*manifests=/etc/edgegate/manifests`)

// TestIPVS boots the real firmware of each QEMU board in ipvs mode (the development hosts
// have no IPVS; the boards' Debian kernels have it as modules) with the guest test
// testdata/ipvstest as /edgegate-test: PID 1 loads ip_vs and every scheduler, its daemon
// programs the baked manifests as virtual servers, and the guest test runs package labtest's
// traffic matrix in ipvs mode (real TCP and UDP between network namespaces inside the
// guest, IPVS's schedulers and counters, graceful termination) and switches the lab's
// daemon among the three proxy modes. The guest's results come back as subtests of
// "guest"; the boot must end in a clean power-off with no kernel trouble.
func TestIPVS(t *testing.T) {
	eachBoard(t, ipvsBoards, Require, 10*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		args := []string{"-test.v=test2json", "-test.timeout=4m"}
		if run := ipvsGuestRun[b.Name]; run != "" {
			args = append(args, "-test.run="+run)
		}
		fw, buildTime := buildImage(ctx, t, testLog(t), TestImage{
			Board:     b,
			Init:      "github.com/edgegate/edgegate/daemon",
			Test:      "github.com/edgegate/edgegate/qemu/testdata/ipvstest",
			TestArgs:  args,
			Manifests: "testdata/ipvstest/manifests",
		})
		t.Logf("%s: test image built in %v: %d modules, initramfs %d bytes gz", b.Name,
			buildTime.Round(time.Millisecond), len(fw.Info.Modules.LoadOrder), fw.Info.Initramfs.Size)
		vm := startVM(ctx, t, Options{
			Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
			Cmdline: []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr, "edgegate.flags=--proxy-mode=ipvs"},
			// A NIC with no way out: its address carries PID 1's node port.
			NICs:    []NIC{{Netdev: "user,restrict=on"}},
			Timeout: 6 * time.Minute,
		})
		start, _ := bootMarkers(t, vm, fw)
		ready := waitFor(t, vm, "EDGEGATE-READY")
		started := false
		for _, l := range vm.Lines()[start.N:ready.N] {
			started = started || ipvsDaemonStart.MatchString(l.Text)
		}
		if !started {
			t.Errorf("no console line %q before EDGEGATE-READY: PID 1's daemon did not start in ipvs mode", ipvsDaemonStart)
		}
		guest := runGuest(t, vm)
		if results, err := guest.Results(); err == nil {
			t.Logf("%s: guest tests %s", b.Name, countResults(results))
		}
		exit := poweredOff(t, vm)
		t.Logf("%s in ipvs mode: boot-to-ready %v; guest test exited %d; power-off at %v, QEMU exited after %v",
			b.Name, ready.At.Round(time.Millisecond), guest.ExitCode, exit.At.Round(time.Millisecond), vm.Elapsed().Round(time.Millisecond))
	})
}

// countResults sums the guest's results by outcome, top-level tests and subtests alike.
func countResults(results []Result) string {
	n := map[string]int{}
	for _, r := range results {
		if r.Name != "" {
			n[r.Action]++
		}
	}
	return fmt.Sprintf("%d passed, %d failed, %d skipped, %d unfinished", n["pass"], n["fail"], n["skip"], n[""])
}
