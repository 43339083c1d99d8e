package qemu

import (
	"context"
	"log/slog"
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
	for _, name := range board.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := board.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			Require(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			buildStart := time.Now()
			fw, err := BuildTestImage(ctx, slog.New(slog.NewTextHandler(testWriter{t}, nil)), t.TempDir(), TestImage{
				Board:    b,
				Init:     "github.com/edgegate/edgegate/qemu/testdata/smokeinit",
				Test:     "github.com/edgegate/edgegate/qemu/testdata/guesttest",
				TestArgs: []string{"-test.v=test2json"},
			})
			if err != nil {
				t.Fatal(err)
			}
			buildTime := time.Since(buildStart)
			vm, err := Start(ctx, Options{
				Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
				Cmdline: []string{"edgegate.test=1"},
				Timeout: 3 * time.Minute,
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
			guest, err := vm.WaitForGuestTest()
			if err != nil {
				t.Fatal(err)
			}
			t.Run("guest", guest.Report)
			if _, err := vm.WaitFor("EDGEGATE-POWEROFF"); err != nil {
				t.Fatal(err)
			}
			code, err := vm.Wait()
			if err != nil || code != 0 {
				t.Fatalf("QEMU ended with code %d, %v", code, err)
			}
			t.Logf("%s: kernel %s %s; %d modules (built in: %v); initramfs %d bytes gz; built in %v; "+
				"/init started at %v, modules loaded at %v, QEMU exited after %v",
				b.Name, fw.Info.Kernel.Package, fw.Info.Kernel.Version, len(fw.Info.Modules.LoadOrder),
				fw.Info.Modules.Builtin, fw.Info.Initramfs.Size, buildTime.Round(time.Millisecond),
				start.At.Round(time.Millisecond), loaded.At.Round(time.Millisecond),
				vm.Elapsed().Round(time.Millisecond))
		})
	}
}

// testWriter sends the build's log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
