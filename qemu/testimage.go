package qemu

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/initramfs"
)

// TestImage is firmware built for one test: Go packages compiled for the board.
type TestImage struct {
	Board board.Board
	// Init is the import path of the main package that becomes /init, e.g.
	// github.com/edgegate/edgegate/daemon.
	Init string
	// Test, when set, is the import path of a package whose tests become /edgegate-test,
	// run with TestArgs when the guest boots with edgegate.test=1. Include -test.v (or
	// -test.v=test2json) so that Report can read the results.
	Test     string
	TestArgs []string
	// Config, Manifests and UpdateKeys are baked in as in initramfs.Spec.
	Config, Manifests string
	UpdateKeys        []string
	// Version is stamped into /init as the daemon's version (-X main.version), what a
	// release build does; empty leaves the daemon's "dev".
	Version string
	// Tags are build tags for /init: egfault compiles in the fault hook
	// (daemon/internal/fault), which no shipped image has.
	Tags []string
}

// BuildTestImage compiles the image's programs as static binaries for the board's arch
// into dir and builds the firmware there. Kernel packages are cached in the module's
// out/kernels, shared with `make firmware`.
func BuildTestImage(ctx context.Context, log *slog.Logger, dir string, img TestImage) (initramfs.Firmware, error) {
	cache, err := kernelCache(ctx)
	if err != nil {
		return initramfs.Firmware{}, err
	}
	initBin := filepath.Join(dir, "init")
	ldflags := "-s -w"
	if img.Version != "" {
		ldflags += " -X main.version=" + img.Version
	}
	extra := []string{"-ldflags=" + ldflags}
	if len(img.Tags) > 0 {
		extra = append(extra, "-tags="+strings.Join(img.Tags, ","))
	}
	if err := goBuild(ctx, img.Board.Arch, "build", img.Init, initBin, extra...); err != nil {
		return initramfs.Firmware{}, err
	}
	var testBin string
	if img.Test != "" {
		testBin = filepath.Join(dir, "edgegate-test")
		if err := goBuild(ctx, img.Board.Arch, "test", img.Test, testBin, "-c"); err != nil {
			return initramfs.Firmware{}, err
		}
	}
	return initramfs.BuildFirmware(ctx, log, initramfs.FirmwareSpec{
		Spec: initramfs.Spec{
			Board: img.Board, Init: initBin, Config: img.Config, Manifests: img.Manifests,
			TestBinary: testBin, TestArgs: img.TestArgs, UpdateKeys: img.UpdateKeys,
		},
		CacheDir: cache, OutDir: dir,
	})
}

// goBuild runs `go build` or `go test -c` for a static linux/arch binary, stripped like the
// release build (so image sizes and boot times are the real ones) unless extra holds its
// own -ldflags.
func goBuild(ctx context.Context, arch, verb, pkg, out string, extra ...string) error {
	args := append([]string{verb}, extra...)
	if !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "-ldflags=") }) {
		args = append(args, "-ldflags=-s -w")
	}
	args = append(args, "-trimpath", "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(msg))
	}
	return nil
}

// kernelCache returns out/kernels at the root of the module the tests run in.
func kernelCache(ctx context.Context) (string, error) {
	return outDir(ctx, "kernels")
}

// debianCache returns out/debian, where `make image` keeps other unpacked Debian packages
// (systemd-boot-efi).
func debianCache(ctx context.Context) (string, error) {
	return outDir(ctx, "debian")
}

// outDir returns out/<name> at the root of the module the tests run in.
func outDir(ctx context.Context, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("out/%s: not inside a Go module", name)
	}
	return filepath.Join(filepath.Dir(gomod), "out", name), nil
}
