package pid1

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// NIC names. The kernel names NICs eth0, eth1, ... in the order their drivers register
// them: with NICs of several kinds, or a driver that probes asynchronously, that order is
// not the ports' and can change from one boot to the next. PID 1 renames the NICs present
// at boot so that ethN is the Nth NIC by its place on the bus (its sysfs device path: PCI
// domain, bus, slot and function, and a USB NIC by its controller and port), so that a
// configuration that says eth0 means the same port at every boot. Each PCI NIC also gets
// its systemd "path" name as an alternative name (enp3s0, enp0s31f6, enp2s0f1 for a
// dual-port card's second port, with P<domain> first outside domain 0), which the kernel accepts wherever a device's name goes, the
// configuration too: that name stays when a card is added in a lower slot. A NIC that
// appears later (a USB adapter plugged in) keeps the kernel's next free ethN.
// edgegate.ifnames=kernel keeps the kernel's names.

// pciAddress matches a PCI function's sysfs name: domain:bus:slot.function, in hex.
var pciAddress = regexp.MustCompile(`^([0-9a-f]{4,}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$`)

// nic is one NIC present at boot and where it sits.
type nic struct {
	name, device string // device: its sysfs device path, /sys/devices/...
}

// nameNICs names the NICs present by their place on the bus (see above). A rename that
// fails is logged and the rest goes on: the NIC keeps a name, only not the predicted one.
func (m *Machine) nameNICs() {
	if m.cmdline.KernelNICNames {
		return
	}
	names, err := m.sys.Links.NICs()
	if err != nil {
		m.log.Error("listing network devices failed; NICs keep the kernel's names", "err", err)
		return
	}
	var nics []nic
	for _, name := range names {
		dev, err := filepath.EvalSymlinks(m.path(path.Join("/sys/class/net", name, "device")))
		if err != nil {
			continue // no device behind it: not one the bus orders
		}
		nics = append(nics, nic{name: name, device: strings.TrimPrefix(dev, m.path("/"))})
	}
	slices.SortFunc(nics, func(a, b nic) int { return strings.Compare(a.device, b.device) })
	var renames [][2]string
	for i, n := range nics {
		if want := fmt.Sprintf("eth%d", i); n.name != want {
			renames = append(renames, [2]string{n.name, want})
		}
	}
	// Through temporary names: eth1 cannot become eth0 while eth0 is still there.
	for i, r := range renames {
		tmp := fmt.Sprintf("egtmp%d", i)
		if err := m.sys.Links.Rename(r[0], tmp); err != nil {
			m.log.Error("renaming a NIC failed; NICs keep the kernel's names", "dev", r[0], "err", err)
			m.undoRenames(renames[:i])
			return
		}
	}
	for i, r := range renames {
		if err := m.sys.Links.Rename(fmt.Sprintf("egtmp%d", i), r[1]); err != nil {
			m.log.Error("renaming a NIC failed", "dev", r[0], "to", r[1], "err", err)
		}
	}
	if len(renames) > 0 {
		m.log.Info("NICs named by their place on the bus", "renamed", fmt.Sprint(renames))
	}
	for i, n := range nics {
		alt := pathName(n.device, m.multifunction(n.device))
		if alt == "" {
			continue
		}
		if err := m.sys.Links.AddAltName(fmt.Sprintf("eth%d", i), alt); err != nil {
			m.log.Warn("giving a NIC its path name failed", "dev", fmt.Sprintf("eth%d", i), "name", alt, "err", err)
		}
	}
}

// undoRenames gives the NICs renamed to temporary names their names back.
func (m *Machine) undoRenames(done [][2]string) {
	for i, r := range done {
		if err := m.sys.Links.Rename(fmt.Sprintf("egtmp%d", i), r[0]); err != nil {
			m.log.Error("renaming a NIC back failed", "dev", r[0], "err", err)
		}
	}
}

// multifunction says whether the PCI device at the sysfs path device has several functions
// (bit 7 of its configuration header's type byte).
func (m *Machine) multifunction(device string) bool {
	f, err := os.Open(m.path(path.Join(device, "config")))
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 0x0e); err != nil {
		return false
	}
	return b[0]&0x80 != 0
}

// pathName is systemd's "path" name for a NIC on PCI (en[P<domain>]p<bus>s<slot>[f<fn>],
// numbers in decimal, the function when it is not 0 or the device has several), from its
// sysfs device path; "" for a NIC that is not a PCI function (USB, SoC).
func pathName(device string, multifunction bool) string {
	m := pciAddress.FindStringSubmatch(path.Base(device))
	if m == nil {
		return ""
	}
	num := func(hex string) uint64 {
		n, _ := strconv.ParseUint(hex, 16, 32)
		return n
	}
	name := "en"
	if d := num(m[1]); d != 0 {
		name += fmt.Sprintf("P%d", d)
	}
	name += fmt.Sprintf("p%ds%d", num(m[2]), num(m[3]))
	if f := num(m[4]); f != 0 || multifunction {
		name += fmt.Sprintf("f%d", f)
	}
	return name
}
