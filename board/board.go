// Package board describes the machines edgegate firmware is built for: CPU architecture,
// the Debian kernel package, the kernel modules that go into the initramfs, the serial
// console and how QEMU emulates the board. The board files live beside this package
// (board/<name>/board.yaml, shared module sets in board/modules/<set>.yaml) and are embedded,
// so tests and tools anywhere in the module load them by name.
package board

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

//go:embed */board.yaml modules/*.yaml
var files embed.FS

// ErrUnknown is returned by Load for a board that has no board file.
var ErrUnknown = errors.New("unknown board")

// Board is one machine the firmware is built for.
type Board struct {
	// Name is the board's directory name, e.g. "qemu-x86_64".
	Name string `json:"name"`
	// Description says what hardware the board stands for.
	Description string `json:"description"`
	// Arch is the Go and Debian architecture: amd64 or arm64.
	Arch string `json:"arch"`
	// Kernel is the Debian metapackage that names the kernel, e.g. linux-image-cloud-amd64.
	// The build resolves it to the ABI package (linux-image-6.1.0-NN-cloud-amd64) and
	// records what it used: the ABI name changes with every Debian point release.
	Kernel string `json:"kernel"`
	// Console is the serial console device without /dev, e.g. ttyS0.
	Console string `json:"console"`
	// ModuleSets names shared module lists from board/modules/<set>.yaml.
	ModuleSets []string `json:"moduleSets"`
	// Modules are this board's own modules that load at every boot, by module name:
	// what no device asks for (softdog, file systems, netfilter).
	Modules []string `json:"modules"`
	// Drivers are this board's device drivers (NICs, storage, watchdogs), by module name.
	// They go into the image with their device aliases (modules.alias), and PID 1 loads
	// one only when a device present matches it: a board lists every driver its hardware
	// family may need, and a given machine loads the few it has.
	Drivers []string `json:"drivers,omitempty"`
	// QEMU says how to emulate the board.
	QEMU QEMU `json:"qemu"`
}

// QEMU is how a board runs under emulation (always TCG: KVM is not usable on the build
// machines, see FIELD-NOTES.md).
type QEMU struct {
	// Binary is the qemu-system program, e.g. qemu-system-x86_64.
	Binary string `json:"binary"`
	// Package is the Debian package that ships Binary.
	Package string `json:"package"`
	// Machine is the -M value, e.g. pc or virt.
	Machine string `json:"machine"`
	// CPU is the -cpu value.
	CPU string `json:"cpu"`
	// MemoryMiB is the guest RAM (-m).
	MemoryMiB int `json:"memoryMiB"`
	// NIC is the -device model used for each guest network interface, e.g. virtio-net-pci.
	NIC string `json:"nic"`
	// Watchdog is the -device model of the hardware watchdog QEMU gives the guest, e.g.
	// i6300esb (a PCI device: x86_64 and arm64 virt alike); empty for none.
	Watchdog string `json:"watchdog,omitempty"`
	// Disk is how the disks of a disk-image boot are attached: "virtio" (the default),
	// "nvme" (an NVMe controller per disk), or "usb" (USB mass storage on an xHCI
	// controller), so that a board's own storage drivers are the ones that find them.
	Disk string `json:"disk,omitempty"`
	// UEFI is how the board boots a disk image through UEFI firmware under QEMU (the A/B
	// slots and systemd-boot of firmware/image); nil when it is only booted with -kernel.
	UEFI *UEFI `json:"uefi,omitempty"`
}

// UEFI is the board's UEFI firmware under QEMU: a code volume and a variable store (NVRAM)
// as two pflash drives, from a Debian package.
type UEFI struct {
	// Package is the Debian package that ships Code and Vars, e.g. ovmf.
	Package string `json:"package"`
	// Code is the firmware's code volume, attached read-only.
	Code string `json:"code"`
	// Vars is the template of the variable store: every VM gets a copy of its own, which
	// the firmware writes (boot options) and which persists across the VM's starts.
	Vars string `json:"vars"`
	// Machine, when set, replaces the board's -M for UEFI boots (OVMF wants q35 where the
	// -kernel boots use pc).
	Machine string `json:"machine,omitempty"`
}

// moduleSet is the content of board/modules/<set>.yaml: modules loaded at every boot,
// and device drivers loaded for the devices present (see Board).
type moduleSet struct {
	Modules []string `json:"modules,omitempty"`
	Drivers []string `json:"drivers,omitempty"`
}

// Names returns the names of all boards, sorted.
func Names() []string {
	entries, err := fs.Glob(files, "*/board.yaml")
	if err != nil {
		// The pattern is a constant and valid; Glob only fails on a bad pattern.
		panic(err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, path.Dir(e))
	}
	slices.Sort(names)
	return names
}

