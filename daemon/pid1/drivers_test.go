package pid1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// A machine's drivers as the initramfs builder indexes them: an NVMe disk, an e1000e NIC
// (with a dependency of its own and one the always-loaded list has), virtio_pci whose
// virtio bus then needs virtio_net, USB storage behind xHCI, and a driver whose init
// fails.
const (
	testDeps = `kernel/lib/crc32c_generic.ko:
kernel/drivers/net/mii.ko:
kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko: kernel/drivers/net/mii.ko kernel/lib/crc32c_generic.ko
kernel/drivers/nvme/host/nvme-core.ko:
kernel/drivers/nvme/host/nvme.ko: kernel/drivers/nvme/host/nvme-core.ko
kernel/drivers/virtio/virtio_pci.ko:
kernel/drivers/net/virtio_net.ko:
kernel/drivers/usb/host/xhci-pci.ko:
kernel/drivers/usb/storage/usb-storage.ko:
kernel/drivers/watchdog/i6300esb.ko:
`
	testAliases = `alias pci:v00008086d000010D3sv*sd*bc*sc*i* e1000e
alias pci:v*d*sv*sd*bc01sc08i02* nvme
alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
alias pci:v*d*sv*sd*bc0Csc03i30* xhci_pci
alias usb:v*p*d*dc*dsc*dp*ic08isc06ip50in* usb_storage
alias pci:v00008086d000025ABsv*sd*bc*sc*i* i6300esb
`
	e1000eAlias = "pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00"
	nvmeAlias   = "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02"
	virtioAlias = "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"
	xhciAlias   = "pci:v00001B36d0000000Dsv00000000sd00000000bc0Csc03i30"
	wdtAlias    = "pci:v00008086d000025ABsv00001AF4sd00001100bc08sc80i00"
	usbAlias    = "usb:v46F4p0001d0000dc00dsc00dp00ic08isc06ip50in00"
)

// addDevice adds a device to a bus in the fake sysfs, with the uevent the kernel shows.
func (tm *testMachine) addDevice(bus, name, modalias string) {
	tm.t.Helper()
	dir := filepath.Join(tm.sys.Root, "sys/bus", bus, "devices", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tm.t.Fatal(err)
	}
	uevent := "DRIVER=\nMODALIAS=" + modalias + "\n"
	if err := os.WriteFile(filepath.Join(dir, "uevent"), []byte(uevent), 0o644); err != nil {
		tm.t.Fatal(err)
	}
}

func driverMachine(t *testing.T) *testMachine {
	t.Helper()
	dir := "/lib/modules/" + testRelease
	tm := newTestMachine(t, map[string]string{
		dir + "/edgegate.order": "kernel/lib/crc32c_generic.ko\n",
		dir + "/modules.dep":    testDeps,
		dir + "/modules.alias":  testAliases,
	})
	// Out of address order on purpose: the look at the bus sorts them.
	tm.addDevice("pci", "0000:00:04.0", nvmeAlias)
	tm.addDevice("pci", "0000:00:02.0", e1000eAlias)
	tm.addDevice("pci", "0000:00:03.0", virtioAlias)
	tm.addDevice("pci", "0000:00:05.0", xhciAlias)
	tm.addDevice("pci", "0000:00:06.0", wdtAlias)
	tm.addDevice("pci", "0000:00:07.0", e1000eAlias) // a second NIC of the same kind
	tm.addDevice("platform", "serial8250", "platform:serial8250")
	// virtio_pci brings up the virtio bus with a NIC on it.
	tm.modules.onLoad["virtio_pci.ko"] = func() { tm.addDevice("virtio", "virtio0", "virtio:d00000001v00001AF4") }
	return tm
}

