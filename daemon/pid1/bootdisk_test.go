package pid1

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/firmware/efivar"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
)

// imageDisk returns the first bytes of a disk with an ESP (partition 1, unique GUID esp) and
// a data partition (2), as the image builder lays them out.
func imageDisk(t *testing.T, esp image.GUID) []byte {
	t.Helper()
	tb := image.Table{
		DiskGUID: image.MustParseGUID("11111111-2222-3333-4444-555555555555"),
		Sectors:  8192,
		Partitions: []image.Partition{
			{Number: 1, Type: image.ESPType, GUID: esp, Name: layout.ESPPartName, FirstLBA: 2048, LastLBA: 4095},
			{Number: 2, Type: image.LinuxFilesystemType, GUID: image.MustParseGUID("66666666-7777-8888-9999-AAAAAAAAAAAA"),
				Name: dataName, FirstLBA: 4096, LastLBA: 8000},
		},
	}
	f, err := image.CreateDisk(filepath.Join(t.TempDir(), "disk"), tb)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b[:34*image.SectorSize] // the MBR, the primary header and its entries
}

// setLoaderPartition sets LoaderDevicePartUUID as systemd-boot does.
func setLoaderPartition(t *testing.T, tm *testMachine, uuid string) {
	t.Helper()
	file := filepath.Join(tm.sys.Root, efivar.Dir, efivar.LoaderDevicePartUUID+"-"+efivar.LoaderVendor)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, efivar.Encode(uuid), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBootDiskWins: with two disks holding the image's partitions (a second gateway's
// stick plugged in, sorted first), the ESP and the data partition come from the disk the
// boot loader booted from, and that disk is waited for while its driver finds it.
func TestBootDiskWins(t *testing.T) {
	booted := image.MustParseGUID("AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE")
	tm := newTestMachine(t, nil)
	other := imageDisk(t, image.MustParseGUID("12345678-9ABC-4DEF-8123-456789ABCDEF"))
	tm.addBlockDevice("sda", other)
	tm.addBlockDevice("sda1", nil, "PARTN=1", "PARTNAME="+layout.ESPPartName)
	tm.addBlockDevice("sda2", ext4Start(dataName), "PARTN=2", "PARTNAME="+dataName)
	// systemd-boot prints the GUID in upper case; either case is the same partition.
	setLoaderPartition(t, tm, strings.ToLower(booted.String()))
	m := bareMachine(tm, "", 0)
	m.timing.bootDiskWait = time.Minute
	found := make(chan struct{})
	go func() { m.findBootDisk(); close(found) }()
	// The NVMe disk registers after its driver loaded.
	time.Sleep(3 * dataPoll)
	disk := imageDisk(t, booted)
	tm.addBlockDevice("nvme0n1", disk)
	tm.addBlockDevice("nvme0n1p1", nil, "PARTN=1", "PARTNAME="+layout.ESPPartName)
	tm.addBlockDevice("nvme0n1p2", ext4Start(dataName), "PARTN=2", "PARTNAME="+dataName)
	select {
	case <-found:
	case <-time.After(30 * time.Second):
		t.Fatal("the boot disk that appeared was not found")
	}
	if m.bootDisk != "nvme0n1" {
		t.Fatalf("boot disk %q, want nvme0n1\n%s", m.bootDisk, tm.console())
	}
	m.mountData()
	m.mountESP()
	for target, want := range map[string]string{dataMountpoint: "/dev/nvme0n1p2", espMountpoint: "/dev/nvme0n1p1"} {
		if mt, ok := tm.mounts.mount(target); !ok || mt.Source != want {
			t.Errorf("%s: mounted %+v, want %s", target, mt, want)
		}
	}
	if !strings.Contains(tm.console(), `msg="boot disk found" disk=nvme0n1 partition=/dev/nvme0n1p1`) {
		t.Errorf("console:\n%s", tm.console())
	}
}

// TestBootDiskNeverAppears: a boot disk that never shows is an error by GUID after the
// wait; the partitions are then looked for everywhere.
func TestBootDiskNeverAppears(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.addBlockDevice("sda", imageDisk(t, image.MustParseGUID("12345678-9ABC-4DEF-8123-456789ABCDEF")))
	tm.addBlockDevice("sda1", nil, "PARTN=1", "PARTNAME="+layout.ESPPartName)
	setLoaderPartition(t, tm, "AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE")
	m := bareMachine(tm, "", 0)
	m.timing.bootDiskWait = 10 * time.Millisecond
	m.findBootDisk()
	m.mountESP()
	if want := `level=ERROR msg="the disk the boot loader booted from did not appear; looking on every disk" LoaderDevicePartUUID=AAAAAAAA-BBBB-4CCC-8DDD-EEEEEEEEEEEE waited=10ms`; !strings.Contains(tm.console(), want) {
		t.Errorf("console lacks %q:\n%s", want, tm.console())
	}
	if mt, ok := tm.mounts.mount(espMountpoint); !ok || mt.Source != "/dev/sda1" {
		t.Errorf("ESP mounted %+v, want /dev/sda1", mt)
	}
}

// TestBootDiskUnknown: without the boot loader's variable (QEMU's -kernel) nothing waits.
func TestBootDiskUnknown(t *testing.T) {
	tm := newTestMachine(t, nil)
	m := bareMachine(tm, "", 0)
	m.timing.bootDiskWait = time.Hour
	done := make(chan struct{})
	go func() { m.findBootDisk(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("findBootDisk waited without LoaderDevicePartUUID")
	}
	if m.bootDisk != "" || bytes.Contains([]byte(tm.console()), []byte("boot disk")) {
		t.Errorf("boot disk %q; console:\n%s", m.bootDisk, tm.console())
	}
}