// Load reads and validates the board called name.
func Load(name string) (Board, error) {
	if !slices.Contains(Names(), name) {
		return Board{}, fmt.Errorf("board %q: %w (have %s)", name, ErrUnknown, strings.Join(Names(), ", "))
	}
	raw, err := files.ReadFile(path.Join(name, "board.yaml"))
	if err != nil {
		return Board{}, fmt.Errorf("board %q: %w", name, err)
	}
	var b Board
	if err := yaml.UnmarshalStrict(raw, &b); err != nil {
		return Board{}, fmt.Errorf("board %q: %w", name, err)
	}
	if b.Name != name {
		return Board{}, fmt.Errorf("board %q: file says name %q", name, b.Name)
	}
	if err := b.validate(); err != nil {
		return Board{}, fmt.Errorf("board %q: %w", name, err)
	}
	return b, nil
}

// AllModules returns the modules loaded at every boot: the board's module sets' modules
// followed by its own, without duplicates, in the order the board file gives them.
func (b Board) AllModules() ([]string, error) {
	return b.collect(func(s moduleSet) []string { return s.Modules }, b.Modules)
}

// AllDrivers returns the device drivers: the module sets' drivers followed by the board's
// own, without duplicates, in the order the board file gives them.
func (b Board) AllDrivers() ([]string, error) {
	return b.collect(func(s moduleSet) []string { return s.Drivers }, b.Drivers)
}

// collect returns what of selects from each module set, then own, without duplicates.
func (b Board) collect(of func(moduleSet) []string, own []string) ([]string, error) {
	sets, err := b.sets()
	if err != nil {
		return nil, err
	}
	var all []string
	for _, s := range sets {
		all = append(all, of(s)...)
	}
	return dedup(append(all, own...)), nil
}

func (b Board) sets() ([]moduleSet, error) {
	var sets []moduleSet
	for _, set := range b.ModuleSets {
		raw, err := files.ReadFile(path.Join("modules", set+".yaml"))
		if err != nil {
			return nil, fmt.Errorf("module set %q: %w", set, err)
		}
		var s moduleSet
		if err := yaml.UnmarshalStrict(raw, &s); err != nil {
			return nil, fmt.Errorf("module set %q: %w", set, err)
		}
		sets = append(sets, s)
	}
	return sets, nil
}

func dedup(names []string) []string {
	seen := map[string]bool{}
	out := names[:0]
	for _, m := range names {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// KernelArgs are the kernel command line arguments every boot of this board gets
// (the firmware contract): the serial console, reboot at once on panic (QEMU runs with
// -no-reboot, so a panic ends the emulator instead of hanging), and a quiet console.
func (b Board) KernelArgs() []string {
	return []string{"console=" + b.Console, "panic=-1", "quiet"}
}

func (u *UEFI) validate() error {
	if u == nil {
		return nil
	}
	if u.Package == "" {
		return errors.New("package is required")
	}
	for _, f := range []struct{ name, path string }{{"code", u.Code}, {"vars", u.Vars}} {
		// QEMU's -drive splits on commas, and a relative path would depend on the caller's
		// directory.
		if !path.IsAbs(f.path) || path.Clean(f.path) != f.path || strings.Contains(f.path, ",") {
			return fmt.Errorf("%s %q: want a clean absolute path without commas", f.name, f.path)
		}
	}
	if u.Code == u.Vars {
		return fmt.Errorf("code and vars are the same file %s", u.Code)
	}
	return nil
}

func (b Board) validate() error {
	switch b.Arch {
	case "amd64", "arm64":
	default:
		return fmt.Errorf("arch %q: want amd64 or arm64", b.Arch)
	}
	if !strings.HasPrefix(b.Kernel, "linux-image-") {
		return fmt.Errorf("kernel %q: want a Debian linux-image-* metapackage", b.Kernel)
	}
	if b.Console == "" {
		return errors.New("no console")
	}
	q := b.QEMU
	if q.Binary == "" || q.Package == "" || q.Machine == "" || q.CPU == "" || q.NIC == "" {
		return errors.New("qemu: binary, package, machine, cpu and nic are required")
	}
	if q.MemoryMiB < 128 {
		return fmt.Errorf("qemu: memoryMiB %d: want at least 128", q.MemoryMiB)
	}
	switch q.Disk {
	case "", "virtio", "nvme", "usb":
	default:
		return fmt.Errorf("qemu: disk %q: want virtio, nvme or usb", q.Disk)
	}
	if err := q.UEFI.validate(); err != nil {
		return fmt.Errorf("qemu: uefi: %w", err)
	}
	mods, err := b.AllModules()
	if err != nil {
		return err
	}
	drivers, err := b.AllDrivers()
	if err != nil {
		return err
	}
	for _, m := range append(slices.Clone(mods), drivers...) {
		if m == "" || strings.ContainsAny(m, "/ \t") {
			return fmt.Errorf("module %q: want a module name", m)
		}
	}
	for _, d := range drivers {
		// Loaded at every boot and also only for its devices: one of the two lists is wrong.
		if slices.Contains(mods, d) {
			return fmt.Errorf("module %q is both a module and a driver", d)
		}
	}
	return nil
}
