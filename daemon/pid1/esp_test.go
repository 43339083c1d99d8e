package pid1

import (
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/firmware/fat"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
	"github.com/edgegate/edgegate/internal/prereq"
	"golang.org/x/sys/unix"
)

// TestESPMountedReadOnly: the disk image's EFI system partition is found by its GPT name
// and mounted read-only; ESPWritable opens it for one write and closes it again, also when
// the write fails.
func TestESPMountedReadOnly(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "console=ttyS0 edgegate.slot=b\n"})
	tm.addBlockDevice("vda1", nil, "PARTN=1", "PARTNAME="+layout.ESPPartName)
	m := tm.boot()
	if m.Slot() != layout.SlotB {
		t.Errorf("Slot() = %q, want b", m.Slot())
	}
	root, ok := m.ESP()
	if !ok || !strings.HasSuffix(root, espMountpoint) {
		t.Fatalf("ESP() = %q %v", root, ok)
	}
	mt, _ := tm.mounts.mount(espMountpoint)
	if mt.Source != "/dev/vda1" || mt.FSType != "vfat" || mt.Flags&unix.MS_RDONLY == 0 || !mt.Persistent {
		t.Errorf("ESP mount: %+v", mt)
	}
	if !strings.Contains(tm.console(), "EDGEGATE-ESP /dev/vda1 /boot/efi") {
		t.Errorf("no ESP marker:\n%s", tm.console())
	}
	ran := false
	want := errors.New("disk full")
	if err := m.ESPWritable(func() error { ran = true; return want }); !errors.Is(err, want) || !ran {
		t.Errorf("ESPWritable: %v (ran %v)", err, ran)
	}
	// Three mounts of the ESP: read-only, read-write, read-only again.
	var flags []uintptr
	for _, mt := range tm.mounts.made {
		if mt.Target == espMountpoint {
			flags = append(flags, mt.Flags&(unix.MS_RDONLY|unix.MS_REMOUNT))
		}
	}
	if len(flags) != 3 || flags[0] != unix.MS_RDONLY || flags[1] != unix.MS_REMOUNT || flags[2] != unix.MS_RDONLY|unix.MS_REMOUNT {
		t.Errorf("ESP mount flags in order: %#x", flags)
	}
}

// TestNoESP: a board booted without the disk image runs as before, and says updates are
// unavailable, by the partition name it looked for.
func TestNoESP(t *testing.T) {
	tm := newTestMachine(t, nil)
	m := tm.boot()
	if _, ok := m.ESP(); ok {
		t.Error("ESP() ok without a partition")
	}
	if err := m.ESPWritable(func() error { return nil }); err == nil {
		t.Error("ESPWritable without a partition succeeded")
	}
	if !strings.Contains(tm.console(), "no EFI system partition; firmware updates unavailable") {
		t.Errorf("console:\n%s", tm.console())
	}
}

// TestNetworkProblem: the network counts as up once every configured address is there.
func TestNetworkProblem(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.ip=eth0:10.0.2.15/24 edgegate.ip=eth0:dhcp\n"})
	tm.dhcp.set(Lease{}, errors.New("no offer"), nil)
	m := tm.boot()
	err := m.NetworkProblem()
	if err == nil || !strings.Contains(err.Error(), "eth0:dhcp") || strings.Contains(err.Error(), "10.0.2.15") {
		t.Fatalf("NetworkProblem with DHCP pending: %v", err)
	}
	m.netConfigured(IPConfig{Dev: "eth0", DHCP: true})
	if err := m.NetworkProblem(); err != nil {
		t.Errorf("all up: %v", err)
	}
}

