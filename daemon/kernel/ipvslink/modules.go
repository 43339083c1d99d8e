package ipvslink

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Modules loads kernel modules on an ordinary host, as modprobe would but without it:
// dependencies from modules.dep, soft pre-dependencies from modules.softdep (libcrc32c
// needs crc32c first), each file with finit_module(2). On the firmware PID 1 has loaded
// them already and /sys/module says so.
type Modules struct {
	// Root is the file system root ("" means /); tests use a temporary directory.
	Root string
	// Release is the running kernel's (uname -r).
	Release string
	// Load loads one module file; nil means finit_module(2).
	Load func(file string, compressed bool) error

	deps    map[string]depEntry
	softpre map[string][]string
	builtin map[string]bool
}

type depEntry struct {
	file string   // relative to the module directory
	deps []string // module names, in modules.dep's order (the last is loaded first)
}

func (m *Modules) path(p string) string { return filepath.Join(cmp.Or(m.Root, "/"), p) }

func (m *Modules) dir() string { return path.Join("/lib/modules", m.Release) }

// moduleName is the kernel's name of a module file: base name without ".ko…", dashes as
// underscores (what /sys/module lists).
func moduleName(file string) string {
	base := path.Base(file)
	if i := strings.Index(base, ".ko"); i > 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// Loaded reports whether a module is loaded (or built in with parameters: both show in
// /sys/module).
func (m *Modules) Loaded(name string) bool {
	_, err := os.Stat(m.path(path.Join("/sys/module", name)))
	return err == nil
}

// Ensure makes every named module available, loading what is missing with its
// dependencies. The error names the module and what was tried.
func (m *Modules) Ensure(names ...string) error {
	var errs []error
	for _, name := range names {
		if m.Loaded(name) {
			continue
		}
		if err := m.index(); err != nil {
			return fmt.Errorf("kernel module %s: not loaded, and %w", name, err)
		}
		if err := m.load(name, map[string]bool{}); err != nil {
			errs = append(errs, fmt.Errorf("kernel module %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (m *Modules) load(name string, visiting map[string]bool) error {
	if m.builtin[name] || m.Loaded(name) {
		return nil
	}
	if visiting[name] {
		return fmt.Errorf("dependency loop at %s", name)
	}
	visiting[name] = true
	e, ok := m.deps[name]
	if !ok {
		return fmt.Errorf("not built in and not in %s", path.Join(m.dir(), "modules.dep"))
	}
	for _, pre := range m.softpre[name] {
		// A soft dependency is optional: modprobe loads it if it can.
		if _, known := m.deps[pre]; known {
			if err := m.load(pre, visiting); err != nil {
				return fmt.Errorf("soft dependency %s: %w", pre, err)
			}
		}
	}
	for _, dep := range slices.Backward(e.deps) {
		if err := m.load(dep, visiting); err != nil {
			return fmt.Errorf("dependency %s: %w", dep, err)
		}
	}
	file := m.path(path.Join(m.dir(), e.file))
	compressed := !strings.HasSuffix(file, ".ko")
	load := m.Load
	if load == nil {
		load = finitModule
	}
	if err := load(file, compressed); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load %s: %w", file, err)
	}
	return nil
}

func finitModule(file string, compressed bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if compressed {
		// The kernel decompresses .ko.xz/.ko.zst/.ko.gz itself where it can
		// (CONFIG_MODULE_DECOMPRESS); elsewhere this fails with a clear EINVAL.
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	return unix.FinitModule(int(f.Fd()), "", flags)
}

// index reads modules.dep, modules.softdep and modules.builtin once.
func (m *Modules) index() error {
	if m.deps != nil {
		return nil
	}
	if m.Release == "" {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return fmt.Errorf("uname: %w", err)
		}
		m.Release = unix.ByteSliceToString(u.Release[:])
	}
	deps := map[string]depEntry{}
	err := m.lines("modules.dep", func(line string) {
		file, rest, ok := strings.Cut(line, ":")
		if !ok {
			return
		}
		e := depEntry{file: file}
		for _, d := range strings.Fields(rest) {
			e.deps = append(e.deps, moduleName(d))
		}
		deps[moduleName(file)] = e
	})
	if err != nil {
		return err
	}
	m.softpre = map[string][]string{}
	if err := m.lines("modules.softdep", func(line string) {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "softdep" {
			return
		}
		pre := false
		for _, w := range f[2:] {
			switch w {
			case "pre:":
				pre = true
			case "post:":
				pre = false
			default:
				if pre {
					m.softpre[f[1]] = append(m.softpre[f[1]], moduleName(w))
				}
			}
		}
	}); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	m.builtin = map[string]bool{}
	if err := m.lines("modules.builtin", func(line string) { m.builtin[moduleName(line)] = true }); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	m.deps = deps
	return nil
}

func (m *Modules) lines(file string, fn func(string)) error {
	f, err := os.Open(m.path(path.Join(m.dir(), file)))
	if err != nil {
		return fmt.Errorf("no module index: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); line != "" && !strings.HasPrefix(line, "#") {
			fn(line)
		}
	}
	return s.Err()
}
