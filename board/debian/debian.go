// Package debian fetches Debian packages into a local cache without installing them: a
// board's kernel (the metapackage is resolved to its ABI package with apt-cache) and other
// files a firmware build takes from Debian (systemd-boot's EFI binary). The .deb is fetched
// with `apt-get download` and unpacked with `dpkg -x`. Debian ships no modules.dep in the
// kernel package (depmod makes it at install time), so callers read module metadata from
// the .ko files themselves.
package debian

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Kernel is an unpacked Debian kernel package.
type Kernel struct {
	// Metapackage is what the board asked for, e.g. linux-image-cloud-amd64.
	Metapackage string `json:"metapackage"`
	// Package is the ABI package it resolved to, e.g. linux-image-6.1.0-56-cloud-amd64.
	Package string `json:"package"`
	// Version is the Debian version of Package, e.g. 6.1.192-2.
	Version string `json:"version"`
	// Arch is the Debian architecture.
	Arch string `json:"arch"`
	// Release is the kernel release (uname -r), the name of its lib/modules directory.
	Release string `json:"release"`
	// Dir is the unpacked package's root in the cache.
	Dir string `json:"-"`
}

// Image returns the path of the kernel image (bzImage on amd64, Image on arm64).
func (k Kernel) Image() string {
	return filepath.Join(k.Dir, "boot", "vmlinuz-"+k.Release)
}

// ModulesDir returns the path of lib/modules/<release>.
func (k Kernel) ModulesDir() string {
	return filepath.Join(k.Dir, "lib", "modules", k.Release)
}

// completeMarker is written into a cache entry after it was unpacked completely, so an
// interrupted unpack is never mistaken for a usable kernel.
const completeMarker = ".edgegate-complete"

// aptMetadata serialises the steps that read or change apt's package lists: an
// `apt-get update` for one board must not run under another board's `apt-cache show`.
var aptMetadata sync.Mutex

// Fetch resolves metapackage for arch, and returns the unpacked kernel from cacheDir,
// downloading and unpacking it first unless that exact package version is cached.
// For a foreign arch it adds the architecture to dpkg and updates the package lists once.
func Fetch(ctx context.Context, log *slog.Logger, arch, metapackage, cacheDir string) (Kernel, error) {
	pkg, version, err := resolveLocked(ctx, log, arch, metapackage)
	if err != nil {
		return Kernel{}, err
	}
	k := Kernel{Metapackage: metapackage, Package: pkg, Version: version, Arch: arch}
	if k.Dir, err = unpacked(ctx, log, Package{Name: pkg, Version: version, Arch: arch}, cacheDir); err != nil {
		return Kernel{}, err
	}
	if k.Release, err = release(k.Dir); err != nil {
		return Kernel{}, err
	}
	if _, err := os.Stat(k.Image()); err != nil {
		return Kernel{}, fmt.Errorf("kernel package %s: %w", pkg, err)
	}
	return k, nil
}

// Package is an unpacked Debian package.
type Package struct {
	// Name is the package name, e.g. systemd-boot-efi.
	Name string `json:"package"`
	// Version is the Debian version that was unpacked, e.g. 252.39-1~deb12u2.
	Version string `json:"version"`
	// Arch is the Debian architecture.
	Arch string `json:"arch"`
	// Dir is the unpacked package's root in the cache.
	Dir string `json:"-"`
}

// FetchPackage returns the Debian package name for arch, in the version apt would install
// now, unpacked in cacheDir: downloaded and unpacked first unless that exact version is
// cached. Like Fetch, it adds a foreign arch to dpkg and updates the package lists when
// needed.
func FetchPackage(ctx context.Context, log *slog.Logger, arch, name, cacheDir string) (Package, error) {
	version, err := candidateLocked(ctx, log, arch, name)
	if err != nil {
		return Package{}, err
	}
	p := Package{Name: name, Version: version, Arch: arch}
	if p.Dir, err = unpacked(ctx, log, p, cacheDir); err != nil {
		return Package{}, err
	}
	return p, nil
}

