package pid1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// addNIC puts a NIC into the fake sysfs: /sys/class/net/<name>/device links to its device
// under /sys/devices, whose PCI configuration header says whether it has several functions.
func (tm *testMachine) addNIC(name, device string, multifunction bool) {
	tm.t.Helper()
	dir := filepath.Join(tm.sys.Root, "sys/devices", device)
	config := make([]byte, 64)
	if multifunction {
		config[0x0e] = 0x80
	}
	link := filepath.Join(tm.sys.Root, "sys/class/net", name, "device")
	for _, d := range []string{dir, filepath.Dir(link)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			tm.t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "config"), config, 0o644); err != nil {
		tm.t.Fatal(err)
	}
	if err := os.Symlink(dir, link); err != nil {
		tm.t.Fatal(err)
	}
}

// TestNICsNamedByBusPlace: NICs the kernel named in driver order are renamed by their
// place on the bus, through temporary names, and the PCI ones get their path names; the
// configuration's eth0 is then the NIC in the lowest slot.
func TestNICsNamedByBusPlace(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "console=ttyS0 edgegate.ip=eth0:10.0.2.15/24\n"})
	tm.links.nics = []string{"eth0", "eth1", "eth2", "eth3"}
	tm.addNIC("eth0", "pci0000:00/0000:00:04.0", false)                  // r8169, loaded first
	tm.addNIC("eth1", "pci0000:00/0000:00:02.0", false)                  // e1000e
	tm.addNIC("eth2", "pci0000:00/0000:00:03.0", true)                   // a dual-port card's first port
	tm.addNIC("eth3", "pci0000:00/0000:00:05.0/usb1/1-1/1-1:1.0", false) // a USB adapter
	tm.boot()
	var got []string
	for _, l := range strings.Split(tm.j.dump(), "\n") {
		if strings.HasPrefix(l, "rename ") || strings.HasPrefix(l, "altname ") || strings.HasPrefix(l, "addr ") {
			got = append(got, l)
		}
	}
	want := []string{
		"rename eth1 egtmp0", "rename eth2 egtmp1", "rename eth0 egtmp2",
		"rename egtmp0 eth0", "rename egtmp1 eth1", "rename egtmp2 eth2",
		"altname eth0 enp0s2", "altname eth1 enp0s3f0", "altname eth2 enp0s4",
		"addr eth0 10.0.2.15/24",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestNICsKeepKernelNames: edgegate.ifnames=kernel renames nothing.
func TestNICsKeepKernelNames(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "console=ttyS0 edgegate.ifnames=kernel\n"})
	tm.links.nics = []string{"eth0", "eth1"}
	tm.addNIC("eth0", "pci0000:00/0000:00:04.0", false)
	tm.addNIC("eth1", "pci0000:00/0000:00:02.0", false)
	tm.boot()
	if n := tm.j.count("rename ") + tm.j.count("altname "); n != 0 {
		t.Errorf("%d renames with edgegate.ifnames=kernel:\n%s", n, tm.j.dump())
	}
}

// TestNICRenameFails: a rename the kernel refuses puts the names back; the NICs keep the
// kernel's names and the network still comes up.
func TestNICRenameFails(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.links.nics = []string{"eth0", "eth1"}
	tm.addNIC("eth0", "pci0000:00/0000:00:04.0", false)
	tm.addNIC("eth1", "pci0000:00/0000:00:02.0", false)
	tm.links.fail["rename eth0 egtmp1"] = os.ErrPermission
	tm.boot()
	if !strings.Contains(tm.j.dump(), "rename egtmp0 eth1\n") {
		t.Errorf("the first NIC's temporary name was not undone:\n%s", tm.j.dump())
	}
	if !strings.Contains(tm.console(), `msg="renaming a NIC failed; NICs keep the kernel's names" dev=eth0`) {
		t.Errorf("console:\n%s", tm.console())
	}
}

func TestPathName(t *testing.T) {
	for _, tc := range []struct {
		device string
		multi  bool
		want   string
	}{
		{"/sys/devices/pci0000:00/0000:00:03.0", false, "enp0s3"},
		{"/sys/devices/pci0000:00/0000:00:1f.6", false, "enp0s31f6"},
		{"/sys/devices/pci0000:00/0000:00:1c.0/0000:02:00.1", true, "enp2s0f1"},
		{"/sys/devices/pci0000:00/0000:00:1c.0/0000:02:00.0", true, "enp2s0f0"},
		{"/sys/devices/pci0001:00/0001:10:00.0", false, "enP1p16s0"},
		{"/sys/devices/platform/fe2a0000.ethernet", false, ""},
		{"/sys/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0", false, ""},
	} {
		if got := pathName(tc.device, tc.multi); got != tc.want {
			t.Errorf("pathName(%s, %v) = %q, want %q", tc.device, tc.multi, got, tc.want)
		}
	}
}
