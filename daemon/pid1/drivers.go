package pid1

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Device drivers load for the devices present, as udev loads them on a distribution. The
// image packs the board's drivers with depmod's two indexes (initramfs.AliasFile and
// DepFile); PID 1 reads every device's modalias on every bus (coldplug), loads the drivers
// whose aliases match, with what they need first, and looks again, since a driver may bring
// up a bus whose devices need drivers of their own (virtio_pci, then virtio_net). Devices
// that appear later (USB enumerates on its own time, a SCSI disk behind a USB stick, a NIC
// plugged in) arrive as kernel uevents, and a goroutine loads their drivers for the
// machine's whole life.
const (
	aliasFile = "modules.alias"
	depFile   = "modules.dep"
	// coldplugRounds bounds the looks at the buses: each round can only find the devices
	// of drivers the previous one loaded, and a real machine's chain is two or three deep.
	coldplugRounds = 8
)

// Uevent is one kernel device event (NETLINK_KOBJECT_UEVENT).
type Uevent struct {
	Action    string // add, remove, change, bind, ...
	DevPath   string // the device's path under /sys
	Subsystem string
	Modalias  string // MODALIAS: what the device's driver is looked up by; empty for many
}

// ueventOverflow is the Action of the event a source sends when the kernel dropped events
// (the socket's buffer overflowed): the buses are looked at again.
const ueventOverflow = "overflow"

// UeventSource delivers the kernel's device events.
type UeventSource interface {
	// Listen starts listening; events that happen after it returns are delivered.
	Listen() (<-chan Uevent, error)
}

// driverAlias is one line of modules.alias.
type driverAlias struct{ pattern, module string }

// driverIndex is what the image says about its device drivers.
type driverIndex struct {
	aliases []driverAlias
	// files maps every packed module's name to its file, relative to the module directory.
	files map[string]string
	// deps maps a module's name to the files to load before it, in load order.
	deps map[string][]string
}

