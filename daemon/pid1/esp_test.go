package pid1

import (
	"errors"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/firmware/layout"
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
