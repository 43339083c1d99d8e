package qemu

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/initramfs"
)

// firmwareBoards are booted with the real firmware. pc-x86_64 and generic-arm64 stay with
// TestBootSmoke: their generic kernels boot the same PID 1 and add seconds of TCG time
// (an XZ kernel, more modules) without checking anything the cloud kernels do not.
var firmwareBoards = []string{"qemu-x86_64", "qemu-arm64"}

// guestAddr is the address the firmware gives the guest's NIC from the kernel command line.
const guestAddr = "10.0.2.15/24"

// firmwarePanics is how often the panic boot makes the daemon panic (edgegate.test.panic).
const firmwarePanics = 2

var (
	// noDeviceLog matches PID 1's line for a module whose init found no hardware.
	noDeviceLog = regexp.MustCompile(`msg="module found no device; not loaded" module=(\S+)`)
	// daemonPanicLog matches the supervisor's line for a deliberate panic of the daemon.
	daemonPanicLog = regexp.MustCompile(`msg="component panicked; restarting" component=daemon panic="edgegate\.test\.panic: deliberate panic (\d+) of (\d+)`)
	// daemonStartLog matches the daemon's first line on every start.
	daemonStartLog = regexp.MustCompile(`msg=starting .*manifests=/etc/edgegate/manifests`)
	// kernelTrouble are console lines that mean the guest kernel went wrong, even when
	// everything else passed.
	kernelTrouble = []string{"Kernel panic", "Oops", "BUG:"}
)

// TestFirmwareBoot builds the real firmware of each QEMU board (edgegate as /init, the
// standalone manifests of testdata/firmwaretest/manifests baked in, the guest test
// testdata/firmwaretest as /edgegate-test) and boots it twice: once plainly, once with the
// daemon panicking after its syncs (edgegate.test.panic). Both times the console must show
// the firmware contract's markers in order, every module loaded, the NIC up with its
// address, EDGEGATE-READY before the guest test, the guest test passing (PID 1, modules,
// NIC, rules, TCP through the ClusterIP between namespaces inside the guest) and a clean
// power-off with no kernel trouble.
func TestFirmwareBoot(t *testing.T) {
	for _, name := range firmwareBoards {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := board.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			Require(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
			buildStart := time.Now()
			fw, err := BuildTestImage(ctx, log, t.TempDir(), TestImage{
				Board:     b,
				Init:      "github.com/edgegate/edgegate/daemon",
				Test:      "github.com/edgegate/edgegate/qemu/testdata/firmwaretest",
				TestArgs:  []string{"-test.v=test2json", "-test.timeout=2m"},
				Manifests: "testdata/firmwaretest/manifests",
			})
			if err != nil {
				t.Fatal(err)
			}
			buildTime := time.Since(buildStart)
			// What a gateway boots: the same /init and modules without the test binary and
			// the manifests, as `make firmware` packs it.
			cache, err := kernelCache(ctx)
			if err != nil {
				t.Fatal(err)
			}
			releaseSpec := initramfs.FirmwareSpec{Board: b, Init: filepath.Join(fw.Dir, "init"), CacheDir: cache, OutDir: t.TempDir()}
			release, err := initramfs.BuildFirmware(ctx, log, releaseSpec)
			if err != nil {
				t.Fatal(err)
			}
			t.Run("reproducible", func(t *testing.T) {
				again := releaseSpec
				again.OutDir = t.TempDir()
				if _, err := initramfs.BuildFirmware(ctx, log, again); err != nil {
					t.Fatal(err)
				}
				for _, f := range []string{initramfs.InitramfsFile, initramfs.BuildInfoFile, initramfs.KernelFile} {
					first, err := os.ReadFile(filepath.Join(releaseSpec.OutDir, f))
					if err != nil {
						t.Fatal(err)
					}
					second, err := os.ReadFile(filepath.Join(again.OutDir, f))
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(first, second) {
						t.Errorf("%s: two builds from the same inputs differ (%d and %d bytes)", f, len(first), len(second))
					}
				}
			})
			t.Logf("%s: kernel %s %s; %d modules; initramfs %d bytes gz (%.1f MiB) as a gateway boots it, "+
				"%d bytes gz with the guest test; test image built in %v",
				b.Name, fw.Info.Kernel.Package, fw.Info.Kernel.Version, len(fw.Info.Modules.LoadOrder),
				release.Info.Initramfs.Size, float64(release.Info.Initramfs.Size)/(1<<20), fw.Info.Initramfs.Size,
				buildTime.Round(time.Millisecond))
			t.Run("boot", func(t *testing.T) { bootFirmware(ctx, t, b, fw, 0) })
			t.Run("panic", func(t *testing.T) { bootFirmware(ctx, t, b, fw, firmwarePanics) })
		})
	}
}

