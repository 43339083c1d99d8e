package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/edgegate/edgegate/board"
)

// installing serialises apt-get runs: parallel tests for two boards would otherwise
// fight over dpkg's lock.
var installing sync.Mutex

// Install makes sure the board's QEMU binary is there, installing its Debian package
// (without recommends) when it is missing and we are root.
func Install(ctx context.Context, b board.Board) error {
	installing.Lock()
	defer installing.Unlock()
	if _, err := exec.LookPath(b.QEMU.Binary); err == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("qemu: %s missing and not root to install %s", b.QEMU.Binary, b.QEMU.Package)
	}
	for _, args := range [][]string{
		{"update", "-qq"},
		{"install", "-y", "-qq", "--no-install-recommends", b.QEMU.Package},
	} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("qemu: apt-get %v: %w: %s", args, err, bytes.TrimSpace(out))
		}
	}
	if _, err := exec.LookPath(b.QEMU.Binary); err != nil {
		return fmt.Errorf("qemu: %s still missing after installing %s: %w", b.QEMU.Binary, b.QEMU.Package, err)
	}
	return nil
}

// Require installs the board's QEMU for a test or stops the test: under CI=true a tier
// that cannot run fails, elsewhere it is skipped with the reason.
func Require(tb testing.TB, b board.Board) {
	tb.Helper()
	if err := Install(context.Background(), b); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
}
