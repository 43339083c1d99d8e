package pid1

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ModuleLoader loads one kernel module from its file.
type ModuleLoader interface {
	// Load loads the module at path with the given parameters ("a=1 b=2"). A module that
	// is already loaded returns an error that matches unix.EEXIST; one whose init found
	// no device to drive, an error that matches unix.ENODEV.
	Load(path, params string) error
}

// orderFile is the board's module list inside /lib/modules/<release>, written by the
// initramfs builder with dependencies (soft ones included) before their dependents.
const orderFile = "edgegate.order"

// ModuleResult says what loading the board's modules did.
type ModuleResult struct {
	Loaded int      // modules of the list that are loaded now (already there included)
	Failed []string // modules that could not be loaded
	// Absent are the modules whose init found none of their hardware (ENODEV): the module
	// is fine, this machine lacks the device, like efivarfs on a boot without UEFI.
	Absent []string
}

// moduleName is the kernel's name for a module file: its base name without ".ko…", with
// dashes as underscores (what /proc/modules lists).
func moduleName(file string) string {
	base := path.Base(file)
	if i := strings.Index(base, ".ko"); i > 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// readModuleOrder reads an order file: one module path per line, relative to the module
// directory; blank lines and # comments are skipped.
func readModuleOrder(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mods []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		mods = append(mods, line)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return mods, nil
}

// readLoadedModules returns the names in /proc/modules.
func readLoadedModules(file string) (map[string]bool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	loaded := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, _, _ := strings.Cut(line, " "); name != "" {
			loaded[name] = true
		}
	}
	return loaded, nil
}

// loadModules loads the board's modules in the order file's order. A module that fails is
// logged by name and the rest still load: one missing driver must not cost the gateway
// its other NICs.
func (m *Machine) loadModules() ModuleResult {
	start := time.Now()
	dir := path.Join("/lib/modules", m.sys.KernelRelease)
	var res ModuleResult
	order, err := readModuleOrder(m.path(path.Join(dir, orderFile)))
	if errors.Is(err, fs.ErrNotExist) {
		m.log.Info("no module list; the kernel's built-in drivers only", "file", path.Join(dir, orderFile))
		return res
	}
	if err != nil {
		m.log.Error("reading the module list failed", "err", err)
		return res
	}
	loaded, err := readLoadedModules(m.path("/proc/modules"))
	if err != nil {
		// Loading is still right: a module that is there answers EEXIST.
		m.log.Warn("reading /proc/modules failed", "err", err)
		loaded = map[string]bool{}
	}
	m.modMu.Lock()
	defer m.modMu.Unlock()
	m.loaded = loaded
	for _, rel := range order {
		switch err := m.loadLocked(dir, rel); {
		case err == nil:
			res.Loaded++
		case errors.Is(err, unix.ENODEV):
			// Not a failure: a board's list may name a module for hardware a given
			// machine lacks (efivarfs without UEFI), and the kernel unloads it at once.
			res.Absent = append(res.Absent, moduleName(rel))
		default:
			// Logged by name; the rest still load.
			res.Failed = append(res.Failed, moduleName(rel))
		}
	}
	m.log.Info("modules loaded", "loaded", res.Loaded, "failed", len(res.Failed), "absent", len(res.Absent), "took", since(start))
	return res
}

// kernelModules is the ModuleLoader of the running kernel: finit_module(2) on the file, so
// the kernel reads it (and checks its signature) itself.
type kernelModules struct{}

func (kernelModules) Load(file, params string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.FinitModule(int(f.Fd()), params, 0)
}
