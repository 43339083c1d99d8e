package qemu

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
)

// PID 1's lines about the watchdog.
const (
	watchdogArmed   = `msg="hardware watchdog armed" identity=`
	watchdogStarved = `msg="restarting the daemon does not help; the hardware watchdog is no longer fed and resets the board"`
)

// boardWatchdog is how a board's watchdog shows and is set.
type boardWatchdog struct {
	identity string // what WDIOC_GETSUPPORT names it, as PID 1 logs it
	margin   string // its timeout's module parameter on the kernel command line
	reset    string // the kernel's line as it resets the machine; empty: the hardware does
}

// watchdogOf is the watchdog PID 1 finds on b under QEMU: the Intel 6300ESB QEMU emulates
// where the board's kernel has its driver (board.yaml's qemu.watchdog), else softdog.
func watchdogOf(b board.Board) boardWatchdog {
	if b.QEMU.Watchdog == "i6300esb" {
		return boardWatchdog{identity: `"i6300ESB timer"`, margin: "i6300esb.heartbeat"}
	}
	return boardWatchdog{identity: `"Software Watchdog"`, margin: "softdog.soft_margin", reset: "softdog: Initiating system reboot"}
}

// watchdogBoards are the boards TestWatchdog boots: the qemu-* boards with softdog, the
// hardware boards (booted from kernel and initramfs) with QEMU's i6300esb.
var watchdogBoards = []string{"qemu-x86_64", "qemu-arm64", "pc-x86_64", "generic-arm64"}

func TestWatchdog(t *testing.T) {
	eachBoard(t, watchdogBoards, Require, 12*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		wd := watchdogOf(b)
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
				Cmdline: []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr, wd.margin + "=" + margin,
					"edgegate.daemon.hang=5s"},
				NICs:    []NIC{{Netdev: "user,restrict=on"}},
				Timeout: 8 * time.Minute,
			})
			bootMarkers(t, vm, fw)
			if armed := waitFor(t, vm, watchdogArmed+wd.identity); !strings.Contains(armed.Text, "timeout="+margin+"s") {
				t.Errorf("%q: want timeout=%ss", armed.Text, margin)
			}
			return vm
		}
		t.Run("hang", func(t *testing.T) {
			vm := boot(t, "10", "TestWatchdogHang")
			starved := waitFor(t, vm, watchdogStarved)
			starvedAt := time.Now()
			var reset Line
			if wd.reset != "" {
				reset = waitFor(t, vm, wd.reset)
			}
			if code, err := vm.Wait(); err != nil {
				t.Errorf("QEMU: exit %d, %v", code, err)
			}
			// The hardware's reset prints nothing: QEMU's exit (-no-reboot) is the reset.
			took := time.Since(starvedAt)
			if wd.reset != "" {
				took = reset.At - starved.At
			}
			restarts := 0
			for _, l := range vm.Lines()[:starved.N] {
				if strings.Contains(l.Text, `msg="the daemon's run ended"`) && strings.Contains(l.Text, "reason=hang") {
					restarts++
				}
			}
			t.Logf("%s: %d runs killed for hanging, then the watchdog starved at %v and it reset the machine %v later",
				b.Name, restarts, starved.At.Round(time.Millisecond), took.Round(time.Millisecond))
			if restarts < 5 {
				t.Errorf("starved after %d hung runs, want 5", restarts)
			}
			// The last ping was at most a third of the timeout before PID 1 said so.
			if took > 10*time.Second+5*time.Second {
				t.Errorf("the reset came %v after the watchdog starved; its timeout is 10s", took)
			}
		})
		if wd.reset == "" {
			// softdog on the qemu-* boards proves the healthy side: a 5 s emulated device
			// under TCG runs on the host's clock, which a busy host stretches.
			return
		}
		t.Run("healthy", func(t *testing.T) {
			vm := boot(t, "5", "TestWatchdogHealthy")
			runGuest(t, vm)
			poweredOff(t, vm)
			for _, l := range vm.Lines() {
				if strings.Contains(l.Text, wd.reset) || strings.Contains(l.Text, watchdogStarved) {
					t.Errorf("console line %d: %q", l.N, l.Text)
				}
			}
		})
	})
}
