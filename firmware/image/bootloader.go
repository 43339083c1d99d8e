package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/edgegate/edgegate/board/debian"
)

// BootLoaderPackage is the Debian package systemd-boot's EFI binaries come from.
const BootLoaderPackage = "systemd-boot-efi"

// BootLoader is systemd-boot's EFI binary for one architecture.
type BootLoader struct {
	// Package is the Debian package it was taken from, in the exact version.
	Package debian.Package `json:"package"`
	// File is the binary's path.
	File string `json:"-"`
	// SHA256 is the binary's lowercase hex digest.
	SHA256 string `json:"sha256"`
}

// efiArch maps Debian architectures to the UEFI names of the removable-media boot path
// (EFI/BOOT/BOOT<arch>.EFI) and of systemd-boot's binary (systemd-boot<arch>.efi).
var efiArch = map[string]string{"amd64": "x64", "arm64": "aa64"}

// BootPath is where UEFI firmware looks for a boot loader on a disk it has no boot option
// for: the removable-media path of the architecture, EFI/BOOT/BOOTX64.EFI on amd64.
func BootPath(arch string) (string, error) {
	a, ok := efiArch[arch]
	if !ok {
		return "", fmt.Errorf("arch %q: no UEFI boot path (want amd64 or arm64)", arch)
	}
	return "EFI/BOOT/BOOT" + strings.ToUpper(a) + ".EFI", nil
}

// FetchBootLoader returns systemd-boot's EFI binary for arch from Debian's systemd-boot-efi
// package of that architecture, unpacked into cacheDir (never installed on the host).
func FetchBootLoader(ctx context.Context, log *slog.Logger, arch, cacheDir string) (BootLoader, error) {
	a, ok := efiArch[arch]
	if !ok {
		return BootLoader{}, fmt.Errorf("boot loader: arch %q: want amd64 or arm64", arch)
	}
	pkg, err := debian.FetchPackage(ctx, log, arch, BootLoaderPackage, cacheDir)
	if err != nil {
		return BootLoader{}, fmt.Errorf("boot loader: %w", err)
	}
	file := filepath.Join(pkg.Dir, "usr", "lib", "systemd", "boot", "efi", "systemd-boot"+a+".efi")
	data, err := os.ReadFile(file)
	if err != nil {
		return BootLoader{}, fmt.Errorf("boot loader: %s %s: %w", pkg.Name, pkg.Version, err)
	}
	sum := sha256.Sum256(data)
	return BootLoader{Package: pkg, File: file, SHA256: hex.EncodeToString(sum[:])}, nil
}
