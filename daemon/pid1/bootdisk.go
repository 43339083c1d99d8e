package pid1

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/edgegate/edgegate/firmware/efivar"
	"github.com/edgegate/edgegate/firmware/image"
)

// The boot disk is the disk the boot loader loaded the firmware from: systemd-boot names
// its partition by GPT unique GUID (LoaderDevicePartUUID). Its storage driver may be a
// module that found it moments ago, or a chain of them (xHCI, then USB storage, then the
// SCSI disk), and disks register on their own time: PID 1 waits for it before it looks
// for the EFI system partition and the data partition, and prefers theirs on that disk to
// any other (a second gateway's disk or stick plugged in). A boot without the variable
// (QEMU's -kernel, another boot loader) looks at once, as before.
const bootDiskWait = 30 * time.Second

// findBootDisk waits for the boot loader's partition and records its disk. It gives up
// after bootDiskWait: a disk that never shows is logged by name, and the partitions are
// then looked for on every disk.
func (m *Machine) findBootDisk() {
	uuid, err := efivar.Store{Dir: m.path(efivar.Dir)}.Get(efivar.LoaderDevicePartUUID)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		m.log.Warn("reading the boot loader's partition failed; looking on every disk", "err", err)
		return
	}
	want, err := image.ParseGUID(strings.TrimSpace(uuid))
	if err != nil {
		m.log.Warn("the boot loader's partition is not a GUID; looking on every disk", "LoaderDevicePartUUID", uuid, "err", err)
		return
	}
	start := time.Now()
	deadline := start.Add(m.timing.bootDiskWait)
	tables := map[string]image.Table{} // disks read so far, by name
	for {
		devs, err := m.blockDevices()
		if err != nil {
			m.log.Warn("listing block devices failed; looking on every disk", "err", err)
			return
		}
		for _, d := range devs {
			if d.disk == "" || d.partN == 0 {
				continue
			}
			t, ok := tables[d.disk]
			if !ok {
				// A table that cannot be read yet (a disk still settling) is read again at
				// the next look; one that was read is kept.
				if t, err = m.readPartitionTable(d.disk); err != nil {
					m.log.Debug("reading a partition table failed", "disk", d.disk, "err", err)
				} else {
					tables[d.disk] = t
				}
			}
			for _, p := range t.Partitions {
				if p.Number == d.partN && p.GUID == want {
					m.bootDisk = d.disk
					m.log.Info("boot disk found", "disk", d.disk, "partition", d.node, "took", since(start))
					return
				}
			}
		}
		if !time.Now().Before(deadline) {
			m.log.Error("the disk the boot loader booted from did not appear; looking on every disk",
				"LoaderDevicePartUUID", want.String(), "waited", m.timing.bootDiskWait)
			return
		}
		time.Sleep(dataPoll)
	}
}

// readPartitionTable reads the primary GPT of the disk sysfs names name (a '/' in the
// device node's name is a '!' there).
func (m *Machine) readPartitionTable(name string) (image.Table, error) {
	f, err := os.Open(m.path("/dev/" + strings.ReplaceAll(name, "!", "/")))
	if err != nil {
		return image.Table{}, err
	}
	defer f.Close()
	return image.ReadPrimaryTable(f)
}

// onBootDiskFirst puts the devices on the boot disk first, keeping the order otherwise.
func (m *Machine) onBootDiskFirst(devs []blockDevice) []blockDevice {
	if m.bootDisk == "" {
		return devs
	}
	out := make([]blockDevice, 0, len(devs))
	for _, d := range devs {
		if d.disk == m.bootDisk {
			out = append(out, d)
		}
	}
	for _, d := range devs {
		if d.disk != m.bootDisk {
			out = append(out, d)
		}
	}
	return out
}