// bootFirmware boots fw once (with the daemon panicking panics times after its syncs when
// panics > 0) and checks the console from the first marker to QEMU's exit.
func bootFirmware(ctx context.Context, t *testing.T, b board.Board, fw initramfs.Firmware, panics int) {
	cmdline := []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr}
	if panics > 0 {
		cmdline = append(cmdline, fmt.Sprintf("edgegate.test.panic=%d", panics))
	}
	vm, err := Start(ctx, Options{
		Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(), Cmdline: cmdline,
		// A NIC with no way out: user-mode networking restricted to the emulator itself.
		NICs:    []NIC{{Netdev: "user,restrict=on"}},
		Timeout: 4 * time.Minute,
		Console: func(line string) { t.Log("console: " + line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Kill()
	start, err := vm.WaitFor("EDGEGATE-BOOT-START")
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := vm.WaitFor("EDGEGATE-MODULES-LOADED")
	if err != nil {
		t.Fatal(err)
	}
	checkModules(t, fw, loaded, vm.Lines()[start.N:loaded.N])
	netUp, err := vm.WaitFor("EDGEGATE-NET-UP")
	if err != nil {
		t.Fatal(err)
	}
	if want := "EDGEGATE-NET-UP eth0 " + guestAddr; netUp.Text != want {
		t.Errorf("%q, want %q", netUp.Text, want)
	}
	ready, err := vm.WaitFor("EDGEGATE-READY")
	if err != nil {
		t.Fatal(err)
	}
	// WaitForGuestTest reads on from READY: the test can only have begun after it.
	guest, err := vm.WaitForGuestTest()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("guest", guest.Report)
	exit, err := vm.WaitFor("EDGEGATE-POWEROFF")
	if err != nil {
		t.Fatal(err)
	}
	code, err := vm.Wait()
	if err != nil || code != 0 {
		t.Fatalf("QEMU ended with code %d, %v", code, err)
	}
	lines := vm.Lines()
	for _, l := range lines {
		for _, bad := range kernelTrouble {
			if strings.Contains(l.Text, bad) {
				t.Errorf("console line %d: %q", l.N, l.Text)
			}
		}
	}
	if panics > 0 {
		checkDaemonPanics(t, panics, lines[ready.N:])
	}
	// The daemon started once, and once more after each panic, all before the test.
	starts := 0
	for _, l := range lines[start.N:] {
		if strings.Contains(l.Text, TestBeginMarker) {
			break
		}
		if daemonStartLog.MatchString(l.Text) {
			starts++
		}
	}
	if starts != panics+1 {
		t.Errorf("the daemon started %d times before the test, want %d", starts, panics+1)
	}
	t.Logf("%s (edgegate.test.panic=%d): boot-to-ready %v (QEMU start to EDGEGATE-READY); /init at %v, "+
		"modules loaded at %v, eth0 up at %v; guest test exited %d; power-off at %v, QEMU exited after %v",
		b.Name, panics, ready.At.Round(time.Millisecond), start.At.Round(time.Millisecond),
		loaded.At.Round(time.Millisecond), netUp.At.Round(time.Millisecond), guest.ExitCode,
		exit.At.Round(time.Millisecond), vm.Elapsed().Round(time.Millisecond))
}

// checkModules reads the module marker: nothing failed, and every module of the load order
// loaded except those PID 1 logged as finding no device, which must be exactly the ones
// allowed to lack hardware under QEMU.
func checkModules(t *testing.T, fw initramfs.Firmware, marker Line, before []Line) {
	t.Helper()
	m := modulesLoaded.FindStringSubmatch(marker.Text)
	if m == nil {
		t.Fatalf("malformed marker %q", marker.Text)
	}
	var absent []string
	for _, l := range before {
		if a := noDeviceLog.FindStringSubmatch(l.Text); a != nil {
			absent = append(absent, a[1])
		}
	}
	var allowed []string
	for _, p := range withoutDevice {
		allowed = append(allowed, strings.TrimSuffix(path.Base(p), ".ko"))
	}
	if !slices.Equal(absent, allowed) {
		t.Errorf("modules without their device: %v, want %v", absent, allowed)
	}
	want := len(fw.Info.Modules.LoadOrder) - len(absent)
	if n, _ := strconv.Atoi(m[1]); n != want || m[2] != "0" {
		t.Errorf("%q: want n=%d failed=0", marker.Text, want)
	}
}

// checkDaemonPanics: after READY the daemon panicked the given number of times, in order,
// each time restarted by the supervisor, before the guest test began.
func checkDaemonPanics(t *testing.T, panics int, afterReady []Line) {
	t.Helper()
	var seen []string
	for _, l := range afterReady {
		if strings.Contains(l.Text, TestBeginMarker) {
			break
		}
		if m := daemonPanicLog.FindStringSubmatch(l.Text); m != nil {
			seen = append(seen, m[1]+"/"+m[2])
		}
	}
	var want []string
	for i := 1; i <= panics; i++ {
		want = append(want, fmt.Sprintf("%d/%d", i, panics))
	}
	if !slices.Equal(seen, want) {
		t.Errorf("daemon panics logged between EDGEGATE-READY and the test: %v, want %v", seen, want)
	}
}