// candidateLocked is candidate with the apt lists held, the arch known to dpkg and the
// lists updated once when apt does not know the package.
func candidateLocked(ctx context.Context, log *slog.Logger, arch, name string) (version string, err error) {
	aptMetadata.Lock()
	defer aptMetadata.Unlock()
	if err := ensureArch(ctx, log, arch); err != nil {
		return "", err
	}
	err = withUpdate(ctx, log, name, func() (err error) {
		version, err = candidate(ctx, arch, name)
		return err
	})
	return version, err
}

// candidate returns the version of name:arch that apt would install.
func candidate(ctx context.Context, arch, name string) (string, error) {
	record, err := output(ctx, "apt-cache", "show", "--no-all-versions", name+":"+arch)
	if err != nil {
		return "", err
	}
	v := field(record, "Version")
	if v == "" {
		return "", fmt.Errorf("%s:%s: no Version in apt-cache show", name, arch)
	}
	return v, nil
}

// withUpdate runs look, and once more after updating the package lists when apt did not
// know what it looked for.
func withUpdate(ctx context.Context, log *slog.Logger, name string, look func() error) error {
	err := look()
	if err == nil {
		return nil
	}
	log.Info("package not in the apt lists, updating them", "package", name, "err", err)
	if err := aptUpdate(ctx, log); err != nil {
		return err
	}
	return look()
}

// unpacked returns p's directory in cacheDir, downloading and unpacking p first unless
// that exact version is there.
func unpacked(ctx context.Context, log *slog.Logger, p Package, cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, fmt.Sprintf("%s_%s_%s", p.Name, p.Version, p.Arch))
	if _, err := os.Stat(filepath.Join(dir, completeMarker)); err == nil {
		log.Debug("package cached", "package", p.Name, "version", p.Version, "dir", dir)
		return dir, nil
	}
	if err := download(ctx, log, p, dir, cacheDir); err != nil {
		return "", err
	}
	return dir, nil
}

func resolveLocked(ctx context.Context, log *slog.Logger, arch, metapackage string) (pkg, version string, err error) {
	aptMetadata.Lock()
	defer aptMetadata.Unlock()
	if err := ensureArch(ctx, log, arch); err != nil {
		return "", "", err
	}
	return resolve(ctx, log, arch, metapackage)
}

// ensureArch makes dpkg and apt know arch when it is not the host's own.
func ensureArch(ctx context.Context, log *slog.Logger, arch string) error {
	native, err := output(ctx, "dpkg", "--print-architecture")
	if err != nil {
		return err
	}
	if strings.TrimSpace(native) == arch {
		return nil
	}
	foreign, err := output(ctx, "dpkg", "--print-foreign-architectures")
	if err != nil {
		return err
	}
	if slices.Contains(strings.Fields(foreign), arch) {
		return nil
	}
	log.Info("adding a dpkg architecture", "arch", arch)
	if _, err := output(ctx, "dpkg", "--add-architecture", arch); err != nil {
		return err
	}
	return aptUpdate(ctx, log)
}

// resolve turns the metapackage into the ABI package it depends on and that package's
// version, updating the package lists once when apt knows neither.
func resolve(ctx context.Context, log *slog.Logger, arch, metapackage string) (pkg, version string, err error) {
	err = withUpdate(ctx, log, metapackage, func() (err error) {
		pkg, version, err = resolveCached(ctx, arch, metapackage)
		return err
	})
	return pkg, version, err
}

func resolveCached(ctx context.Context, arch, metapackage string) (pkg, version string, err error) {
	meta, err := output(ctx, "apt-cache", "show", "--no-all-versions", metapackage+":"+arch)
	if err != nil {
		return "", "", err
	}
	pkg, version, err = parseMetapackage(meta)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", metapackage, err)
	}
	abi, err := output(ctx, "apt-cache", "show", "--no-all-versions", pkg+":"+arch)
	if err != nil {
		return "", "", err
	}
	if got := field(abi, "Version"); got != version {
		return "", "", fmt.Errorf("%s needs %s %s but apt has %q", metapackage, pkg, version, got)
	}
	return pkg, version, nil
}

