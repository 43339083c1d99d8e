package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/image"
)

// installing serialises apt-get runs: parallel tests for two boards would otherwise
// fight over dpkg's lock.
var installing sync.Mutex

// Install makes sure the board's QEMU binary is there, installing its Debian package
// (without recommends) when it is missing and we are root.
func Install(ctx context.Context, b board.Board) error {
	return ensure(ctx, b.QEMU.Package, func() error {
		_, err := exec.LookPath(b.QEMU.Binary)
		return err
	})
}

// InstallUEFI makes sure the board's UEFI firmware files (board.QEMU.UEFI) are there,
// installing their Debian package when they are missing and we are root.
func InstallUEFI(ctx context.Context, b board.Board) error {
	u := b.QEMU.UEFI
	if u == nil {
		return fmt.Errorf("qemu: board %s has no qemu.uefi section", b.Name)
	}
	return ensure(ctx, u.Package, func() error {
		for _, f := range []string{u.Code, u.Vars} {
			if _, err := os.Stat(f); err != nil {
				return err
			}
		}
		return nil
	})
}

// InstallTools makes sure the commands are there (image.LookTool), installing their
// Debian packages when they are missing and we are root.
func InstallTools(ctx context.Context, tools ...image.Tool) error {
	for _, t := range tools {
		if err := ensure(ctx, t.Package, func() error {
			_, err := image.LookTool(t.Command)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// ensure installs pkg when present fails, and checks again after.
func ensure(ctx context.Context, pkg string, present func() error) error {
	installing.Lock()
	defer installing.Unlock()
	if present() == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("qemu: %s is needed (%v) and we are not root to install it", pkg, present())
	}
	for _, args := range [][]string{
		{"update", "-qq"},
		{"install", "-y", "-qq", "--no-install-recommends", pkg},
	} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("qemu: apt-get %v: %w: %s", args, err, bytes.TrimSpace(out))
		}
	}
	if err := present(); err != nil {
		return fmt.Errorf("qemu: still missing after installing %s: %w", pkg, err)
	}
	return nil
}
