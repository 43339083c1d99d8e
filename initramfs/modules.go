package initramfs

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
)

// Module is one module file to pack, with its place in the load order.
type Module struct {
	// Name is the kernel's name for it, e.g. nf_conntrack.
	Name string
	// Path is where it goes, relative to lib/modules/<release>, always a plain .ko.
	Path string
	// Image is the plain (decompressed) ELF image.
	Image []byte
}

// Modules is a board's module list resolved against one kernel.
type Modules struct {
	// Order are the modules loaded at every boot, dependencies (soft pre-dependencies
	// included) before the modules that need them.
	Order []Module
	// Drivers are the device drivers, with what they need that Order does not hold, in
	// load order: packed, and loaded only for a device that matches one of Aliases.
	Drivers []Module
	// Deps maps each packed module to the modules it needs loaded first (dependencies and
	// soft pre-dependencies, transitively), in load order.
	Deps map[string][]string
	// Aliases are the drivers' device aliases (modalias patterns), driver by driver.
	Aliases []Alias
	// Builtin are the names, asked for or needed as soft dependencies, that the kernel has
	// built in: nothing to load.
	Builtin []string
	// MissingSoftdeps are soft dependencies that name nothing this kernel has; modprobe
	// skips those too.
	MissingSoftdeps []string
}

// Alias is one device alias of a driver: a modalias pattern (a shell glob such as
// pci:v00008086d000010D3sv*sd*bc*sc*i*) and the module that drives what it matches.
type Alias struct {
	Pattern string
	Module  string
}

// ErrUnknownModule is returned for a module name that is neither a module file, a
// built-in, nor an alias of either.
var ErrUnknownModule = errors.New("unknown kernel module")

// ResolveModules finds names (module names or aliases, loaded at every boot) and drivers
// (module names of device drivers) in the kernel module tree dir (lib/modules/<release>
// of an unpacked kernel package) and orders them with their dependencies from each
// module's .modinfo: `depends=` and `softdep=` pre-dependencies before the module,
// post-dependencies after it. Names the kernel has built in (modules.builtin) are left
// out. The order is deterministic: depth first, in the order of names and of each
// module's own entries. A driver must declare device aliases: a module without any could
// only ever load at every boot.
func ResolveModules(dir string, names, drivers []string) (Modules, error) {
	t, err := openTree(dir)
	if err != nil {
		return Modules{}, err
	}
	r := resolver{tree: t, state: map[string]visitState{}, direct: map[string][]string{}}
	for _, name := range names {
		if _, err := r.want(name, true); err != nil {
			return Modules{}, err
		}
	}
	always := len(r.out.Order)
	for _, name := range drivers {
		mods, err := r.want(name, true)
		if err != nil {
			return Modules{}, fmt.Errorf("driver %s: %w", name, err)
		}
		for _, m := range mods {
			info, err := t.module(m)
			if err != nil {
				return Modules{}, err
			}
			if len(info.info.aliases) == 0 {
				return Modules{}, fmt.Errorf("driver %s: module %s declares no device aliases; list it with the modules loaded at every boot", name, m)
			}
			for _, a := range info.info.aliases {
				r.out.Aliases = append(r.out.Aliases, Alias{Pattern: a, Module: m})
			}
		}
	}
	r.out.Drivers = r.out.Order[always:]
	r.out.Order = r.out.Order[:always:always]
	r.out.Deps = r.closures()
	slices.Sort(r.out.Builtin)
	r.out.Builtin = slices.Compact(r.out.Builtin)
	slices.Sort(r.out.MissingSoftdeps)
	r.out.MissingSoftdeps = slices.Compact(r.out.MissingSoftdeps)
	return r.out, nil
}

// closures returns, for every module resolved, the modules it needs first, transitively,
// in the load order (Order, then Drivers), which puts each before what needs it.
func (r *resolver) closures() map[string][]string {
	pos := map[string]int{}
	for i, m := range slices.Concat(r.out.Order, r.out.Drivers) {
		pos[m.Name] = i
	}
	deps := map[string][]string{}
	for name := range pos {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(n string) {
			for _, d := range r.direct[n] {
				if !seen[d] {
					seen[d] = true
					walk(d)
				}
			}
		}
		walk(name)
		list := make([]string, 0, len(seen))
		for d := range seen {
			list = append(list, d)
		}
		slices.SortFunc(list, func(a, b string) int { return pos[a] - pos[b] })
		deps[name] = list
	}
	return deps
}

// tree indexes a lib/modules/<release> directory.
type tree struct {
	dir string
	// files maps a module name to its file, relative to dir.
	files map[string]string
	// builtin holds the names and aliases of built-in modules.
	builtin map[string]bool
	// aliases maps an alias to the module names that declare it; read on first need
	// because it means opening every module of the kernel.
	aliases map[string][]string
	// infos caches the modules read so far.
	infos map[string]moduleFile
}

type moduleFile struct {
	image []byte
	info  modinfo
}

