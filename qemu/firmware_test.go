package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
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
	"github.com/edgegate/edgegate/internal/prereq"
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
	// daemonPanicLog matches PID 1's line for a run of the daemon's process that ended in a
	// deliberate panic.
	daemonPanicLog = regexp.MustCompile(`msg="the daemon's run ended" run=\d+ reason=panic how="exited with status 2: panic: edgegate\.test\.panic: deliberate panic (\d+) of (\d+)`)
	// daemonStartLog matches the daemon's first line on every start.
	daemonStartLog = regexp.MustCompile(`msg=starting .*manifests=/etc/edgegate/manifests`)
	// kernelTrouble are console lines that mean the guest kernel went wrong, even when
	// everything else passed.
	kernelTrouble = []string{"Kernel panic", "Oops", "BUG:"}
)

// faultBootTests are the guest tests that only their own boots run (faults_test.go,
// cluster_faults_test.go, watchdog_test.go): the firmware boot skips them.
const faultBootTests = "^(TestFaults|TestClusterFaults|TestWatchdogHang|TestWatchdogHealthy)$"

// poweredOff waits for the guest's clean power-off and QEMU's exit with code 0, fails the
// test for each console line that says the guest kernel went wrong, and returns the
// power-off marker.
func poweredOff(t *testing.T, vm *VM) Line {
	t.Helper()
	exit := qemuExited(t, vm)
	for _, l := range vm.Lines() {
		for _, bad := range kernelTrouble {
			if strings.Contains(l.Text, bad) {
				t.Errorf("console line %d: %q", l.N, l.Text)
			}
		}
	}
	return exit
}

// TestFirmwareBoot builds the real firmware of each QEMU board (edgegate as /init, the
// standalone manifests of testdata/firmwaretest/manifests baked in, the guest test
// testdata/firmwaretest as /edgegate-test) and boots it twice: once with a persistent data
// disk, once without one and with the daemon panicking after its syncs
// (edgegate.test.panic). Both times the console must show the firmware contract's markers
// in order, every module loaded, the data partition mounted (or said to be absent), the NIC
// up with its address, EDGEGATE-READY before the guest test, the guest test passing (PID 1,
// modules, NIC, data partition, rules, TCP through the ClusterIP between namespaces inside
// the guest) and a clean power-off with no kernel trouble; the data disk must come back
// clean, holding what the guest wrote.
func TestFirmwareBoot(t *testing.T) {
	eachBoard(t, firmwareBoards, Require, 10*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		log := testLog(t)
		fw, buildTime := buildImage(ctx, t, log, TestImage{
			Board:     b,
			Init:      "github.com/edgegate/edgegate/daemon",
			Test:      "github.com/edgegate/edgegate/qemu/testdata/firmwaretest",
			TestArgs:  []string{"-test.v=test2json", "-test.timeout=2m", "-test.skip=" + faultBootTests},
			Manifests: "testdata/firmwaretest/manifests",
		})
		// What a gateway boots: the same /init and modules without the test binary and
		// the manifests, as `make firmware` packs it.
		cache, err := kernelCache(ctx)
		if err != nil {
			t.Fatal(err)
		}
		releaseSpec := initramfs.FirmwareSpec{Spec: initramfs.Spec{Board: b, Init: filepath.Join(fw.Dir, "init")}, CacheDir: cache, OutDir: t.TempDir()}
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
		t.Run("boot", func(t *testing.T) { bootFirmware(ctx, t, b, fw, 0, makeDataDisk(ctx, t)) })
		t.Run("panic", func(t *testing.T) { bootFirmware(ctx, t, b, fw, firmwarePanics, "") })
	})
}

