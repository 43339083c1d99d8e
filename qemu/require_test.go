package qemu

import (
	"context"
	"errors"
	"testing"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/internal/prereq"
)

// Require installs the board's QEMU for a test or stops the test: under CI=true a tier
// that cannot run fails, elsewhere it is skipped with the reason.
func Require(tb testing.TB, b board.Board) {
	tb.Helper()
	prereq.NoErr(tb, Install(context.Background(), b))
}

// RequireUEFI is Require for the board's QEMU and its UEFI firmware.
func RequireUEFI(tb testing.TB, b board.Board) {
	tb.Helper()
	prereq.NoErr(tb, errors.Join(Install(context.Background(), b), InstallUEFI(context.Background(), b)))
}

// RequireTools is Require for commands: image.Tools for a test that builds disk images.
func RequireTools(tb testing.TB, tools ...image.Tool) {
	tb.Helper()
	prereq.NoErr(tb, InstallTools(context.Background(), tools...))
}