func openTree(dir string) (*tree, error) {
	t := &tree{dir: dir, files: map[string]string{}, builtin: map[string]bool{}, infos: map[string]moduleFile{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		plain, ok := splitModuleFile(d.Name())
		if !ok {
			return nil
		}
		name := moduleName(strings.TrimSuffix(plain, ".ko"))
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if other, dup := t.files[name]; dup {
			return fmt.Errorf("module %s: both %s and %s", name, other, rel)
		}
		t.files[name] = filepath.ToSlash(rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kernel modules %s: %w", dir, err)
	}
	if len(t.files) == 0 {
		return nil, fmt.Errorf("kernel modules %s: no module files", dir)
	}
	if err := t.readBuiltin(); err != nil {
		return nil, err
	}
	return t, nil
}

// readBuiltin reads modules.builtin (paths of built-in modules) and, when present,
// modules.builtin.modinfo (their modinfo, where their aliases are: crc32c is built in on
// the cloud kernels as crc32c_generic with alias crc32c).
func (t *tree) readBuiltin() error {
	f, err := os.Open(filepath.Join(t.dir, "modules.builtin"))
	if err != nil {
		return fmt.Errorf("kernel modules: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if line := strings.TrimSpace(s.Text()); line != "" {
			t.builtin[moduleName(strings.TrimSuffix(path.Base(line), ".ko"))] = true
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("kernel modules: modules.builtin: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(t.dir, "modules.builtin.modinfo"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kernel modules: %w", err)
	}
	for _, entry := range strings.Split(string(raw), "\x00") {
		if key, alias, ok := strings.Cut(entry, "="); ok && strings.HasSuffix(key, ".alias") {
			t.builtin[moduleName(alias)] = true
		}
	}
	return nil
}

// module returns a module's image and modinfo, reading them once.
func (t *tree) module(name string) (moduleFile, error) {
	if m, ok := t.infos[name]; ok {
		return m, nil
	}
	m, err := t.read(name)
	if err != nil {
		return moduleFile{}, err
	}
	t.infos[name] = m
	return m, nil
}

func (t *tree) read(name string) (moduleFile, error) {
	image, err := readModule(filepath.Join(t.dir, filepath.FromSlash(t.files[name])))
	if err != nil {
		return moduleFile{}, fmt.Errorf("module %s: %w", name, err)
	}
	info, err := parseModinfo(image)
	if err != nil {
		return moduleFile{}, fmt.Errorf("module %s: %w", name, err)
	}
	return moduleFile{image: image, info: info}, nil
}

// byAlias returns the modules that declare alias, sorted by name. Like modprobe, a name
// several modules answer to (crc32c: crc32c_generic and crc32c_intel) means all of them.
func (t *tree) byAlias(alias string) ([]string, error) {
	if t.aliases == nil {
		t.aliases = map[string][]string{}
		names := make([]string, 0, len(t.files))
		for name := range t.files {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			// Not cached: holding every module image of a generic kernel costs 400 MB.
			m, err := t.read(name)
			if err != nil {
				return nil, err
			}
			for _, a := range m.info.aliases {
				a = moduleName(a)
				t.aliases[a] = append(t.aliases[a], name)
			}
		}
	}
	return t.aliases[moduleName(alias)], nil
}

// lookup says what a name stands for in this kernel: module files to load, or nothing
// because the kernel has it built in. A module file of that name wins; then a built-in
// (a built-in crc32c is enough for libcrc32c, no need to add crc32c_intel); then the
// modules that have it as an alias.
func (t *tree) lookup(name string) (mods []string, builtin bool, err error) {
	n := moduleName(name)
	if _, ok := t.files[n]; ok {
		return []string{n}, false, nil
	}
	if t.builtin[n] {
		return nil, true, nil
	}
	mods, err = t.byAlias(n)
	if err != nil {
		return nil, false, err
	}
	if len(mods) == 0 {
		return nil, false, fmt.Errorf("%q: %w", name, ErrUnknownModule)
	}
	return mods, false, nil
}

type visitState int

const (
	unvisited visitState = iota
	visiting
	visited
)

// resolver walks the dependency graph depth first.
type resolver struct {
	tree  *tree
	state map[string]visitState
	path  []string // the modules being visited, for cycle errors
	out   Modules
	// direct maps a module to the modules its dependencies and soft pre-dependencies
	// resolved to.
	direct map[string][]string
}

// want adds what name stands for and returns the module files it resolved to. A soft
// dependency (required false) that names nothing is recorded and skipped, as modprobe
// does; a missing hard dependency or asked-for module is an error.
func (r *resolver) want(name string, required bool) ([]string, error) {
	mods, builtin, err := r.tree.lookup(name)
	switch {
	case errors.Is(err, ErrUnknownModule) && !required:
		r.out.MissingSoftdeps = append(r.out.MissingSoftdeps, name)
		return nil, nil
	case err != nil:
		return nil, err
	case builtin:
		r.out.Builtin = append(r.out.Builtin, name)
		return nil, nil
	}
	for _, m := range mods {
		if err := r.visit(m); err != nil {
			return nil, err
		}
	}
	return mods, nil
}

func (r *resolver) visit(name string) error {
	switch r.state[name] {
	case visited:
		return nil
	case visiting:
		return fmt.Errorf("module dependency cycle: %s -> %s", strings.Join(r.path, " -> "), name)
	}
	m, err := r.tree.module(name)
	if err != nil {
		return err
	}
	r.state[name] = visiting
	r.path = append(r.path, name)
	for _, pre := range m.info.pre {
		mods, err := r.want(pre, false)
		if err != nil {
			return err
		}
		r.direct[name] = append(r.direct[name], mods...)
	}
	for _, dep := range m.info.depends {
		mods, err := r.want(dep, true)
		if err != nil {
			return fmt.Errorf("module %s: %w", name, err)
		}
		r.direct[name] = append(r.direct[name], mods...)
	}
	r.path = r.path[:len(r.path)-1]
	r.state[name] = visited
	plain, _ := splitModuleFile(r.tree.files[name])
	r.out.Order = append(r.out.Order, Module{Name: name, Path: plain, Image: m.image})
	for _, post := range m.info.post {
		if _, err := r.want(post, false); err != nil {
			return err
		}
	}
	return nil
}
