package initramfs

import (
	"debug/elf"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/board/debian"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
)

// Where things go in the image (the firmware contract).
const (
	initPath      = "/init"
	boardPath     = "/etc/edgegate/board"
	configPath    = "/etc/edgegate/config.yaml"
	manifestsDir  = "/etc/edgegate/manifests"
	testPath      = "/edgegate-test"
	testArgsPath  = "/etc/edgegate/test"
	moduleRootDir = "/lib/modules"
	// OrderFile is the load order file's name inside /lib/modules/<release>: the modules
	// loaded at every boot, one path per line, relative to that directory, dependencies
	// first.
	OrderFile = "edgegate.order"
	// AliasFile and DepFile index the device drivers as depmod would (the Debian package
	// ships neither: its postinst runs depmod): "alias <modalias pattern> <module>" lines
	// for the drivers, and "<path>: <dependency paths>" lines for every module packed,
	// dependencies listed the way modprobe reads them (the last one loads first). Soft
	// pre-dependencies are listed there as dependencies, so one file says what to load.
	AliasFile = "modules.alias"
	DepFile   = "modules.dep"
)

// Spec says what goes into one initramfs.
type Spec struct {
	// Board gives the arch (checked against the binaries) and the module list.
	Board board.Board
	// Kernel is the unpacked kernel package the modules come from.
	Kernel debian.Kernel
	// Init is the static binary that becomes /init (PID 1).
	Init string
	// Config, when set, is a daemon config file baked in as /etc/edgegate/config.yaml.
	Config string
	// Manifests, when set, is a directory whose manifest files (*.yaml, *.yml, *.json, as
	// the daemon's manifests source reads them) go to /etc/edgegate/manifests/.
	Manifests string
	// TestBinary, when set, is a Go test binary baked in as /edgegate-test, for test images
	// booted with edgegate.test=1; TestArgs is its argument line.
	TestBinary string
	TestArgs   []string
	// UpdateKeys are public key files (firmware/bundle's format) of the keys whose update
	// bundles the firmware accepts, each baked in as layout.KeysDir/<key ID>.pub.
	UpdateKeys []string
}

// Build resolves the board's modules against the kernel and assembles the image.
func Build(spec Spec) (*Image, Modules, error) {
	names, err := spec.Board.AllModules()
	if err != nil {
		return nil, Modules{}, err
	}
	drivers, err := spec.Board.AllDrivers()
	if err != nil {
		return nil, Modules{}, err
	}
	mods, err := ResolveModules(spec.Kernel.ModulesDir(), names, drivers)
	if err != nil {
		return nil, Modules{}, err
	}
	im := NewImage()
	if err := addBinary(im, initPath, spec.Init, spec.Board.Arch); err != nil {
		return nil, Modules{}, err
	}
	if err := addModules(im, path.Join(moduleRootDir, spec.Kernel.Release), mods); err != nil {
		return nil, Modules{}, err
	}
	if err := im.Add(boardPath, []byte(spec.Board.Name+"\n"), 0o644); err != nil {
		return nil, Modules{}, err
	}
	if spec.Config != "" {
		if err := addFile(im, configPath, spec.Config, 0o644); err != nil {
			return nil, Modules{}, err
		}
	}
	if spec.Manifests != "" {
		if err := addManifests(im, spec.Manifests); err != nil {
			return nil, Modules{}, err
		}
	}
	if err := addUpdateKeys(im, spec.UpdateKeys); err != nil {
		return nil, Modules{}, err
	}
	if spec.TestBinary != "" {
		if err := addBinary(im, testPath, spec.TestBinary, spec.Board.Arch); err != nil {
			return nil, Modules{}, err
		}
		for _, a := range spec.TestArgs {
			if a == "" || strings.ContainsAny(a, " \t\n") {
				return nil, Modules{}, fmt.Errorf("test argument %q: the argument line is split on spaces", a)
			}
		}
		if err := im.Add(testArgsPath, []byte(strings.Join(spec.TestArgs, " ")+"\n"), 0o644); err != nil {
			return nil, Modules{}, err
		}
	} else if len(spec.TestArgs) > 0 {
		return nil, Modules{}, fmt.Errorf("test arguments without a test binary")
	}
	return im, mods, nil
}