// bootFirmware boots fw once (with the daemon panicking panics times after its syncs when
// panics > 0, with disk as its data disk when set) and checks the console from the first
// marker to QEMU's exit, then the disk.
func bootFirmware(ctx context.Context, t *testing.T, b board.Board, fw initramfs.Firmware, panics int, disk string) {
	cmdline := []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr}
	if panics > 0 {
		cmdline = append(cmdline, fmt.Sprintf("edgegate.test.panic=%d", panics))
	}
	var disks []Disk
	if disk != "" {
		disks = append(disks, Disk{Path: disk})
	}
	vm := startVM(ctx, t, Options{
		Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(), Cmdline: cmdline,
		// A NIC with no way out: user-mode networking restricted to the emulator itself.
		NICs:    []NIC{{Netdev: "user,restrict=on"}},
		Disks:   disks,
		Timeout: 4 * time.Minute,
	})
	start, loaded := bootMarkers(t, vm, fw)
	dataAt := "none"
	if disk != "" {
		// Between the modules (virtio_blk) and the network.
		data := waitFor(t, vm, "EDGEGATE-DATA")
		if data.Text != dataMarker {
			t.Errorf("%q, want %q", data.Text, dataMarker)
		}
		dataAt = data.At.Round(time.Millisecond).String()
	}
	netUp := waitFor(t, vm, "EDGEGATE-NET-UP")
	if want := "EDGEGATE-NET-UP eth0 " + guestAddr; netUp.Text != want {
		t.Errorf("%q, want %q", netUp.Text, want)
	}
	ready := waitFor(t, vm, "EDGEGATE-READY")
	// WaitForGuestTest reads on from READY: the test can only have begun after it.
	guest := runGuest(t, vm)
	exit := poweredOff(t, vm)
	lines := vm.Lines()
	if panics > 0 {
		checkDaemonPanics(t, panics, lines[ready.N:])
	}
	checkDataLog(t, disk != "", lines)
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
		"modules loaded at %v, data partition mounted at %s, eth0 up at %v; guest test exited %d; power-off at %v, QEMU exited after %v",
		b.Name, panics, ready.At.Round(time.Millisecond), start.At.Round(time.Millisecond),
		loaded.At.Round(time.Millisecond), dataAt, netUp.At.Round(time.Millisecond), guest.ExitCode,
		exit.At.Round(time.Millisecond), vm.Elapsed().Round(time.Millisecond))
	if disk != "" {
		checkDataDisk(ctx, t, disk)
	}
}

// The data disk of the "boot" run, made as an installer would make the data partition,
// and read back after the power-off. testdata/firmwaretest/datapart_test.go checks the
// guest's side.
const (
	dataMarker = "EDGEGATE-DATA /dev/vda /var/lib/edgegate"
	// dataConfig is the partition's config.yaml: it moves the daemon's healthz, which the
	// guest test sees, and keeps it standalone on the baked manifests.
	dataConfig = "healthzBindAddress: 127.0.0.1:10257\n"
	// What the guest test writes there, without fsync (the same two constants are there).
	guestFile        = "/written-by-the-guest-test"
	guestFileContent = "written inside the guest before the power-off\n"
)

// PID 1's lines about the data partition.
const (
	noDataLog     = `msg="no persistent data partition; state lives in memory until power-off"`
	dataConfigLog = `msg="daemon configuration" file=/var/lib/edgegate/config.yaml from="data partition"`
	dataUnmounted = `msg=unmounted target=/var/lib/edgegate dev=/dev/vda`
)

// e2fsTool finds an e2fsprogs command (in /usr/sbin, which a user's PATH may lack).
func e2fsTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	prereq.Missing(t, "%s not found: install Debian's e2fsprogs (make deps-qemu)", name)
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// makeDataDisk makes a 16 MiB disk holding an ext4 file system labelled edgegate-data (no
// partition table: PID 1 finds it by the label) with dataConfig as its config.yaml,
// without root.
func makeDataDisk(ctx context.Context, t *testing.T) string {
	t.Helper()
	return makeDataDiskWith(ctx, t, map[string]string{"config.yaml": dataConfig})
}

