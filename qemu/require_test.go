package qemu

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/image"
)

// Require installs the board's QEMU for a test or stops the test: under CI=true a tier
// that cannot run fails, elsewhere it is skipped with the reason.
func Require(tb testing.TB, b board.Board) {
	tb.Helper()
	requireNoErr(tb, Install(context.Background(), b))
}

// RequireUEFI is Require for the board's QEMU and its UEFI firmware.
func RequireUEFI(tb testing.TB, b board.Board) {
	tb.Helper()
	requireNoErr(tb, errors.Join(Install(context.Background(), b), InstallUEFI(context.Background(), b)))
}

// RequireTools is Require for commands: image.Tools for a test that builds disk images.
func RequireTools(tb testing.TB, tools ...image.Tool) {
	tb.Helper()
	requireNoErr(tb, InstallTools(context.Background(), tools...))
}

func requireNoErr(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatal(err)
	}
	tb.Skip(err)
}
