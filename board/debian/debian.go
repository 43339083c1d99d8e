// Package debian fetches a board's Debian kernel package into a local cache without
// installing it: the metapackage is resolved to its ABI package with apt-cache, the .deb
// is fetched with `apt-get download` and unpacked with `dpkg -x`. Debian ships no
// modules.dep in the package (depmod makes it at install time), so callers read module
// metadata from the .ko files themselves.
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
	k.Dir = filepath.Join(cacheDir, fmt.Sprintf("%s_%s_%s", pkg, version, arch))
	if _, err := os.Stat(filepath.Join(k.Dir, completeMarker)); err == nil {
		log.Debug("kernel package cached", "package", pkg, "version", version, "dir", k.Dir)
	} else if err := download(ctx, log, k, cacheDir); err != nil {
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
	pkg, version, err = resolveCached(ctx, arch, metapackage)
	if err == nil {
		return pkg, version, nil
	}
	log.Info("package not in the apt lists, updating them", "package", metapackage, "err", err)
	if err := aptUpdate(ctx, log); err != nil {
		return "", "", err
	}
	return resolveCached(ctx, arch, metapackage)
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
// place, so concurrent builds and interrupted ones never see half a kernel.
func download(ctx context.Context, log *slog.Logger, k Kernel, cacheDir string) error {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, ".fetch-")
	if err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	log.Info("downloading kernel package", "package", k.Package, "version", k.Version, "arch", k.Arch)
	get := exec.CommandContext(ctx, "apt-get", "download", "-q",
		// Downloading into a directory _apt cannot write is fine for a build: skip the
		// sandbox user instead of printing a warning on every fetch.
		"-o", "APT::Sandbox::User=root",
		fmt.Sprintf("%s:%s=%s", k.Package, k.Arch, k.Version))
	get.Dir = tmp
	if out, err := get.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %w: %s", k.Package, err, bytes.TrimSpace(out))
	}
	debs, err := filepath.Glob(filepath.Join(tmp, k.Package+"_*.deb"))
	if err != nil || len(debs) != 1 {
		return fmt.Errorf("apt-get download %s: want one .deb, found %v", k.Package, debs)
	}
	root := filepath.Join(tmp, "root")
	if _, err := output(ctx, "dpkg", "-x", debs[0], root); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, completeMarker), []byte(k.Package+" "+k.Version+"\n"), 0o644); err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	if err := os.Rename(root, k.Dir); err != nil {
		// Another build may have finished the same package first; its copy is as good.
		if _, statErr := os.Stat(filepath.Join(k.Dir, completeMarker)); statErr == nil {
			return nil
		}
		return fmt.Errorf("kernel cache: %w", err)
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