// makeDataDiskWith is makeDataDisk with the given files (name: content, 0600) at the
// file system's root.
func makeDataDiskWith(ctx context.Context, t *testing.T, files map[string]string) string {
	t.Helper()
	mke2fs := e2fsTool(t, "mke2fs")
	content := t.TempDir()
	for name, c := range files {
		if err := os.WriteFile(filepath.Join(content, name), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(t.TempDir(), "data.img")
	// -e continue (mke2fs's default, spelled out) lets the guest test tell PID 1's
	// errors=remount-ro from the file system's own setting.
	out, err := exec.CommandContext(ctx, mke2fs, "-q", "-t", "ext4", "-L", "edgegate-data", "-e", "continue", "-d", content, img, "16M").CombinedOutput()
	if err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	return img
}

// checkDataLog: with a disk the console says the daemon got the partition's configuration
// and the partition was unmounted at power-off; without one it says there is none, once,
// and no EDGEGATE-DATA marker comes.
func checkDataLog(t *testing.T, withDisk bool, lines []Line) {
	t.Helper()
	count := func(s string) int {
		n := 0
		for _, l := range lines {
			if strings.Contains(l.Text, s) {
				n++
			}
		}
		return n
	}
	if !withDisk {
		if n := count(noDataLog); n != 1 {
			t.Errorf("%d console lines %s, want 1", n, noDataLog)
		}
		if n := count("EDGEGATE-DATA"); n != 0 {
			t.Errorf("%d EDGEGATE-DATA markers without a disk", n)
		}
		return
	}
	for _, want := range []string{dataConfigLog, dataUnmounted} {
		if count(want) != 1 {
			t.Errorf("no console line %s", want)
		}
	}
	if n := count(noDataLog); n != 0 {
		t.Errorf("the console says there is no data partition")
	}
}

// checkDataDisk reads the data disk after the power-off: its file system is consistent
// (e2fsck -fn), was unmounted cleanly (no needs_recovery feature: e2fsck -n skips the
// journal and passes without the unmount, as a run with the unmount left out showed), and
// holds what the guest test wrote without fsync, which only PID 1's sync took to the disk
// (debugfs reads through the journal, so the file shows even without the unmount).
func checkDataDisk(ctx context.Context, t *testing.T, img string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, e2fsTool(t, "e2fsck"), "-fn", img).CombinedOutput()
	if err != nil {
		t.Errorf("e2fsck -fn %s: %v\n%s", img, err, out)
	} else {
		t.Logf("e2fsck -fn: exit 0, %s", lastLine(out))
	}
	out, err = exec.CommandContext(ctx, e2fsTool(t, "dumpe2fs"), "-h", img).Output()
	if err != nil {
		t.Fatalf("dumpe2fs -h %s: %v", img, err)
	}
	var state, features string
	for _, l := range strings.Split(string(out), "\n") {
		k, v, _ := strings.Cut(l, ":")
		switch k {
		case "Filesystem state":
			state = strings.TrimSpace(v)
		case "Filesystem features":
			features = strings.TrimSpace(v)
		}
	}
	if state != "clean" || slices.Contains(strings.Fields(features), "needs_recovery") {
		t.Errorf("the data file system was not unmounted cleanly: state %q, features %q", state, features)
	}
	out, err = exec.CommandContext(ctx, e2fsTool(t, "debugfs"), "-R", "cat "+guestFile, img).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s: %v", guestFile, err)
	}
	if string(out) != guestFileContent {
		t.Errorf("%s on the disk holds %q, want %q", guestFile, out, guestFileContent)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// checkModules reads the module marker: nothing failed, and every module of the load order
// loaded except those PID 1 logged as finding no device, which must be exactly the ones
// allowed to lack hardware under QEMU.
// bootMarkers waits for the firmware's first two console markers and checks the module
// loading between them.
func bootMarkers(t *testing.T, vm *VM, fw initramfs.Firmware) (start, loaded Line) {
	t.Helper()
	start = waitFor(t, vm, "EDGEGATE-BOOT-START")
	loaded = waitFor(t, vm, "EDGEGATE-MODULES-LOADED")
	checkModules(t, fw, loaded, vm.Lines()[start.N:loaded.N])
	return start, loaded
}

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
// each time ending the daemon's process (never PID 1) that the supervisor started again,
// before the guest test began.
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
