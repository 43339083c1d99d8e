// Package guestimage builds the firmware the benchmarks boot under QEMU: a board's Debian
// kernel and an initramfs with edgegate as /init, optionally baked manifests and a program
// of the bench module as the test binary PID 1 runs (kernel command line edgegate.test=1).
// It is qemu.BuildTestImage for code outside the edgegate module: the kernel packages come
// from the checkout's out/kernels cache, shared with `make firmware` and the QEMU tests,
// rather than from a cache of the bench module's own.
package guestimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/initramfs"
)

// Spec says what to build.
type Spec struct {
	Board board.Board
	// Edgegate is a prebuilt static edgegate binary for the board's arch; empty builds the
	// checkout's ./daemon for it, stripped like a release.
	Edgegate string
	// Program, when set, is the import path of a main package of the bench module, built
	// for the board's arch as the test binary; ProgramArgs is its argument line (no spaces
	// inside an argument).
	Program     string
	ProgramArgs []string
	// Manifests, when set, is a directory of manifests baked in as the firmware's
	// standalone source (/etc/edgegate/manifests).
	Manifests string
	// Dir receives the binaries and the firmware (vmlinuz, initramfs.cpio.gz, build.json).
	Dir string
	// Log gets the build's log lines; nil discards them.
	Log io.Writer
}

// Build builds the firmware.
func Build(ctx context.Context, s Spec) (initramfs.Firmware, error) {
	if s.Log == nil {
		s.Log = io.Discard
	}
	root, err := ModuleRoot(ctx)
	if err != nil {
		return initramfs.Firmware{}, err
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return initramfs.Firmware{}, err
	}
	init := s.Edgegate
	if init == "" {
		init = filepath.Join(s.Dir, "edgegate")
		if err := goBuild(ctx, root, s.Board.Arch, "./daemon", init); err != nil {
			return initramfs.Firmware{}, err
		}
	}
	var program string
	if s.Program != "" {
		program = filepath.Join(s.Dir, "edgegate-test")
		if err := goBuild(ctx, filepath.Join(root, "bench"), s.Board.Arch, s.Program, program); err != nil {
			return initramfs.Firmware{}, err
		}
	}
	return initramfs.BuildFirmware(ctx, slog.New(slog.NewTextHandler(s.Log, nil)), initramfs.FirmwareSpec{
		Spec:     initramfs.Spec{Board: s.Board, Init: init, Manifests: s.Manifests, TestBinary: program, TestArgs: s.ProgramArgs},
		CacheDir: filepath.Join(root, "out", "kernels"), OutDir: filepath.Join(s.Dir, "firmware"),
	})
}

// ModuleRoot is the edgegate module's directory: the checkout bench's go.mod replaces the
// module with. It asks the go command, so it works from inside bench/ or the checkout.
func ModuleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/edgegate/edgegate").Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(exit.Stderr))
		}
		return "", fmt.Errorf("go list -m github.com/edgegate/edgegate (run inside bench/): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// goBuild builds pkg as a static linux/arch binary, stripped like the firmware's own, in
// the module at dir.
func goBuild(ctx context.Context, dir, arch, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s in %s: %w: %s", pkg, arch, dir, err, bytes.TrimSpace(msg))
	}
	return nil
}
