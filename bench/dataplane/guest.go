package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/edgegate/edgegate/bench/dataplane/guestimage"
	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/qemu"
)

// guestBoard is the board whose firmware runs the guest part: ipvs needs the Debian
// kernel's ip_vs modules, which its firmware loads at boot.
const guestBoard = "qemu-x86_64"

// guestProgram is the package built into the guest's firmware as its test binary.
const guestProgram = "github.com/edgegate/edgegate/bench/dataplane/guest"

// ResultMarker starts each console line the guest program prints a Result on, as JSON.
const ResultMarker = "EGBENCH-DATAPLANE-RESULT "

// ErrorMarker starts the console line the guest program prints when a measurement fails.
const ErrorMarker = "EGBENCH-DATAPLANE-ERROR "

// runGuest builds firmware with the guest program as its test binary, boots it under QEMU
// (TCG, one vCPU, no network device at all) and reads the guest's results off the
// console. PID 1 runs the program once its own daemon (on the embedded demo manifests, in
// the guest's root namespace, idle afterwards) is ready; the program measures ipvs and
// nftables modes in namespaces of its own, prints its results and exits, and PID 1 powers
// off.
func runGuest(ctx context.Context, o Options, edgegateBin string) ([]Result, error) {
	conns := o.GuestConns
	if conns == 0 {
		conns = 500
	}
	timeout := o.GuestTimeout
	if timeout == 0 {
		timeout = 20 * time.Minute
	}
	b, err := board.Load(guestBoard)
	if err != nil {
		return nil, err
	}
	b.QEMU.MemoryMiB = o.GuestMemoryMiB
	if b.QEMU.MemoryMiB == 0 {
		b.QEMU.MemoryMiB = 2048
	}
	if err := qemu.Install(ctx, b); err != nil {
		return nil, err
	}
	t0 := time.Now()
	sizes := make([]string, len(o.GuestSizes))
	for i, n := range o.GuestSizes {
		sizes[i] = strconv.Itoa(n)
	}
	modes := o.GuestModes
	if len(modes) == 0 {
		modes = []string{"ipvs", "nftables"}
		if o.Load != nil {
			modes = append(modes, "nftables+fast-path")
		}
	}
	args := []string{"-edgegate=/init", "-modes=" + strings.Join(modes, ","), "-sizes=" + strings.Join(sizes, ","),
		"-conns=" + strconv.Itoa(conns), "-dir=/tmp/egbench"}
	if l := o.Load; l != nil {
		lo := l.withDefaults()
		args = append(args, "-load", fmt.Sprintf("-load-streams=%d", lo.Streams), "-load-duration="+lo.Duration.String(),
			fmt.Sprintf("-load-workers=%d", lo.Workers), fmt.Sprintf("-load-rounds=%d", lo.Rounds))
	}
	fw, err := guestimage.Build(ctx, guestimage.Spec{
		Board: b, Edgegate: edgegateBin, Program: guestProgram,
		ProgramArgs: args,
		Dir:         filepath.Join(o.Dir, "guest"), Log: o.Log,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "guest: firmware built in %v (kernel %s, %d MiB of memory, TCG)\n", since(t0), fw.Info.Kernel.Version, b.QEMU.MemoryMiB)

	t0 = time.Now()
	vm, err := qemu.Start(ctx, qemu.Options{
		Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
		// PID 1's own daemon (root namespace, demo manifests) must not resync during a
		// measurement: it shares the one vCPU.
		Cmdline: []string{"edgegate.test=1", "edgegate.flags=--sync-period=1h,--full-sync-period=1h"},
		Timeout: timeout,
		Console: func(line string) { fmt.Fprintf(o.Log, "guest| %s\n", line) },
	})
	if err != nil {
		return nil, err
	}
	defer vm.Kill()
	test, waitErr := vm.WaitForGuestTest()
	results, parseErr := guestResults(vm.Lines())
	switch {
	case waitErr != nil:
		return results, fmt.Errorf("guest: %w", waitErr)
	case parseErr != nil:
		return results, fmt.Errorf("guest: %w", parseErr)
	case test.ExitCode != 0:
		return results, fmt.Errorf("guest: the benchmark program exited %d: %s", test.ExitCode, guestError(test.Output))
	}
	if _, err := vm.WaitFor("EDGEGATE-POWEROFF"); err != nil {
		return results, fmt.Errorf("guest: %w", err)
	}
	if code, err := vm.Wait(); err != nil || code != 0 {
		return results, fmt.Errorf("guest: QEMU ended with code %d: %v", code, err)
	}
	fmt.Fprintf(o.Log, "guest: QEMU ran %v\n", since(t0))
	return results, nil
}

// guestResults reads the Results the guest printed, in order.
func guestResults(lines []qemu.Line) ([]Result, error) {
	var out []Result
	for _, l := range lines {
		_, js, ok := strings.Cut(l.Text, ResultMarker)
		if !ok {
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(js), &r); err != nil {
			return out, fmt.Errorf("console line %d: %w: %q", l.N, err, l.Text)
		}
		out = append(out, r)
	}
	return out, nil
}

// guestError is the guest program's error line, or its last lines when it printed none.
func guestError(output []string) string {
	for _, l := range output {
		if _, msg, ok := strings.Cut(l, ErrorMarker); ok {
			return msg
		}
	}
	return strings.Join(output[max(0, len(output)-10):], "\n")
}
