package pid1

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The persistent data partition is the gateway's only writable storage that outlives a
// power-off: the daemon's offline-first cache of the cluster's state, and the gateway's own
// configuration. On the disk image it is the GPT partition next to the EFI system partition
// (DESIGN.md §7); a board may also have a plain ext4 disk, or name a device on the kernel
// command line. A gateway without one still boots: its state then lives in memory.
const (
	// dataMountpoint is the daemon's default --state-dir (daemon/app/config.go), so the cache
	// lands on the partition without a flag.
	dataMountpoint = "/var/lib/edgegate"
	// dataName is what the default search looks for: the GPT partition's name, or the
	// ext4 file system's label (mke2fs -L edgegate-data).
	dataName = "edgegate-data"
	// dataConfigFile is the gateway's own configuration, which beats the image's. A token
	// and CA file next to it are referenced from it (tokenFile: /var/lib/edgegate/token,
	// caFile: /var/lib/edgegate/ca.crt): no code of PID 1 reads them.
	dataConfigFile = dataMountpoint + "/config.yaml"
	// dataWait bounds the wait for a data partition the kernel command line names: block
	// drivers may register their disks after their module has loaded (USB, some MMC hosts).
	dataWait = 5 * time.Second
	// dataPoll is the pause between two looks for it.
	dataPoll = 50 * time.Millisecond
)

// The ext4 superblock starts 1024 bytes into the file system; ext2 and ext3 share it.
const (
	ext4SuperblockOffset = 1024
	ext4MagicOffset      = 56  // __le16 s_magic
	ext4LabelOffset      = 120 // char s_volume_name[16]
	ext4Magic            = 0xEF53
	ext4LabelLen         = 16
)

// blockDevice is one entry of /sys/class/block: a disk or a partition.
type blockDevice struct {
	// node is its device node, /dev/<DEVNAME> on devtmpfs.
	node string
	// partName is the GPT partition's name (PARTNAME in its uevent); empty for a disk or
	// an MBR partition.
	partName string
	// partN is a partition's number (PARTN); 0 for a disk.
	partN int
	// disk is the name of the disk a partition is on (its parent in sysfs), and a disk's
	// own name.
	disk string
}