// TestDriversForDevicesPresent boots a machine whose devices need drivers: each loads once,
// after what it needs, in the buses' address order; the bus virtio_pci brings up is looked
// at again; a driver that fails costs only its device; devices that appear later (a USB
// stick behind xHCI) get theirs from the event stream, and a lost event makes PID 1 look
// at every device again.
func TestDriversForDevicesPresent(t *testing.T) {
	tm := driverMachine(t)
	events := make(chan Uevent, 4)
	tm.sys.Uevents = &fakeUevents{events: events}
	tm.modules.fail["i6300esb.ko"] = unix.ENOENT
	tm.boot()

	lib := "/lib/modules/" + testRelease + "/kernel"
	var loads []string
	for _, l := range strings.Split(tm.j.dump(), "\n") {
		if strings.HasPrefix(l, "load ") {
			loads = append(loads, l)
		}
	}
	want := []string{
		"load " + lib + "/lib/crc32c_generic.ko",
		"load " + lib + "/drivers/net/mii.ko",
		"load " + lib + "/drivers/net/ethernet/intel/e1000e/e1000e.ko",
		"load " + lib + "/drivers/virtio/virtio_pci.ko",
		"load " + lib + "/drivers/nvme/host/nvme-core.ko",
		"load " + lib + "/drivers/nvme/host/nvme.ko",
		"load " + lib + "/drivers/usb/host/xhci-pci.ko",
		"load " + lib + "/drivers/watchdog/i6300esb.ko: no such file or directory",
		"load " + lib + "/drivers/net/virtio_net.ko",
	}
	if diff := cmp.Diff(want, loads); diff != "" {
		t.Errorf("loads (-want +got):\n%s", diff)
	}
	if !strings.Contains(tm.markers(), "EDGEGATE-DRIVERS e1000e,virtio_pci,nvme,xhci_pci,virtio_net\n") {
		t.Errorf("markers:\n%s", tm.markers())
	}
	if con := tm.console(); !strings.Contains(con, `msg="module failed to load" module=i6300esb`) {
		t.Errorf("the failed driver is not named:\n%s", con)
	}

	// xHCI enumerates its USB stick later.
	events <- Uevent{Action: "add", DevPath: "/devices/pci0000:00/0000:00:05.0/usb1/1-1/1-1:1.0", Subsystem: "usb", Modalias: usbAlias}
	waitFor(t, "usb_storage loaded", func() bool { return tm.j.count("load "+lib+"/drivers/usb/storage/usb-storage.ko") == 1 })
	// A device of a kind already handled, and events without a modalias, load nothing.
	events <- Uevent{Action: "add", DevPath: "/devices/pci0000:00/0000:00:08.0", Subsystem: "pci", Modalias: e1000eAlias}
	events <- Uevent{Action: "add", DevPath: "/devices/virtual/block/loop0", Subsystem: "block"}
	// Events were lost: a NIC that came meanwhile is found by looking again.
	tm.addDevice("pci", "0000:00:09.0", "pci:v00001AF4d00001041sv00001AF4sd00001100bc02sc00i00")
	tm.modules.onLoad["virtio_pci.ko"] = nil
	events <- Uevent{Action: ueventOverflow}
	waitFor(t, "the look after lost events", func() bool {
		return strings.Contains(tm.console(), `msg="device events were lost; looking at every device again"`)
	})
	close(events)
	time.Sleep(20 * time.Millisecond)
	if n := tm.j.count("load " + lib + "/drivers/net/ethernet/intel/e1000e/e1000e.ko"); n != 1 {
		t.Errorf("e1000e loaded %d times", n)
	}
	// virtio_pci is loaded: its second device needs nothing.
	if n := tm.j.count("load " + lib + "/drivers/virtio/virtio_pci.ko"); n != 1 {
		t.Errorf("virtio_pci loaded %d times", n)
	}
}

// TestDriversWithoutIndex: an image without modules.alias boots on its module list alone.
func TestDriversWithoutIndex(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/lib/modules/" + testRelease + "/edgegate.order": "kernel/lib/crc32c_generic.ko\n"})
	tm.addDevice("pci", "0000:00:02.0", e1000eAlias)
	tm.boot()
	if n := tm.j.count("load "); n != 1 {
		t.Errorf("%d loads, want the module list's 1:\n%s", n, tm.j.dump())
	}
	if strings.Contains(tm.markers(), "EDGEGATE-DRIVERS") {
		t.Errorf("markers:\n%s", tm.markers())
	}
}

func TestReadDriverIndex(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(depFile, testDeps)
	write(aliasFile, testAliases)
	ix, err := readDriverIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ix.deps["e1000e"], []string{"kernel/lib/crc32c_generic.ko", "kernel/drivers/net/mii.ko"}; !cmp.Equal(got, want) {
		t.Errorf("e1000e's dependencies in load order = %v, want %v", got, want)
	}
	if got := ix.match(e1000eAlias); !cmp.Equal(got, []string{"e1000e"}) {
		t.Errorf("match(e1000e) = %v", got)
	}
	if got := ix.match("pci:v000010ECd00008168sv0000sd0000bc02sc00i00"); got != nil {
		t.Errorf("match(a device without a driver) = %v", got)
	}
	for name, tc := range map[string]struct{ file, content, want string }{
		"alias line":      {aliasFile, "alias pci:v*\n", `modules.alias:1: want "alias <pattern> <module>"`},
		"unknown module":  {aliasFile, "# c\nalias pci:v* r8169\n", "modules.alias:2: alias pci:v*: module r8169 is not in modules.dep"},
		"dependency line": {depFile, "kernel/a.ko kernel/b.ko\n", `modules.dep:1: want "<module file>: <dependencies>"`},
	} {
		t.Run(name, func(t *testing.T) {
			write(depFile, testDeps)
			write(aliasFile, testAliases)
			write(tc.file, tc.content)
			if _, err := readDriverIndex(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseUevent(t *testing.T) {
	msg := "add@/devices/pci0000:00/0000:00:05.0/usb1/1-1/1-1:1.0\x00ACTION=add\x00DEVPATH=/devices/pci0000:00/0000:00:05.0/usb1/1-1/1-1:1.0\x00" +
		"SUBSYSTEM=usb\x00DEVTYPE=usb_interface\x00MODALIAS=" + usbAlias + "\x00SEQNUM=1234\x00"
	ev, ok := parseUevent([]byte(msg))
	want := Uevent{Action: "add", DevPath: "/devices/pci0000:00/0000:00:05.0/usb1/1-1/1-1:1.0", Subsystem: "usb", Modalias: usbAlias}
	if !ok || ev != want {
		t.Errorf("parseUevent = %+v, %v; want %+v", ev, ok, want)
	}
	for _, bad := range []string{"libudev\x00\xfe\xed\xca\xfe", "", "add@devices", "@/devices/x"} {
		if ev, ok := parseUevent([]byte(bad)); ok {
			t.Errorf("parseUevent(%q) = %+v, want not ok", bad, ev)
		}
	}
}
