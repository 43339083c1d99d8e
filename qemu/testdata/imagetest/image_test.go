// Package imagetest runs inside a QEMU guest booted through UEFI from a disk image
// (firmware/image: systemd-boot, the A/B slots), as /edgegate-test of the real firmware
// once PID 1 has seen the daemon ready. It checks the boot from the inside and logs what
// it found in fixed forms that qemu/image_test.go reads back: which slot booted (the
// kernel command line), which entry systemd-boot booted (its EFI variables), the update
// keys baked into the firmware and the disk's partitions; for the fallback test it arms
// slot B's trial boot as the updater does.
package imagetest

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/efivar"
	"github.com/edgegate/edgegate/firmware/layout"
)

const (
	efiDir = "/sys/firmware/efi"
	// dataMountpoint and espMountpoint are where PID 1 mounts the data partition and the
	// EFI system partition.
	dataMountpoint = "/var/lib/edgegate"
	espMountpoint  = "/boot/efi"
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
	requireEFIVars(t)
	vars := efivar.Store{}
	entry, err := vars.Get(efivar.LoaderEntrySelected)
	if err != nil {
		t.Fatal(err)
	}
	loader, err := vars.Loader()
	if err != nil {
		t.Fatal(err)
	}
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

// TestArmTrial is the updater's switch, done by hand for the host's fallback test: when the
// ESP holds slot B's trial entry never booted (edgegate-b+0-0.conf), it arms systemd-boot's
// one-shot variable for it and logs "armed one-shot <pattern>". Otherwise it logs
// "one-shot armed: <value>" with what the variable holds, "" when systemd-boot removed it.
func TestArmTrial(t *testing.T) {
	requireEFIVars(t)
	vars := efivar.Store{}
	never := filepath.Join(espMountpoint, layout.EntryPath(layout.EntryFileName(layout.SlotB, &layout.Trial)))
	if _, err := os.Stat(never); err == nil {
		pattern := layout.OneShotPattern(layout.SlotB)
		if err := vars.BootOnce(pattern); err != nil {
			t.Fatal(err)
		}
		if got, err := vars.OneShot(); err != nil || got != pattern {
			t.Fatalf("after arming: %q %v", got, err)
		}
		t.Logf("armed one-shot %s", pattern)
		return
	}
	got, err := vars.OneShot()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one-shot armed: %q", got)
}

// requireEFIVars: PID 1 mounted efivarfs, writable (the updater sets the one-shot variable).
func requireEFIVars(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(efiDir); err != nil {
		t.Fatalf("not booted through UEFI: %v", err)
	}
	mnt, err := mountInfo(efivar.Dir)
	if err != nil || mnt.fstype != "efivarfs" {
		t.Fatalf("PID 1 did not mount efivarfs on %s: %+v %v", efivar.Dir, mnt, err)
	}
	if slices.Contains(strings.Split(mnt.options, ","), "ro") {
		t.Fatalf("PID 1 mounted efivarfs read-only: %+v", mnt)
	}
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
	// The image's disk is vda, nvme0n1 or sda, as the board attaches it: partitions 1 and
	// 2 of the disk that holds the ESP.
	parts := map[string]map[string]string{} // disk -> PARTN -> partition
	names := map[string]string{}            // partition -> PARTNAME
	entries, err := os.ReadDir("/sys/class/block")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("/sys/class/block", e.Name(), "uevent"))
		if err != nil {
			continue
		}
		var partN string
		for _, line := range strings.Split(string(raw), "\n") {
			k, v, _ := strings.Cut(line, "=")
			switch k {
			case "PARTN":
				partN = v
			case "PARTNAME":
				names[e.Name()] = v
			}
		}
		if partN == "" {
			continue
		}
		real, err := filepath.EvalSymlinks(filepath.Join("/sys/class/block", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		disk := filepath.Base(filepath.Dir(real))
		if parts[disk] == nil {
			parts[disk] = map[string]string{}
		}
		parts[disk][partN] = e.Name()
	}
	var esp, data string
	for _, p := range parts {
		if names[p["1"]] == layout.ESPPartName {
			esp, data = p["1"], p["2"]
		}
	}
	if esp == "" || names[data] != layout.DataPartName {
		t.Fatalf("no disk with partition 1 named %s and 2 named %s: %v, names %v", layout.ESPPartName, layout.DataPartName, parts, names)
	}
	t.Logf("image disk partitions %s and %s", esp, data)
	mnt, err := mountInfo(dataMountpoint)
	if err != nil {
		t.Fatal(err)
	}
	if mnt.source != "/dev/"+data {
		t.Errorf("%s is mounted from %s, want /dev/%s", dataMountpoint, mnt.source, data)
	}
}

// mountOn is the last mount on target (the one in use): its options, file system type and
// source, from /proc/self/mountinfo.
type mountOn struct{ options, fstype, source string }

func mountInfo(target string) (mountOn, error) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return mountOn{}, err
	}
	var found mountOn
	for _, line := range strings.Split(string(raw), "\n") {
		// id parent major:minor root mountpoint options [optional...] - fstype source super
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 6 && len(g) >= 2 && f[4] == target {
			found = mountOn{options: f[5], fstype: g[0], source: g[1]}
		}
	}
	if found.fstype == "" {
		return found, errors.New(target + " is not mounted")
	}
	return found, nil
}
