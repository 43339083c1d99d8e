// Package boot measures each QEMU board's boot (issue 10, "boot"): from QEMU's process
// start to the firmware's rules being programmed, with the points in between that the
// console shows.
//
// The firmware is the real one (edgegate as PID 1, the board's Debian kernel) with a
// manifests directory of N Services baked in as its standalone source, booted with a NIC
// that reaches nothing (user-mode networking, restrict=on) and a static address, as the
// firmware tests boot it. The end point is the console marker EDGEGATE-READY: PID 1 prints
// it when the daemon reports its first successful sync, which is the first sync that
// programmed the manifests (the benchmark checks the daemon's "rules programmed" log line
// before it: a full sync of every Service). The points in between are console lines too:
// the x86 BIOS's banner and its jump to the kernel, EDGEGATE-BOOT-START (PID 1's first
// line), EDGEGATE-MODULES-LOADED, EDGEGATE-NET-UP and the daemon's "manifests loaded".
// The kernel's own start is not on the console (the firmware boots with "quiet"): a small
// program the firmware runs after READY (its test binary) reads the kernel log's
// timestamps, and the kernel's clock zero is placed on the host's timeline by READY, which
// is in both.
//
// Every board runs under TCG here (the hosts' KVM cannot run these guests, see
// FIELD-NOTES.md); qemu-arm64 is moreover translated from another instruction set, so its
// figures say more about emulation than about an arm64 gateway.
package boot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/edgegate/edgegate/bench/dataplane/guestimage"
	"github.com/edgegate/edgegate/bench/dataplane/services"
	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/qemu"
)

// Options describe a run.
type Options struct {
	// Boards to boot, in order (default every board: the qemu-* boards on their cloud
	// kernels and virtio, the hardware boards on their generic kernels with the NIC and
	// watchdog QEMU gives them, e1000e and i6300esb).
	Boards []string
	// Services baked into the firmware (default 1000, two endpoints each).
	Services int
	// Mode is the daemon's proxy mode (default nftables, the firmware's default).
	Mode string
	// Runs is the number of boots per board (default 1).
	Runs int
	// Timeout bounds one boot (default 5 min).
	Timeout time.Duration
	// Log gets progress lines and the consoles; nil discards them.
	Log io.Writer
	// Dir is scratch (default a temporary directory, removed afterwards).
	Dir string
}

// Phase is one point of a boot.
type Phase struct {
	Name string
	// At is the time since QEMU's process started.
	At time.Duration
}

// Result is one boot.
type Result struct {
	Board string
	// Run counts the board's boots from 1.
	Run int
	// Phases in the order they happened, the last being "rules programmed".
	Phases []Phase
	// ToRules is QEMU start to EDGEGATE-READY: the rules of every Service are programmed.
	ToRules time.Duration
	// Emulation says how the board ran: under TCG, and whether translated from another
	// instruction set than the host's.
	Emulation string
	// Services and Mode are what the firmware programmed.
	Services int
	Mode     string
	// Kernel is the board's Debian kernel package and version.
	Kernel string
	// Sync is how long the daemon's first full sync took, as it logged it.
	Sync time.Duration
}

// Phase names.
const (
	PhaseFirmware  = "firmware"         // the BIOS's first console line (x86: SeaBIOS's banner)
	PhaseKernelROM = "kernel loaded"    // the BIOS jumps to the kernel (x86: "Booting from ROM...")
	PhaseKernel    = "kernel start"     // the kernel's clock zero, from its log and READY
	PhasePID1      = "PID 1 start"      // EDGEGATE-BOOT-START
	PhaseModules   = "modules loaded"   // EDGEGATE-MODULES-LOADED
	PhaseDrivers   = "drivers loaded"   // EDGEGATE-DRIVERS: the devices' drivers, found on the buses
	PhaseNetwork   = "network up"       // EDGEGATE-NET-UP
	PhaseManifests = "manifests loaded" // the daemon read the Services
	PhaseRules     = "rules programmed" // EDGEGATE-READY
)

// guestAddr is the static address of the guest's NIC, as the firmware tests give it.
const guestAddr = "10.0.2.15/24"

// kmsgProgram is the test binary that reads the kernel log's timestamps after READY.
const kmsgProgram = "github.com/edgegate/edgegate/bench/boot/kmsg"

