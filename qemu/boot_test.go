package qemu

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
)

// modulesLoaded matches the contract's module marker; noDevice matches smokeinit's line
// for a module whose init found no hardware.
var (
	modulesLoaded = regexp.MustCompile(`EDGEGATE-MODULES-LOADED n=(\d+) failed=(\d+)`)
	noDevice      = regexp.MustCompile(`smokeinit: module (\S+): no device`)
)

// withoutDevice are the modules allowed to find no hardware under QEMU: the harness boots
// the kernel directly, without UEFI, so efivarfs has no EFI variables to serve.
var withoutDevice = []string{"kernel/fs/efivarfs/efivarfs.ko"}

// TestBootSmoke boots every board's kernel with the harness's stand-in PID 1
// (testdata/smokeinit): the initramfs unpacks, /init runs, every module of the board's
// load order loads, a Go test binary runs in the guest and its results come back as
// subtests, and the guest powers off cleanly.
func TestBootSmoke(t *testing.T) {
	eachBoard(t, board.Names(), Require, 10*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		fw, buildTime := buildImage(ctx, t, testLog(t), TestImage{
			Board:    b,
			Init:     "github.com/edgegate/edgegate/qemu/testdata/smokeinit",
			Test:     "github.com/edgegate/edgegate/qemu/testdata/guesttest",
			TestArgs: []string{"-test.v=test2json"},
		})
		vm := startVM(ctx, t, Options{
			Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
			Cmdline: []string{"edgegate.test=1"},
			Timeout: 3 * time.Minute,
		})
		start := waitFor(t, vm, "EDGEGATE-BOOT-START")
		loaded := waitFor(t, vm, "EDGEGATE-MODULES-LOADED")
		m := modulesLoaded.FindStringSubmatch(loaded.Text)
		if m == nil {
			t.Fatalf("malformed marker %q", loaded.Text)
		}
		if n, _ := strconv.Atoi(m[1]); n != len(fw.Info.Modules.LoadOrder) || m[2] != "0" {
			t.Errorf("%q: want n=%d failed=0", loaded.Text, len(fw.Info.Modules.LoadOrder))
		}
		var absent []string
		for _, l := range vm.Lines()[:loaded.N] {
			if m := noDevice.FindStringSubmatch(l.Text); m != nil {
				absent = append(absent, m[1])
			}
		}
		if !slices.Equal(absent, withoutDevice) {
			t.Errorf("modules without their device: %v, want %v", absent, withoutDevice)
		}
		runGuest(t, vm)
		qemuExited(t, vm)
		t.Logf("%s: kernel %s %s; %d modules (built in: %v); initramfs %d bytes gz; built in %v; "+
			"/init started at %v, modules loaded at %v, QEMU exited after %v",
			b.Name, fw.Info.Kernel.Package, fw.Info.Kernel.Version, len(fw.Info.Modules.LoadOrder),
			fw.Info.Modules.Builtin, fw.Info.Initramfs.Size, buildTime.Round(time.Millisecond),
			start.At.Round(time.Millisecond), loaded.At.Round(time.Millisecond),
			vm.Elapsed().Round(time.Millisecond))
	})
}