// blockDevices lists the block devices that have media, in /sys/class/block's order.
func (m *Machine) blockDevices() ([]blockDevice, error) {
	dir := m.path("/sys/class/block")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // a kernel without a block layer
	}
	if err != nil {
		return nil, err
	}
	var devs []blockDevice
	for _, e := range entries {
		// An unused loop device or an empty card reader has no sectors, and nothing to read.
		size, err := os.ReadFile(path.Join(dir, e.Name(), "size"))
		if err != nil || strings.TrimSpace(string(size)) == "0" {
			continue
		}
		uevent, err := os.ReadFile(path.Join(dir, e.Name(), "uevent"))
		if err != nil {
			continue
		}
		d := blockDevice{node: "/dev/" + e.Name(), disk: e.Name()}
		for _, line := range strings.Split(string(uevent), "\n") {
			k, v, _ := strings.Cut(line, "=")
			switch k {
			case "DEVNAME":
				// The node's own name: "cciss/c0d0" is "cciss!c0d0" in sysfs.
				d.node = "/dev/" + v
			case "PARTNAME":
				d.partName = v
			case "PARTN":
				d.partN, _ = strconv.Atoi(v)
			}
		}
		if d.partN > 0 {
			// /sys/class/block/<part> links to .../<disk>/<part>.
			if real, err := filepath.EvalSymlinks(path.Join(dir, e.Name())); err == nil {
				d.disk = filepath.Base(filepath.Dir(real))
			}
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// readExt4Label reads the volume name of the ext2/3/4 file system in file; ok is false
// when the file holds no such file system.
func readExt4Label(file string) (label string, ok bool, err error) {
	f, err := os.Open(file)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	sb := make([]byte, ext4LabelOffset+ext4LabelLen)
	if _, err := f.ReadAt(sb, ext4SuperblockOffset); err != nil {
		if errors.Is(err, io.EOF) {
			return "", false, nil // too small to hold one
		}
		return "", false, err
	}
	if binary.LittleEndian.Uint16(sb[ext4MagicOffset:]) != ext4Magic {
		return "", false, nil
	}
	name := sb[ext4LabelOffset:]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return string(name), true, nil
}

// matchData returns the device nodes whose GPT partition name is partName (when set), then
// those whose ext4 label is label (when set), without repeats.
func (m *Machine) matchData(devs []blockDevice, partName, label string) []string {
	var nodes []string
	seen := map[string]bool{}
	add := func(node string) {
		if !seen[node] {
			seen[node] = true
			nodes = append(nodes, node)
		}
	}
	if partName != "" {
		for _, d := range devs {
			if d.partName == partName {
				add(d.node)
			}
		}
	}
	if label != "" {
		for _, d := range devs {
			l, ok, err := readExt4Label(m.path(d.node))
			if err != nil {
				m.log.Debug("reading a file system label failed", "dev", d.node, "err", err)
				continue
			}
			if ok && l == label {
				add(d.node)
			}
		}
	}
	return nodes
}

// lookForData looks once for the data partition the spec names (the default search for a
// zero spec) and returns the candidates, best first.
func (m *Machine) lookForData(spec DataSpec) ([]string, error) {
	if spec.Device != "" {
		if _, err := os.Stat(m.path(spec.Device)); err != nil {
			return nil, nil
		}
		return []string{spec.Device}, nil
	}
	devs, err := m.blockDevices()
	if err != nil {
		return nil, fmt.Errorf("listing block devices: %w", err)
	}
	switch {
	case spec.Label != "":
		return m.matchData(devs, "", spec.Label), nil
	case spec.PartLabel != "":
		return m.matchData(devs, spec.PartLabel, ""), nil
	}
	// The partition name first: it is what the disk image sets, and a file system
	// label can be copied onto a second disk with the file system.
	return m.matchData(m.onBootDiskFirst(devs), dataName, dataName), nil
}

// findDataPartition returns the data partition's device node, or "" when there is none.
// A partition the kernel command line names is waited for (up to timing.dataWait); the
// default search looks once, so that a board without a disk boots without delay.
func (m *Machine) findDataPartition() string {
	spec := m.cmdline.Data
	deadline := time.Now().Add(m.timing.dataWait)
	for {
		found, err := m.lookForData(spec)
		if err != nil {
			m.log.Warn("looking for the persistent data partition failed", "err", err)
		}
		if len(found) > 1 {
			m.log.Warn("several persistent data partitions; using the first", "devs", found)
		}
		if len(found) > 0 {
			return found[0]
		}
		if spec.IsZero() || err != nil || !time.Now().Before(deadline) {
			return ""
		}
		time.Sleep(dataPoll)
	}
}

// dataMount is how the data partition is mounted. Nothing on it is a program or a device;
// errors=remount-ro overrides a superblock that asks the kernel to panic on a file system
// error, so a damaged partition can never take the gateway down; noatime spares flash
// cells a write per read.
func dataMount(dev string) Mount {
	return Mount{
		Source: dev, Target: dataMountpoint, FSType: "ext4",
		Flags: nosuidNodevNoexec | unix.MS_NOATIME, Data: "errors=remount-ro", Persistent: true,
	}
}

// mountData finds and mounts the persistent data partition. Nothing about it fails the
// boot: without it (none, not found, a wrong or damaged file system) the daemon's state
// lives in memory until power-off, and the log says so once, by name.
func (m *Machine) mountData() {
	start := time.Now()
	spec := m.cmdline.Data
	dev := m.findDataPartition()
	if dev == "" {
		if spec.IsZero() {
			m.log.Info("no persistent data partition; state lives in memory until power-off",
				"search", "GPT partition name or ext4 label "+dataName)
		} else {
			m.log.Error("persistent data partition not found; state lives in memory until power-off",
				"edgegate.data", spec.String(), "waited", m.timing.dataWait)
		}
		return
	}
	m.repairData(dev)
	mt := dataMount(dev)
	if err := m.sys.Mounts.Mount(mt); err != nil {
		m.log.Error("mounting the persistent data partition failed; state lives in memory until power-off",
			"dev", dev, "target", dataMountpoint, "fstype", mt.FSType, "err", err)
		return
	}
	m.mounted = append(m.mounted, mt)
	m.console.marker("EDGEGATE-DATA %s %s", dev, dataMountpoint)
	m.log.Info("persistent data partition mounted", "dev", dev, "target", dataMountpoint, "took", since(start))
}