// KmsgMarker starts each line the kmsg program prints: "<µs since kernel start> <text>".
const KmsgMarker = "EGBENCH-KMSG "

// Run boots every board Runs times, one boot at a time (two would share the host's CPUs
// and slow each other), and returns one Result per boot. A failure stops the run; the
// results before it are returned with the error.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if len(o.Boards) == 0 {
		o.Boards = board.Names()
	}
	if o.Services == 0 {
		o.Services = 1000
	}
	if o.Mode == "" {
		o.Mode = "nftables"
	}
	if o.Runs == 0 {
		o.Runs = 1
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "edgegate-boot-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	manifests := filepath.Join(o.Dir, "manifests")
	if _, err := services.WriteDir(manifests, services.Spec{Count: o.Services, Endpoints: 2}); err != nil {
		return nil, err
	}
	var out []Result
	for _, name := range o.Boards {
		b, err := board.Load(name)
		if err != nil {
			return out, err
		}
		if err := qemu.Install(ctx, b); err != nil {
			return out, err
		}
		t0 := time.Now()
		fw, err := guestimage.Build(ctx, guestimage.Spec{
			Board: b, Program: kmsgProgram, Manifests: manifests, Dir: filepath.Join(o.Dir, name), Log: o.Log,
		})
		if err != nil {
			return out, err
		}
		fmt.Fprintf(o.Log, "boot: %s firmware built in %v\n", name, time.Since(t0).Round(time.Millisecond))
		for run := 1; run <= o.Runs; run++ {
			r, err := bootOnce(ctx, o, b, fw.Kernel(), fw.Initramfs())
			if err != nil {
				return out, fmt.Errorf("boot %s, run %d: %w", name, run, err)
			}
			r.Run, r.Kernel = run, fw.Info.Kernel.Package+" "+fw.Info.Kernel.Version
			fmt.Fprintf(o.Log, "boot: %s run %d: %s\n", name, run, r)
			out = append(out, r)
		}
	}
	return out, nil
}

// The daemon's log lines the phases are read from.
var (
	manifestsLine  = regexp.MustCompile(`msg="manifests loaded".* services=(\d+)`)
	programmedLine = regexp.MustCompile(`msg="rules programmed".* full=true changed=(\d+) .*took=(\S+)`)
)

func bootOnce(ctx context.Context, o Options, b board.Board, kernel, initramfs string) (Result, error) {
	r := Result{Board: b.Name, Emulation: emulation(b), Services: o.Services, Mode: o.Mode}
	vm, err := qemu.Start(ctx, qemu.Options{
		Board: b, Kernel: kernel, Initramfs: initramfs,
		Cmdline: []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr, "edgegate.flags=--proxy-mode=" + o.Mode},
		NICs:    []qemu.NIC{{Netdev: "user,restrict=on"}},
		Timeout: o.Timeout,
		Console: func(line string) { fmt.Fprintf(o.Log, "%s| %s\n", b.Name, line) },
	})
	if err != nil {
		return r, err
	}
	defer vm.Kill()
	ready, err := vm.WaitFor("EDGEGATE-READY")
	if err != nil {
		return r, err
	}
	r.ToRules = ready.At
	// What the daemon logged up to READY: its load of the manifests and the full sync that
	// programmed all of them.
	programmed := false
	seen := map[string]bool{}
	add := func(name string, at time.Duration) {
		if !seen[name] { // the first of repeated lines (one NET-UP per address)
			seen[name] = true
			r.Phases = append(r.Phases, Phase{name, at})
		}
	}
	// One console line can hold several markers written seconds apart: x86's SeaBIOS ends
	// "Booting from ROM.." without a line break, and the kernel (quiet) writes nothing
	// until PID 1's first line. Each marker has the time its own bytes arrived.
	markers := []struct{ text, phase string }{
		{"SeaBIOS", PhaseFirmware}, {"Booting from ROM", PhaseKernelROM}, {"EDGEGATE-BOOT-START", PhasePID1},
		{"EDGEGATE-MODULES-LOADED", PhaseModules}, {"EDGEGATE-DRIVERS", PhaseDrivers}, {"EDGEGATE-NET-UP ", PhaseNetwork},
	}
	for _, l := range vm.Lines()[:ready.N] {
		for _, m := range markers {
			if i := strings.Index(l.Text, m.text); i >= 0 {
				add(m.phase, l.ArrivedAt(i))
			}
		}
		switch {
		case manifestsLine.MatchString(l.Text):
			if n, _ := strconv.Atoi(manifestsLine.FindStringSubmatch(l.Text)[1]); n != o.Services {
				return r, fmt.Errorf("the daemon loaded %d Services, want %d: %q", n, o.Services, l.Text)
			}
			add(PhaseManifests, l.At)
		case programmedLine.MatchString(l.Text):
			m := programmedLine.FindStringSubmatch(l.Text)
			if n, _ := strconv.Atoi(m[1]); n != o.Services {
				return r, fmt.Errorf("the first full sync programmed %d Services, want %d: %q", n, o.Services, l.Text)
			}
			took, err := time.ParseDuration(m[2])
			if err != nil {
				return r, fmt.Errorf("the daemon's sync time in %q: %w", l.Text, err)
			}
			programmed, r.Sync = true, took
		}
	}
	if !programmed {
		return r, errors.New("no \"rules programmed\" line of a full sync of every Service before EDGEGATE-READY")
	}
	r.Phases = append(r.Phases, Phase{PhaseRules, ready.At})
	// The kernel log's timestamps come after READY, from the test binary.
	test, err := vm.WaitForGuestTest()
	if err != nil {
		return r, err
	}
	if test.ExitCode != 0 {
		return r, fmt.Errorf("the kernel log reader exited %d: %s", test.ExitCode, strings.Join(test.Output, "\n"))
	}
	if at, ok := kernelStart(test.Output, ready.At); ok {
		r.Phases = insertPhase(r.Phases, Phase{PhaseKernel, at})
	} else {
		fmt.Fprintf(o.Log, "boot: %s: no EDGEGATE-READY in the kernel log; no kernel start\n", b.Name)
	}
	if _, err := vm.WaitFor("EDGEGATE-POWEROFF"); err != nil {
		return r, err
	}
	if code, err := vm.Wait(); err != nil || code != 0 {
		return r, fmt.Errorf("QEMU ended with code %d: %v", code, err)
	}
	return r, nil
}