// readDriverIndex reads modules.alias and modules.dep from the module directory dir.
func readDriverIndex(dir string) (*driverIndex, error) {
	ix := &driverIndex{files: map[string]string{}, deps: map[string][]string{}}
	err := eachLine(filepath.Join(dir, depFile), func(line string) error {
		file, rest, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(file) == "" {
			return fmt.Errorf("want \"<module file>: <dependencies>\", got %q", line)
		}
		name := moduleName(file)
		ix.files[name] = file
		deps := strings.Fields(rest)
		// depmod lists the dependency that loads first last.
		slices.Reverse(deps)
		ix.deps[name] = deps
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = eachLine(filepath.Join(dir, aliasFile), func(line string) error {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "alias" {
			return fmt.Errorf("want \"alias <pattern> <module>\", got %q", line)
		}
		if _, ok := ix.files[f[2]]; !ok {
			return fmt.Errorf("alias %s: module %s is not in %s", f[1], f[2], depFile)
		}
		ix.aliases = append(ix.aliases, driverAlias{pattern: f[1], module: f[2]})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ix, nil
}

// eachLine calls fn for each line of file that is neither blank nor a # comment.
func eachLine(file string, fn func(line string) error) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	n := 0
	for s.Scan() {
		n++
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("%s:%d: %w", file, n, err)
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// match returns the modules with an alias that matches modalias, each once, in the
// file's order: like modprobe, a device several drivers claim gets all of them (the
// kernel binds the one whose table fits best).
func (ix *driverIndex) match(modalias string) []string {
	var mods []string
	for _, a := range ix.aliases {
		if !slices.Contains(mods, a.module) && globMatch(a.pattern, modalias) {
			mods = append(mods, a.module)
		}
	}
	return mods
}

// startDrivers loads the drivers of the devices present and keeps loading them for
// devices that appear later. An image without the indexes (built before drivers were, or
// with none) has loaded everything from its module list already.
func (m *Machine) startDrivers() {
	start := time.Now()
	dir := path.Join("/lib/modules", m.sys.KernelRelease)
	ix, err := readDriverIndex(m.path(dir))
	if errors.Is(err, fs.ErrNotExist) {
		m.log.Info("no driver index; the module list's drivers only", "dir", dir)
		return
	}
	if err != nil {
		m.log.Error("reading the driver index failed; the module list's drivers only", "err", err)
		return
	}
	m.modMu.Lock()
	m.drivers = ix
	m.modMu.Unlock()
	var events <-chan Uevent
	if m.sys.Uevents != nil {
		// Before the first look: a device that appears in between is then not missed.
		if events, err = m.sys.Uevents.Listen(); err != nil {
			m.log.Error("listening for new devices failed; drivers load for the devices present at boot only", "err", err)
		}
	}
	loaded := m.coldplug()
	m.console.marker("EDGEGATE-DRIVERS %s", strings.Join(loaded, ","))
	m.log.Info("drivers loaded for the devices present", "drivers", len(loaded), "took", since(start))
	if events != nil {
		go m.hotplug(events)
	}
}

// coldplug looks at every device on every bus and loads their drivers, until a look loads
// nothing more. It returns the drivers it loaded, in order.
func (m *Machine) coldplug() []string {
	var loaded []string
	for round := 0; round < coldplugRounds; round++ {
		aliases, err := m.deviceModaliases()
		if err != nil {
			m.log.Error("listing devices failed", "err", err)
			break
		}
		n := len(loaded)
		for _, a := range aliases {
			loaded = append(loaded, m.loadForDevice(a)...)
		}
		if len(loaded) == n {
			break
		}
	}
	return loaded
}

// hotplug loads the drivers of devices the kernel announces, until events ends.
func (m *Machine) hotplug(events <-chan Uevent) {
	for ev := range events {
		switch {
		case ev.Action == ueventOverflow:
			m.log.Warn("device events were lost; looking at every device again")
			if loaded := m.coldplug(); len(loaded) > 0 {
				m.log.Info("drivers loaded for devices found again", "modules", loaded)
			}
		case ev.Action == "add" && ev.Modalias != "":
			if loaded := m.loadForDevice(ev.Modalias); len(loaded) > 0 {
				m.log.Info("drivers loaded for a new device", "modules", loaded, "device", ev.DevPath, "modalias", ev.Modalias)
			}
		}
	}
}

// deviceModaliases returns the modalias of every device on every bus (each bus's
// devices/*/uevent, MODALIAS=), sorted and without repeats: a bus's devices in address
// order, so that drivers load, and NICs register, in the same order at every boot.
func (m *Machine) deviceModaliases() ([]string, error) {
	buses, err := os.ReadDir(m.path("/sys/bus"))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, bus := range buses {
		dir := m.path(path.Join("/sys/bus", bus.Name(), "devices"))
		devs, err := os.ReadDir(dir)
		if err != nil {
			continue // a bus without devices/ (none here) or one going away
		}
		for _, d := range devs {
			raw, err := os.ReadFile(filepath.Join(dir, d.Name(), "uevent"))
			if err != nil {
				continue // removed meanwhile
			}
			for _, line := range strings.Split(string(raw), "\n") {
				if a, ok := strings.CutPrefix(line, "MODALIAS="); ok && a != "" && !seen[a] {
					seen[a] = true
					out = append(out, a)
				}
			}
		}
	}
	return out, nil
}

// loadForDevice loads the drivers that match a device's modalias, each after the modules
// it needs, and returns the drivers it loaded. A modalias is handled once: its devices'
// drivers are loaded or failed, and a second device of the same kind needs nothing more.
func (m *Machine) loadForDevice(modalias string) []string {
	m.modMu.Lock()
	defer m.modMu.Unlock()
	if m.drivers == nil || m.handled[modalias] {
		return nil
	}
	m.handled[modalias] = true
	var loaded []string
	dir := path.Join("/lib/modules", m.sys.KernelRelease)
	for _, mod := range m.drivers.match(modalias) {
		if m.loaded[mod] {
			continue
		}
		files := append(slices.Clone(m.drivers.deps[mod]), m.drivers.files[mod])
		ok := true
		for _, rel := range files {
			if err := m.loadLocked(dir, rel); err != nil {
				ok = false
				break
			}
		}
		if ok {
			loaded = append(loaded, mod)
		}
	}
	return loaded
}

// loadLocked loads one module file unless it is loaded, with the command line's
// parameters for it; modMu is held. A module whose init finds no device (ENODEV) is
// logged and is not an error of the machine's.
func (m *Machine) loadLocked(dir, rel string) error {
	name := moduleName(rel)
	if m.loaded[name] {
		return nil
	}
	params := strings.Join(m.cmdline.ModuleParams[name], " ")
	err := m.sys.Modules.Load(m.path(path.Join(dir, rel)), params)
	switch {
	case err == nil, errors.Is(err, unix.EEXIST):
		m.loaded[name] = true
		return nil
	case errors.Is(err, unix.ENODEV):
		m.log.Info("module found no device; not loaded", "module", name, "file", rel)
	default:
		m.log.Error("module failed to load", "module", name, "file", rel, "err", err)
	}
	return err
}