// parseMetapackage reads an `apt-cache show` record of a linux-image metapackage and
// returns the linux-image package it depends on and the exact version it pins.
func parseMetapackage(record string) (pkg, version string, err error) {
	deps := field(record, "Depends")
	for _, dep := range strings.Split(deps, ",") {
		// One alternative is enough: Debian's kernel metapackages have none.
		dep, _, _ = strings.Cut(strings.TrimSpace(dep), "|")
		name, constraint, _ := strings.Cut(strings.TrimSpace(dep), " ")
		if !strings.HasPrefix(name, "linux-image-") {
			continue
		}
		constraint = strings.TrimSpace(constraint)
		if !strings.HasPrefix(constraint, "(= ") || !strings.HasSuffix(constraint, ")") {
			return "", "", fmt.Errorf("dependency %q does not pin an exact version", dep)
		}
		return name, strings.TrimSpace(constraint[3 : len(constraint)-1]), nil
	}
	return "", "", fmt.Errorf("no linux-image dependency in %q", deps)
}

// field returns the value of a one-line field of the first record in an apt-cache show
// output.
func field(record, name string) string {
	s := bufio.NewScanner(strings.NewReader(record))
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), name+":"); ok {
			return strings.TrimSpace(v)
		}
		if s.Text() == "" {
			break
		}
	}
	return ""
}

// download fetches and unpacks the package into a temporary directory and renames it into
// place, so concurrent builds and interrupted ones never see half a package.
func download(ctx context.Context, log *slog.Logger, p Package, dir, cacheDir string) error {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".fetch-")
	if err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	log.Info("downloading package", "package", p.Name, "version", p.Version, "arch", p.Arch)
	get := exec.CommandContext(ctx, "apt-get", "download", "-q",
		// Downloading into a directory _apt cannot write is fine for a build: skip the
		// sandbox user instead of printing a warning on every fetch.
		"-o", "APT::Sandbox::User=root",
		fmt.Sprintf("%s:%s=%s", p.Name, p.Arch, p.Version))
	get.Dir = tmp
	if out, err := get.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %w: %s", p.Name, err, bytes.TrimSpace(out))
	}
	debs, err := filepath.Glob(filepath.Join(tmp, p.Name+"_*.deb"))
	if err != nil || len(debs) != 1 {
		return fmt.Errorf("apt-get download %s: want one .deb, found %v", p.Name, debs)
	}
	root := filepath.Join(tmp, "root")
	if _, err := output(ctx, "dpkg", "-x", debs[0], root); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, completeMarker), []byte(p.Name+" "+p.Version+"\n"), 0o644); err != nil {
		return fmt.Errorf("package cache: %w", err)
	}
	if err := os.Rename(root, dir); err != nil {
		// Another build may have finished the same package first; its copy is as good.
		if _, statErr := os.Stat(filepath.Join(dir, completeMarker)); statErr == nil {
			return nil
		}
		return fmt.Errorf("package cache: %w", err)
	}
	return nil
}

// release returns the single lib/modules/<release> directory name of an unpacked kernel.
func release(dir string) (string, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "lib", "modules"))
	if err != nil {
		return "", fmt.Errorf("kernel package: %w", err)
	}
	if len(entries) != 1 || !entries[0].IsDir() {
		return "", fmt.Errorf("kernel package %s: want one lib/modules directory, found %d entries", dir, len(entries))
	}
	return entries[0].Name(), nil
}

// aptUpdate refreshes the package lists (needs root).
func aptUpdate(ctx context.Context, log *slog.Logger) error {
	log.Info("updating the apt package lists")
	_, err := output(ctx, "apt-get", "update", "-qq")
	return err
}

// output runs a command and returns its stdout; the error carries its stderr.
func output(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
		}
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return string(out), nil
}
