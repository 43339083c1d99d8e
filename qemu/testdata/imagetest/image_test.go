// Package imagetest runs inside a QEMU guest booted through UEFI from a disk image
// (firmware/image: systemd-boot, the A/B slots), as /edgegate-test of the real firmware
// once PID 1 has seen the daemon ready. It checks the boot from the inside and logs what
// it found in fixed forms that qemu/image_test.go reads back: which slot booted (the
// kernel command line), which entry systemd-boot booted (its EFI variables), the update
// keys baked into the firmware and the disk's partitions.
package imagetest

import (
	"bytes"
	"debug/buildinfo"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
)

const (
	efiDir     = "/sys/firmware/efi"
	efivarsDir = "/sys/firmware/efi/efivars"
	// loaderVendor is the vendor GUID of systemd-boot's variables (the Boot Loader
	// Interface).
	loaderVendor = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f"
	// dataMountpoint is where PID 1 mounts the data partition.
	dataMountpoint = "/var/lib/edgegate"
)

func TestPID1IsEdgegate(t *testing.T) {
	info, err := buildinfo.ReadFile("/proc/1/exe")
	if err != nil {
		t.Fatalf("PID 1's build info: %v", err)
	}
	if info.Path != "github.com/edgegate/edgegate/daemon" {
		t.Errorf("PID 1 is built from %s, want the edgegate daemon", info.Path)
	}
}

// TestBootedSlot logs "booted slot <s> from entry <id> (<loader>)" for the host: the slot
// the kernel command line names and the entry systemd-boot says it booted, which must agree.
func TestBootedSlot(t *testing.T) {
	raw, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kernel command line: %s", bytes.TrimSpace(raw))
	var slots []string
	for _, arg := range strings.Fields(string(raw)) {
		if k, v, _ := strings.Cut(arg, "="); k == layout.SlotParam {
			slots = append(slots, v)
		}
	}
	if len(slots) != 1 {
		t.Fatalf("%d %s= arguments on the kernel command line, want 1", len(slots), layout.SlotParam)
	}
	slot, err := layout.ParseSlot(slots[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(efiDir); err != nil {
		t.Fatalf("not booted through UEFI: %v", err)
	}
	mountEFIVars(t)
	entry := loaderVariable(t, "LoaderEntrySelected")
	loader := loaderVariable(t, "LoaderInfo")
	// systemd-boot names an entry by its file name (edgegate-a.conf), which for a counted
	// entry may carry the counter or not; the slot is what must agree.
	name := entry
	if !strings.HasSuffix(name, ".conf") {
		name += ".conf"
	}
	if entrySlot, _, err := layout.ParseFileName(name); err != nil || entrySlot != slot {
		t.Errorf("systemd-boot booted entry %q (%v), the command line names slot %s", entry, err, slot)
	}
	t.Logf("booted slot %s from entry %s (%s)", slot, entry, loader)
}

// mountEFIVars mounts efivarfs when PID 1 has not: its module loads after PID 1's mounts.
func mountEFIVars(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(efivarsDir)
	if err == nil && len(entries) > 0 {
		return
	}
	if err := unix.Mount("efivarfs", efivarsDir, "efivarfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("mount efivarfs on %s: %v", efivarsDir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(efivarsDir, 0) })
}

// loaderVariable reads one of systemd-boot's string variables: 4 bytes of attributes, then
// UTF-16LE ending in a NUL.
func loaderVariable(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(efivarsDir, name+"-"+loaderVendor))
	if err != nil {
		t.Fatalf("EFI variable %s: %v", name, err)
	}
	if len(raw) < 4 || (len(raw)-4)%2 != 0 {
		t.Fatalf("EFI variable %s: %d bytes, not attributes and UTF-16", name, len(raw))
	}
	units := make([]uint16, 0, (len(raw)-4)/2)
	for i := 4; i < len(raw); i += 2 {
		u := binary.LittleEndian.Uint16(raw[i:])
		if u == 0 {
			break
		}
		units = append(units, u)
	}
	return string(utf16.Decode(units))
}

// TestUpdateKeys logs "update keys <id> ..." for the host: the keys baked into the
// firmware, each a valid public key file named by its ID.
func TestUpdateKeys(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(layout.KeysDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range files {
		k, err := bundle.ReadPublicKeyFile(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if filepath.Base(f) != k.ID+".pub" {
			t.Errorf("%s holds key %s", f, k.ID)
		}
		ids = append(ids, k.ID)
	}
	t.Logf("update keys %s", strings.Join(ids, " "))
}

// TestPartitions: the kernel found the image's GPT (partition names as PARTNAME) and PID 1
// mounted the data partition, the second one, on the daemon's state directory.
func TestPartitions(t *testing.T) {
	for dev, want := range map[string]string{"vda1": layout.ESPPartName, "vda2": layout.DataPartName} {
		raw, err := os.ReadFile(filepath.Join("/sys/class/block", dev, "uevent"))
		if err != nil {
			t.Errorf("%s: %v", dev, err)
			continue
		}
		if !strings.Contains(string(raw), "\nPARTNAME="+want+"\n") {
			t.Errorf("%s: uevent %q lacks PARTNAME=%s", dev, raw, want)
		}
	}
	source, err := mountSource(dataMountpoint)
	if err != nil {
		t.Fatal(err)
	}
	if source != "/dev/vda2" {
		t.Errorf("%s is mounted from %s, want /dev/vda2", dataMountpoint, source)
	}
}

// mountSource returns the source of the last mount on target (the one in use).
func mountSource(target string) (string, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	source := ""
	for _, line := range strings.Split(string(raw), "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 2 && f[4] == target {
			source = g[1]
		}
	}
	if source == "" {
		return "", errors.New(target + " is not mounted")
	}
	return source, nil
}
