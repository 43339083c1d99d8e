package pid1

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Mount is one file system PID 1 mounts.
type Mount struct {
	Source, Target, FSType string
	Flags                  uintptr
	Data                   string
	// Essential mounts fail the boot; the others are logged by name and skipped.
	Essential bool
	// OnlyIf names a path that must exist for the mount to make sense (efivarfs only on an
	// EFI boot); without it the mount is skipped quietly.
	OnlyIf string
	// Persistent marks a file system on a disk: only the unmount closes its journal, so a
	// failed unmount is an error to log, not noise.
	Persistent bool
}

func (m Mount) String() string {
	s := fmt.Sprintf("%s on %s type %s", m.Source, m.Target, m.FSType)
	if m.Data != "" {
		s += " (" + m.Data + ")"
	}
	return s
}

const (
	nosuidNodev       = unix.MS_NOSUID | unix.MS_NODEV
	nosuidNodevNoexec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
)

// mountTable is what a Linux userland expects, in order: each entry's target lives on a file
// system mounted before it.
var mountTable = []Mount{
	{Source: "proc", Target: "/proc", FSType: "proc", Flags: nosuidNodevNoexec, Essential: true},
	{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: nosuidNodevNoexec, Essential: true},
	{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: unix.MS_NOSUID, Data: "mode=0755", Essential: true},
	{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Data: "newinstance,ptmxmode=0666,mode=0620"},
	{Source: "tmpfs", Target: "/run", FSType: "tmpfs", Flags: nosuidNodev, Data: "mode=0755", Essential: true},
	{Source: "tmpfs", Target: "/tmp", FSType: "tmpfs", Flags: nosuidNodev, Data: "mode=1777", Essential: true},
	{Source: "cgroup2", Target: "/sys/fs/cgroup", FSType: "cgroup2", Flags: nosuidNodevNoexec},
}

// moduleMountTable is mounted once the modules are loaded: efivarfs is a module on Debian's
// kernels (the boot loader's variables, LoaderEntrySelected, are read through it).
var moduleMountTable = []Mount{
	{Source: "efivarfs", Target: "/sys/firmware/efi/efivars", FSType: "efivarfs", Flags: nosuidNodevNoexec, OnlyIf: "/sys/firmware/efi"},
}

// Mounter mounts and unmounts file systems.
type Mounter interface {
	// Mount creates the target directory if needed, then mounts.
	Mount(m Mount) error
	Unmount(target string) error
}

// mountAll works through the table: an essential mount that fails ends the boot, any other
// failure is logged by name. It returns the mounts made, for the unmount at shutdown.
func (m *Machine) mountAll(table []Mount) ([]Mount, error) {
	start := time.Now()
	var done []Mount
	for _, mt := range table {
		if mt.OnlyIf != "" {
			if _, err := os.Stat(m.path(mt.OnlyIf)); err != nil {
				m.log.Debug("mount skipped", "target", mt.Target, "missing", mt.OnlyIf)
				continue
			}
		}
		if err := m.sys.Mounts.Mount(mt); err != nil {
			if mt.Essential {
				return done, fmt.Errorf("mount %s: %w", mt, err)
			}
			m.log.Warn("mount failed; continuing without it", "target", mt.Target, "fstype", mt.FSType, "err", err)
			continue
		}
		done = append(done, mt)
	}
	m.log.Info("file systems mounted", "count", len(done), "took", since(start))
	return done, nil
}

// unmountAll unmounts in reverse order. Failures are expected for /dev and /proc, which
// PID 1 itself holds open; they are logged at debug level because a pseudo file system
// loses nothing when the power goes.
func (m *Machine) unmountAll() {
	for i := len(m.mounted) - 1; i >= 0; i-- {
		mt := m.mounted[i]
		err := m.sys.Mounts.Unmount(mt.Target)
		switch {
		case err != nil && mt.Persistent:
			m.log.Error("unmount failed; the journal is replayed at the next mount", "target", mt.Target, "dev", mt.Source, "err", err)
		case err != nil:
			m.log.Debug("unmount failed", "target", mt.Target, "err", err)
		case mt.Persistent:
			m.log.Info("unmounted", "target", mt.Target, "dev", mt.Source)
		}
	}
}

// kernelMounts is the Mounter of the running kernel.
type kernelMounts struct{}

func (kernelMounts) Mount(m Mount) error {
	if err := os.MkdirAll(m.Target, 0o755); err != nil {
		return err
	}
	err := unix.Mount(m.Source, m.Target, m.FSType, m.Flags, m.Data)
	if errors.Is(err, unix.EBUSY) && alreadyMounted(m) {
		// A kernel with CONFIG_DEVTMPFS_MOUNT, or a test harness, may have been first.
		return nil
	}
	return err
}

func (kernelMounts) Unmount(target string) error {
	if err := unix.Unmount(target, 0); err != nil {
		// Detach what is busy so that what is not can still be flushed and released.
		return errors.Join(err, unix.Unmount(target, unix.MNT_DETACH))
	}
	return nil
}

// alreadyMounted reports whether /proc/self/mounts lists m's target with m's type.
func alreadyMounted(m Mount) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && filepath.Clean(f[1]) == m.Target && f[2] == m.FSType {
			return true
		}
	}
	return false
}