// addModules packs the module files with the load order file and the drivers' indexes.
func addModules(im *Image, dir string, mods Modules) error {
	paths := map[string]string{}
	var order, deps, aliases strings.Builder
	for i, m := range slices.Concat(mods.Order, mods.Drivers) {
		if err := im.Add(path.Join(dir, m.Path), m.Image, 0o644); err != nil {
			return err
		}
		paths[m.Name] = m.Path
		if i < len(mods.Order) {
			order.WriteString(m.Path + "\n")
		}
	}
	for _, m := range slices.Concat(mods.Order, mods.Drivers) {
		deps.WriteString(m.Path + ":")
		need := mods.Deps[m.Name]
		for i := len(need) - 1; i >= 0; i-- {
			deps.WriteString(" " + paths[need[i]])
		}
		deps.WriteString("\n")
	}
	for _, a := range mods.Aliases {
		if strings.ContainsAny(a.Pattern, " \t\n") {
			return fmt.Errorf("initramfs: module %s: alias %q holds white space", a.Module, a.Pattern)
		}
		fmt.Fprintf(&aliases, "alias %s %s\n", a.Pattern, a.Module)
	}
	for name, content := range map[string]string{OrderFile: order.String(), DepFile: deps.String(), AliasFile: aliases.String()} {
		if err := im.Add(path.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func addFile(im *Image, name, src string, perm os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return im.Add(name, data, perm)
}

// addBinary adds a program after checking that it can run as the first process of a
// kernel of this arch: the right ELF machine, and no program interpreter (there is no
// libc in the image, so a cgo binary would fail with a bare ENOENT at boot).
func addBinary(im *Image, name, src, arch string) error {
	f, err := elf.Open(src)
	if err != nil {
		return fmt.Errorf("initramfs: %s: %w", name, err)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		return fmt.Errorf("initramfs: %s: %s is built for %v, the board is %s", name, src, f.Machine, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("initramfs: %s: %s is dynamically linked (build it with CGO_ENABLED=0)", name, src)
		}
	}
	return addFile(im, name, src, 0o755)
}

// addManifests copies the manifest files at the top of dir, the ones the daemon's
// manifests source reads.
func addManifests(im *Image, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("initramfs: manifests: %w", err)
	}
	n := 0
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := addFile(im, path.Join(manifestsDir, e.Name()), filepath.Join(dir, e.Name()), 0o644); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("initramfs: manifests: no *.yaml, *.yml or *.json files in %s", dir)
	}
	return nil
}

// addUpdateKeys checks each public key file and adds it under layout.KeysDir by its key ID.
// A file that does not parse fails the build: a firmware that lacks a key it was meant to
// trust would refuse every update signed with it, and could then only be reinstalled.
func addUpdateKeys(im *Image, files []string) error {
	var ids []string
	for _, f := range files {
		k, err := bundle.ReadPublicKeyFile(f)
		if err != nil {
			return fmt.Errorf("initramfs: update key: %w", err)
		}
		if slices.Contains(ids, k.ID) {
			return fmt.Errorf("initramfs: update key %s: key %s is given twice", f, k.ID)
		}
		ids = append(ids, k.ID)
		if err := im.Add(path.Join(layout.KeysDir, k.ID+".pub"), k.Marshal(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// UpdateKeyIDs returns the IDs of the update keys among an image's paths (Image.Paths).
func UpdateKeyIDs(paths []string) []string {
	ids := []string{}
	for _, p := range paths {
		if dir, name := path.Split(p); dir == layout.KeysDir+"/" && strings.HasSuffix(name, ".pub") {
			ids = append(ids, strings.TrimSuffix(name, ".pub"))
		}
	}
	return ids
}
