package pid1

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"github.com/edgegate/edgegate/firmware/fat"
	"github.com/edgegate/edgegate/firmware/layout"
	"golang.org/x/sys/unix"
)

// espMountpoint is where the EFI system partition, with the firmware's A/B slots, is
// mounted: read-only, except while the updater writes it (ESPWritable).
const espMountpoint = "/boot/efi"

// espMount is how the ESP is mounted. FAT has no journal: kept read-only, a power cut
// cannot damage it; errors=remount-ro stops writes to a damaged one.
func espMount(dev string, rw bool) Mount {
	mt := Mount{Source: dev, Target: espMountpoint, FSType: "vfat", Flags: nosuidNodevNoexec | unix.MS_NOATIME,
		Data: "errors=remount-ro", Persistent: true}
	if !rw {
		mt.Flags |= unix.MS_RDONLY
	}
	return mt
}

// mountESP mounts the EFI system partition the disk image made (GPT partition name
// layout.ESPPartName). Without one (a board booted by a boot loader of its own, QEMU with
// -kernel) the gateway runs as before and cannot update itself; the updater says so.
func (m *Machine) mountESP() {
	devs, err := m.blockDevices()
	if err != nil {
		m.log.Warn("looking for the EFI system partition failed", "err", err)
		return
	}
	var found []string
	for _, d := range m.onBootDiskFirst(devs) {
		if d.partName == layout.ESPPartName {
			found = append(found, d.node)
		}
	}
	if len(found) == 0 {
		m.log.Info("no EFI system partition; firmware updates unavailable", "search", "GPT partition name "+layout.ESPPartName)
		return
	}
	if len(found) > 1 {
		m.log.Warn("several EFI system partitions; using the first", "devs", found)
	}
	m.repairESP(found[0])
	mt := espMount(found[0], false)
	if err := m.sys.Mounts.Mount(mt); err != nil {
		m.log.Error("mounting the EFI system partition failed; firmware updates unavailable", "dev", found[0], "err", err)
		return
	}
	m.mounted = append(m.mounted, mt)
	m.espDev = found[0]
	m.console.marker("EDGEGATE-ESP %s %s", found[0], espMountpoint)
}

// repairESP checks the FAT of the EFI system partition on node, not yet mounted, and
// repairs what a power cut during a write left: FAT has no journal, and a cut loses, keeps
// or tears unflushed sectors in any order (a directory entry whose clusters the FAT never
// got, a chain claimed by two names after a torn rename, chains nothing claims). Linux
// would later free clusters another file uses, and the ESP would degrade until a slot no
// longer boots. A volume it cannot check is mounted as it is.
func (m *Machine) repairESP(node string) {
	start := time.Now()
	// O_EXCL on a block device: refused while it is mounted.
	f, err := os.OpenFile(m.path(node), os.O_RDWR|os.O_EXCL, 0)
	if err != nil {
		m.log.Error("checking the EFI system partition failed; mounting it as it is", "dev", node, "err", err)
		return
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd) // a block device's Stat says 0
	if err != nil {
		m.log.Error("checking the EFI system partition failed; mounting it as it is", "dev", node, "err", err)
		return
	}
	rep, err := RepairESP(f, size)
	for _, finding := range rep.Findings {
		m.log.Warn("EFI system partition repaired", "dev", node, "finding", finding.String())
	}
	if err != nil {
		m.log.Error("checking the EFI system partition failed; mounting it as it is", "dev", node, "err", err)
		return
	}
	if !rep.Clean() {
		m.console.marker("EDGEGATE-ESP-REPAIRED %s findings=%d", node, len(rep.Findings))
		m.log.Warn("EFI system partition repaired", "dev", node, "summary", rep.String(), "took", since(start))
		return
	}
	m.log.Debug("EFI system partition checked", "dev", node, "summary", rep.String(), "took", since(start))
}

// RepairESP is the check and repair PID 1 runs on the ESP before it mounts it, for a test
// to run on an image.
func RepairESP(dev fat.Device, size int64) (fat.Report, error) {
	return fat.Repair(dev, size, fat.Options{Loser: espLoser})
}

// espLoser decides which of two entries sharing one cluster chain keeps it: the target of
// the rename that a power cut tore. A temporary name loses (fat.DefaultLoser); of two boot
// entries of one slot, the newer name wins: the committed one (the updater's commit drops
// the counter) or the one with more tries done (systemd-boot counts a boot by renaming).
func espLoser(a, b fat.Entry) bool {
	if fat.Temporary(a.Name) != fat.Temporary(b.Name) {
		return fat.Temporary(a.Name)
	}
	sa, ta, errA := layout.ParseFileName(a.Name)
	sb, tb, errB := layout.ParseFileName(b.Name)
	if errA != nil || errB != nil || sa != sb || path.Dir(a.Path) != path.Dir(b.Path) {
		return false
	}
	switch {
	case ta == nil:
		return false
	case tb == nil:
		return true
	}
	return tb.Done > ta.Done
}

// Slot is the firmware slot that booted (edgegate.slot= on the kernel command line); ""
// when the boot loader named none.
func (m *Machine) Slot() layout.Slot { return m.cmdline.Slot }

// ESP returns the mounted EFI system partition's mount point; ok is false without one.
func (m *Machine) ESP() (root string, ok bool) {
	if m.espDev == "" {
		return "", false
	}
	return m.path(espMountpoint), true
}

// ESPWritable remounts the EFI system partition read-write, runs fn, flushes the partition
// and remounts it read-only, even when fn failed. Calls are serialised.
func (m *Machine) ESPWritable(fn func() error) error {
	m.espMu.Lock()
	defer m.espMu.Unlock()
	if m.espDev == "" {
		return errors.New("no EFI system partition mounted")
	}
	rw := espMount(m.espDev, true)
	rw.Flags |= unix.MS_REMOUNT
	if err := m.sys.Mounts.Mount(rw); err != nil {
		return fmt.Errorf("remounting %s read-write: %w", espMountpoint, err)
	}
	start := time.Now()
	err := fn()
	m.sys.Power.Sync()
	ro := espMount(m.espDev, false)
	ro.Flags |= unix.MS_REMOUNT
	if rerr := m.sys.Mounts.Mount(ro); rerr != nil {
		// It stays writable until the next boot; the data on it is synced.
		m.log.Error("remounting the EFI system partition read-only failed", "target", espMountpoint, "err", rerr)
	}
	m.log.Debug("EFI system partition written", "took", since(start), "err", err)
	return err
}

// Marker prints a console marker line, the firmware contract's machine-readable progress.
func (m *Machine) Marker(format string, args ...any) { m.console.marker(format, args...) }

// NetworkProblem reports what of the configured network is not up: a static address that
// could not be added, a DHCP device without a lease. nil when everything is up (or
// nothing is configured).
func (m *Machine) NetworkProblem() error {
	m.netMu.Lock()
	defer m.netMu.Unlock()
	var down []string
	for _, c := range m.netPlan {
		if !m.netUp[c.String()] {
			down = append(down, c.String())
		}
	}
	if len(down) > 0 {
		return fmt.Errorf("network not up: %v", down)
	}
	return nil
}

// netConfigured records that one entry of the network plan is up.
func (m *Machine) netConfigured(c IPConfig) {
	m.netMu.Lock()
	defer m.netMu.Unlock()
	if m.netUp == nil {
		m.netUp = map[string]bool{}
	}
	m.netUp[c.String()] = true
}
