package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/qemu"
)

// runBoot boots a board's firmware under QEMU as the demo's gateway: its NICs on taps that
// already exist in the network namespace egdemo runs in (ip netns exec NS egdemo boot ...).
// With -uefi-vars it boots the first disk, a disk image, through the board's UEFI firmware
// with that NVRAM, and the guest may reboot (an update's trial boot); with -kernel and
// -initramfs QEMU loads them directly. The console goes to -console; stdout gets one line
// per firmware marker (boot, modules, ready, update steps, power-off), with the time since
// QEMU started, and "ready" once the rules are first programmed. It returns when the guest
// powers off, QEMU fails, or a signal ends the demo (then QEMU is killed: the gateway is a
// throwaway guest).
func runBoot(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("boot", flag.ExitOnError)
	boardName := fs.String("board", "qemu-x86_64", "the board")
	kernel := fs.String("kernel", "", "the firmware's kernel (without -uefi-vars)")
	initrd := fs.String("initramfs", "", "the firmware's initramfs (without -uefi-vars)")
	vars := fs.String("uefi-vars", "", "the machine's UEFI variable store (NVRAM): boot the first -disk through UEFI")
	console := fs.String("console", "", "file the guest's console is written to (required)")
	lifetime := fs.Duration("timeout", 2*time.Hour, "QEMU is killed after this long")
	var taps, disks, cmdline listFlag
	fs.Var(&taps, "tap", "tap device in this namespace for the next NIC: eth0 first (repeatable)")
	fs.Var(&disks, "disk", "raw disk image, as the board's next disk (repeatable)")
	fs.Var(&cmdline, "append", "kernel command line argument (repeatable; not with -uefi-vars)")
	_ = fs.Parse(args)
	direct := *kernel != "" && *initrd != ""
	if *console == "" || direct == (*vars != "") || (*vars != "" && (len(disks) == 0 || len(cmdline) > 0)) {
		return errors.New("boot: -console, and either -kernel with -initramfs or -uefi-vars with a -disk (and no -append), are required")
	}
	b, err := board.Load(*boardName)
	if err != nil {
		return err
	}
	opts := qemu.Options{Board: b, Kernel: *kernel, Initramfs: *initrd, Cmdline: cmdline, Timeout: *lifetime,
		UEFIVars: *vars, AllowReboot: *vars != ""}
	for _, t := range taps {
		// script=no: the demo made the tap and put it on its bridge already. The tap lives in
		// the demo's namespace, so the guest reaches nothing beyond the lab.
		opts.NICs = append(opts.NICs, qemu.NIC{Netdev: "tap,ifname=" + t + ",script=no,downscript=no"})
	}
	for _, d := range disks {
		opts.Disks = append(opts.Disks, qemu.Disk{Path: d})
	}
	out, err := os.Create(*console)
	if err != nil {
		return err
	}
	defer out.Close()
	started, ready := time.Now(), false
	opts.Console = func(line string) {
		fmt.Fprintln(out, line)
		for _, m := range bootMarkers {
			i := strings.Index(line, m)
			if i < 0 {
				continue
			}
			// The firmware's console starts with the BIOS's terminal resets on the same line.
			fmt.Printf("egdemo: %6.2fs  %s\n", time.Since(started).Seconds(), line[i:])
			if m == "EDGEGATE-READY" && !ready {
				ready = true
				fmt.Println("ready")
			}
		}
	}
	vm, err := qemu.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer vm.Kill()
	fmt.Printf("egdemo: booting %s under QEMU (TCG): %s\n", b.Name, strings.Join(vm.CommandLine(), " "))
	code, err := vm.Wait()
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	fmt.Printf("egdemo: the guest powered off (QEMU exit %d)\n", code)
	return nil
}

// bootMarkers are the console markers of PID 1 (package pid1) that runBoot reports.
var bootMarkers = []string{"EDGEGATE-BOOT-START", "EDGEGATE-MODULES-LOADED", "EDGEGATE-READY", "EDGEGATE-UPDATE", "EDGEGATE-POWEROFF"}
