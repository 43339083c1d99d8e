package qemu

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
)

// PID 1's and softdog's lines about the watchdog.
const (
	watchdogArmed   = `msg="hardware watchdog armed" identity="Software Watchdog"`
	watchdogStarved = `msg="restarting the daemon does not help; the hardware watchdog is no longer fed and resets the board"`
	softdogReset    = "softdog: Initiating system reboot"
)

// TestWatchdog boots the firmware of each QEMU board (softdog as the watchdog, the fault
// hook built in) twice:
//   - "hang": softdog.soft_margin=10 and a daemon deadlocked at the first sync of every run
//     (the guest test re-arms the fault): after five futile restarts PID 1 stops feeding
//     the watchdog, and softdog resets the machine within its timeout;
//   - "healthy": softdog.soft_margin=5 and a healthy daemon: no reset in ten times the
//     timeout, and a clean power-off.
func TestWatchdog(t *testing.T) {
	eachBoard(t, firmwareBoards, Require, 12*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		// One image a guest test: the test's arguments are baked in.
		boot := func(t *testing.T, margin, test string) *VM {
			fw, _ := buildImage(ctx, t, testLog(t), TestImage{
				Board:     b,
				Init:      "github.com/edgegate/edgegate/daemon",
				Tags:      []string{"egfault"},
				Test:      "github.com/edgegate/edgegate/qemu/testdata/firmwaretest",
				TestArgs:  []string{"-test.v=test2json", "-test.timeout=6m", "-test.run=^" + test + "$"},
				Manifests: "testdata/firmwaretest/manifests",
			})
			vm := startVM(ctx, t, Options{
				Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
				Cmdline: []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr, "softdog.soft_margin=" + margin,
					"edgegate.daemon.hang=5s"},
				NICs:    []NIC{{Netdev: "user,restrict=on"}},
				Timeout: 8 * time.Minute,
			})
			bootMarkers(t, vm, fw)
			if armed := waitFor(t, vm, watchdogArmed); !strings.Contains(armed.Text, "timeout="+margin+"s") {
				t.Errorf("%q: want timeout=%ss", armed.Text, margin)
			}
			return vm
		}
		t.Run("hang", func(t *testing.T) {
			vm := boot(t, "10", "TestWatchdogHang")
			starved := waitFor(t, vm, watchdogStarved)
			reset := waitFor(t, vm, softdogReset)
			if code, err := vm.Wait(); err != nil {
				t.Errorf("QEMU: exit %d, %v", code, err)
			}
			restarts := 0
			for _, l := range vm.Lines()[:starved.N] {
				if strings.Contains(l.Text, `msg="the daemon's run ended"`) && strings.Contains(l.Text, "reason=hang") {
					restarts++
				}
			}
			took := reset.At - starved.At
			t.Logf("%s: %d runs killed for hanging, then the watchdog starved at %v and softdog reset the machine %v later",
				b.Name, restarts, starved.At.Round(time.Millisecond), took.Round(time.Millisecond))
			if restarts < 5 {
				t.Errorf("starved after %d hung runs, want 5", restarts)
			}
			// The last ping was at most a third of the timeout before PID 1 said so.
			if took > 10*time.Second+5*time.Second {
				t.Errorf("the reset came %v after the watchdog starved; softdog's timeout is 10s", took)
			}
		})
		t.Run("healthy", func(t *testing.T) {
			vm := boot(t, "5", "TestWatchdogHealthy")
			runGuest(t, vm)
			poweredOff(t, vm)
			for _, l := range vm.Lines() {
				if strings.Contains(l.Text, softdogReset) || strings.Contains(l.Text, watchdogStarved) {
					t.Errorf("console line %d: %q", l.N, l.Text)
				}
			}
		})
	})
}
