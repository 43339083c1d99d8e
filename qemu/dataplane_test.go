package qemu

import (
	"context"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
)

// TestDataPlane boots the qemu-x86_64 firmware (nftables mode on the baked manifests) with
// the guest test testdata/dataplanetest as /edgegate-test: on the firmware's own kernel it
// runs the traffic matrix with the fast path (a flowtable the development hosts' kernels
// lack) and proves that established connections skip the hooks, completes handshakes
// through the kernel's SYN proxy, and fills the connection tracking table (its size is
// global to a kernel, so only a guest's may be shrunk) while established connections keep
// working. The guest's results come back as subtests of "guest".
func TestDataPlane(t *testing.T) {
	eachBoard(t, []string{"qemu-x86_64"}, Require, 12*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		fw, buildTime := buildImage(ctx, t, testLog(t), TestImage{
			Board:     b,
			Init:      "github.com/edgegate/edgegate/daemon",
			Test:      "github.com/edgegate/edgegate/qemu/testdata/dataplanetest",
			TestArgs:  []string{"-test.v=test2json", "-test.timeout=8m"},
			Manifests: "testdata/ipvstest/manifests",
		})
		t.Logf("%s: test image built in %v: %d modules", b.Name, buildTime.Round(time.Millisecond), len(fw.Info.Modules.LoadOrder))
		vm := startVM(ctx, t, Options{
			Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
			Cmdline: []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr},
			NICs:    []NIC{{Netdev: "user,restrict=on"}},
			Timeout: 10 * time.Minute,
		})
		bootMarkers(t, vm, fw)
		waitFor(t, vm, "EDGEGATE-READY")
		guest := runGuest(t, vm)
		if results, err := guest.Results(); err == nil {
			t.Logf("%s: guest tests %s", b.Name, countResults(results))
		}
		exit := poweredOff(t, vm)
		t.Logf("%s: guest test exited %d; power-off at %v", b.Name, guest.ExitCode, exit.At.Round(time.Millisecond))
	})
}