// TestESPRepairedBeforeMount: PID 1 checks the ESP's FAT before it mounts it and repairs
// what a cut left (here the dirty flag of a cut while it was writable), says so on the
// console, and mounts it.
func TestESPRepairedBeforeMount(t *testing.T) {
	img := fatImage(t)
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	b[0x41] |= 1 // FAT32's "not cleanly unmounted" flag, which Linux sets while writable
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "console=ttyS0 edgegate.slot=a\n"})
	tm.addBlockDevice("vda1", b, "PARTN=1", "PARTNAME="+layout.ESPPartName)
	tm.boot()
	if !strings.Contains(tm.console(), "EDGEGATE-ESP-REPAIRED /dev/vda1 findings=1") {
		t.Errorf("no repair marker:\n%s", tm.console())
	}
	after, err := os.ReadFile(filepath.Join(tm.sys.Root, "dev/vda1"))
	if err != nil {
		t.Fatal(err)
	}
	if after[0x41]&1 != 0 {
		t.Error("the dirty flag is still set")
	}
	if _, ok := tm.mounts.mount(espMountpoint); !ok {
		t.Error("the repaired ESP is not mounted")
	}
	// A clean one is left alone.
	tm = newTestMachine(t, map[string]string{"/proc/cmdline": "console=ttyS0 edgegate.slot=a\n"})
	tm.addBlockDevice("vda1", after, "PARTN=1", "PARTNAME="+layout.ESPPartName)
	tm.boot()
	if strings.Contains(tm.console(), "EDGEGATE-ESP-REPAIRED") {
		t.Errorf("a clean ESP repaired:\n%s", tm.console())
	}
}

// TestESPNotUnderstoodMountedAnyway: a volume the check does not understand is mounted as
// it is, with the reason logged.
func TestESPNotUnderstoodMountedAnyway(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "console=ttyS0 edgegate.slot=a\n"})
	tm.addBlockDevice("vda1", make([]byte, 1<<20), "PARTN=1", "PARTNAME="+layout.ESPPartName)
	tm.boot()
	if c := tm.console(); !strings.Contains(c, "checking the EFI system partition failed; mounting it as it is") ||
		!strings.Contains(c, "unsupported volume") {
		t.Errorf("console:\n%s", tm.console())
	}
	if _, ok := tm.mounts.mount(espMountpoint); !ok {
		t.Error("the ESP is not mounted")
	}
}

// TestESPLoser: of two names a torn rename left on one chain, the rename's target keeps it.
func TestESPLoser(t *testing.T) {
	e := func(p string) fat.Entry { return fat.Entry{Path: p, Name: path.Base(p)} }
	for _, tc := range []struct {
		a, b string
		lose bool
	}{
		{"/loader/entries/edgegate-b+0-1.conf", "/loader/entries/edgegate-b.conf", true},     // the commit
		{"/loader/entries/edgegate-b.conf", "/loader/entries/edgegate-b+0-1.conf", false},    // the commit, met the other way
		{"/loader/entries/edgegate-b+0-0.conf", "/loader/entries/edgegate-b+0-1.conf", true}, // systemd-boot counting a boot
		{"/loader/entries/edgegate-b+0-1.conf", "/loader/entries/edgegate-b+0-0.conf", false},
		{"/loader/entries/.tmp-edgegate-b+0-0.conf-1", "/loader/entries/edgegate-b+0-0.conf", true},
		{"/loader/entries/edgegate-b+0-0.conf", "/loader/entries/.tmp-edgegate-b+0-0.conf-1", false},
		{"/edgegate/b/vmlinuz.new", "/edgegate/b/vmlinuz", true},
		{"/loader/entries/edgegate-a.conf", "/loader/entries/edgegate-b.conf", false}, // not one rename: the first keeps it
		{"/edgegate/a/vmlinuz", "/edgegate/b/vmlinuz", false},
	} {
		if got := espLoser(e(tc.a), e(tc.b)); got != tc.lose {
			t.Errorf("espLoser(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.lose)
		}
	}
}

// fatImage makes a small FAT32 file system with Debian's mkfs.vfat.
func fatImage(t *testing.T) string {
	t.Helper()
	mkfs, err := image.LookTool("mkfs.vfat")
	prereq.NoErr(t, err)
	img := filepath.Join(t.TempDir(), "esp.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 40<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-F", "32", "-S", "512", "-s", "1", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.vfat: %v: %s", err, out)
	}
	return img
}