// kernelStart places the kernel's clock zero on the host's timeline: READY arrived at
// readyAt and the kernel logged it at its own time t, so zero was at readyAt - t (the
// console's delay, well under a millisecond per line, is left in).
func kernelStart(output []string, readyAt time.Duration) (time.Duration, bool) {
	for _, l := range output {
		_, rest, ok := strings.Cut(l, KmsgMarker)
		if !ok {
			continue
		}
		// PID 1's records carry its prefix: "edgegate: EDGEGATE-READY".
		usec, text, _ := strings.Cut(rest, " ")
		if !strings.HasSuffix(strings.TrimSpace(text), "EDGEGATE-READY") {
			continue
		}
		us, err := strconv.ParseInt(usec, 10, 64)
		if err != nil {
			return 0, false
		}
		return readyAt - time.Duration(us)*time.Microsecond, true
	}
	return 0, false
}

// insertPhase puts p among phases in time order.
func insertPhase(phases []Phase, p Phase) []Phase {
	i := 0
	for i < len(phases) && phases[i].At <= p.At {
		i++
	}
	return append(phases[:i], append([]Phase{p}, phases[i:]...)...)
}

// emulation describes how QEMU runs the board on this host.
func emulation(b board.Board) string {
	if b.Arch == runtime.GOARCH {
		return "TCG (no KVM), same instruction set as the host"
	}
	return fmt.Sprintf("TCG (no KVM), %s translated on an %s host", b.Arch, runtime.GOARCH)
}

func (r Result) String() string {
	var parts []string
	for _, p := range r.Phases {
		parts = append(parts, fmt.Sprintf("%s %v", p.Name, p.At.Round(time.Millisecond)))
	}
	return fmt.Sprintf("%s; first full sync of %d Services took %v; %s", strings.Join(parts, ", "), r.Services, r.Sync.Round(time.Millisecond), r.Emulation)
}

// Columns are the phases in boot order, for tables of Results.
var Columns = []string{PhaseFirmware, PhaseKernelROM, PhaseKernel, PhasePID1, PhaseModules, PhaseDrivers,
	PhaseNetwork, PhaseManifests, PhaseRules}

// At is when the boot reached the named phase, since QEMU's start; false if it did not
// show (a board without a BIOS banner).
func (r Result) At(name string) (time.Duration, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p.At, true
		}
	}
	return 0, false
}
