package qemu

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/initramfs"
)

// eachBoard runs body as a parallel subtest for each named board, loaded, with require
// met (Require, RequireUEFI, ...) and a context that ends after timeout.
func eachBoard(t *testing.T, names []string, require func(testing.TB, board.Board), timeout time.Duration,
	body func(ctx context.Context, t *testing.T, b board.Board)) {
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := board.Load(name)
			if err != nil {
				t.Fatal(err)
			}
			require(t, b)
			// Cancelled at cleanup, not when body returns: body's parallel subtests run
			// after it.
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			t.Cleanup(cancel)
			body(ctx, t, b)
		})
	}
}

// testLog is a logger that writes to the test log.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

// testWriter sends the build's log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// buildImage builds a test image in a temporary directory and returns it with the time
// the build took.
func buildImage(ctx context.Context, t *testing.T, log *slog.Logger, spec TestImage) (initramfs.Firmware, time.Duration) {
	t.Helper()
	start := time.Now()
	fw, err := BuildTestImage(ctx, log, t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return fw, time.Since(start)
}

// startVM starts QEMU with its console lines in the test log (unless opts has a Console
// of its own), and kills it when the test ends.
func startVM(ctx context.Context, t *testing.T, opts Options) *VM {
	t.Helper()
	if opts.Console == nil {
		opts.Console = func(line string) { t.Log("console: " + line) }
	}
	vm, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return vm
}

// waitFor waits for a console marker, failing the test if it does not come.
func waitFor(t *testing.T, vm *VM, marker string) Line {
	t.Helper()
	l, err := vm.WaitFor(marker)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// runGuest waits for the guest test's run and reports its results as subtests of "guest".
func runGuest(t *testing.T, vm *VM) GuestTest {
	t.Helper()
	guest, err := vm.WaitForGuestTest()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("guest", guest.Report)
	return guest
}

// guestResults is runGuest, then the guest test's results.
func guestResults(t *testing.T, vm *VM) (GuestTest, []Result) {
	t.Helper()
	guest := runGuest(t, vm)
	results, err := guest.Results()
	if err != nil {
		t.Fatal(err)
	}
	return guest, results
}

// qemuExited waits for the guest's power-off marker and QEMU's exit with code 0.
func qemuExited(t *testing.T, vm *VM) Line {
	t.Helper()
	exit := waitFor(t, vm, "EDGEGATE-POWEROFF")
	if code, err := vm.Wait(); err != nil || code != 0 {
		t.Fatalf("QEMU ended with code %d, %v", code, err)
	}
	return exit
}
