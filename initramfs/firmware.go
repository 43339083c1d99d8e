package initramfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/edgegate/edgegate/board/debian"
)

// Names of the files a firmware build writes into its output directory.
const (
	KernelFile    = "vmlinuz"
	InitramfsFile = "initramfs.cpio.gz"
	BuildInfoFile = "build.json"
)

// FirmwareSpec says what firmware to build: the initramfs's Spec, whose Kernel stays unset
// (BuildFirmware fetches the board's), plus where the kernel cache and the output are.
type FirmwareSpec struct {
	Spec
	// CacheDir holds unpacked kernel packages between builds (out/kernels).
	CacheDir string
	// OutDir receives vmlinuz, initramfs.cpio.gz and build.json.
	OutDir string
}

// BuildInfo is build.json: what went into a firmware build, enough to tell two builds
// apart and to rebuild one. It carries no timestamps, so it is as reproducible as the
// image.
type BuildInfo struct {
	Board     string        `json:"board"`
	Arch      string        `json:"arch"`
	Kernel    debian.Kernel `json:"kernel"`
	Modules   ModuleInfo    `json:"modules"`
	Init      Digest        `json:"init"`
	Vmlinuz   Digest        `json:"vmlinuz"`
	Initramfs Digest        `json:"initramfs"`
	// UpdateKeys are the IDs of the public keys baked in (layout.KeysDir), sorted: the
	// keys whose update bundles this firmware accepts.
	UpdateKeys []string `json:"updateKeys"`
	// Files are the initramfs's file paths, sorted.
	Files []string `json:"files"`
}

// ModuleInfo is the board's module list and what the kernel made of it.
type ModuleInfo struct {
	Requested []string `json:"requested"`
	LoadOrder []string `json:"loadOrder"`
	// Drivers are the device drivers asked for; DriverFiles what they pack beyond
	// LoadOrder (the drivers and their dependencies, in load order); Aliases how many
	// device aliases modules.alias holds for them.
	Drivers         []string `json:"drivers"`
	DriverFiles     []string `json:"driverFiles"`
	Aliases         int      `json:"aliases"`
	Builtin         []string `json:"builtin"`
	MissingSoftdeps []string `json:"missingSoftdeps,omitempty"`
}

// Digest identifies one file of the build.
type Digest struct {
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
}

// Firmware is a built kernel + initramfs pair.
type Firmware struct {
	Dir  string
	Info BuildInfo
}

// Kernel returns the kernel image's path.
func (f Firmware) Kernel() string { return filepath.Join(f.Dir, KernelFile) }

// Initramfs returns the initramfs's path.
func (f Firmware) Initramfs() string { return filepath.Join(f.Dir, InitramfsFile) }

// BuildFirmware fetches the board's kernel (from the cache when that version is there),
// builds the initramfs and writes both with build.json into spec.OutDir.
func BuildFirmware(ctx context.Context, log *slog.Logger, spec FirmwareSpec) (Firmware, error) {
	b := spec.Board
	if spec.Kernel != (debian.Kernel{}) {
		return Firmware{}, fmt.Errorf("board %s: a firmware build fetches its kernel; Spec.Kernel must be unset", b.Name)
	}
	kernel, err := debian.Fetch(ctx, log, b.Arch, b.Kernel, spec.CacheDir)
	if err != nil {
		return Firmware{}, fmt.Errorf("board %s: kernel: %w", b.Name, err)
	}
	log.Info("kernel", "board", b.Name, "package", kernel.Package, "version", kernel.Version, "release", kernel.Release)
	spec.Kernel = kernel
	im, mods, err := Build(spec.Spec)
	if err != nil {
		return Firmware{}, fmt.Errorf("board %s: %w", b.Name, err)
	}
	archive, err := im.Bytes()
	if err != nil {
		return Firmware{}, err
	}
	vmlinuz, err := os.ReadFile(kernel.Image())
	if err != nil {
		return Firmware{}, fmt.Errorf("board %s: kernel image: %w", b.Name, err)
	}
	initBin, err := os.ReadFile(spec.Init)
	if err != nil {
		return Firmware{}, err
	}
	requested, err := b.AllModules()
	if err != nil {
		return Firmware{}, err
	}
	drivers, err := b.AllDrivers()
	if err != nil {
		return Firmware{}, err
	}
	info := BuildInfo{
		Board: b.Name, Arch: b.Arch, Kernel: kernel,
		Modules: ModuleInfo{
			Requested: requested, LoadOrder: []string{}, Builtin: mods.Builtin,
			Drivers: append([]string{}, drivers...), DriverFiles: []string{}, Aliases: len(mods.Aliases),
			MissingSoftdeps: mods.MissingSoftdeps,
		},
		Init: digest(initBin), Vmlinuz: digest(vmlinuz), Initramfs: digest(archive),
		UpdateKeys: UpdateKeyIDs(im.Paths()), Files: im.Paths(),
	}
	if info.Modules.Builtin == nil {
		info.Modules.Builtin = []string{}
	}
	for _, m := range mods.Order {
		info.Modules.LoadOrder = append(info.Modules.LoadOrder, m.Path)
	}
	for _, m := range mods.Drivers {
		info.Modules.DriverFiles = append(info.Modules.DriverFiles, m.Path)
	}
	manifest, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return Firmware{}, err
	}
	if err := os.MkdirAll(spec.OutDir, 0o755); err != nil {
		return Firmware{}, err
	}
	for name, data := range map[string][]byte{
		KernelFile: vmlinuz, InitramfsFile: archive, BuildInfoFile: append(manifest, '\n'),
	} {
		if err := writeFileAtomic(filepath.Join(spec.OutDir, name), data); err != nil {
			return Firmware{}, err
		}
	}
	log.Info("firmware built", "board", b.Name, "dir", spec.OutDir, "modules", len(mods.Order),
		"initramfs_bytes", len(archive))
	return Firmware{Dir: spec.OutDir, Info: info}, nil
}

func digest(data []byte) Digest {
	sum := sha256.Sum256(data)
	return Digest{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

// writeFileAtomic replaces name so that a reader (a QEMU booting the previous build)
// never sees a half-written file.
func writeFileAtomic(name string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), name)
}
