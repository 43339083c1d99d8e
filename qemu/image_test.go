package qemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
	"github.com/edgegate/edgegate/initramfs"
)

// imageTestOptions make every slot of the test images a test boot: PID 1 runs
// testdata/imagetest once the daemon is ready, then powers off.
var imageTestOptions = []string{"edgegate.test=1"}

// The guest test's lines about the boot (testdata/imagetest).
var (
	bootedSlotLog = regexp.MustCompile(`booted slot ([ab]) from entry (\S+) \((.*)\)`)
	updateKeysLog = regexp.MustCompile(`update keys ?(.*)$`)
	armedLog      = regexp.MustCompile(`armed one-shot (\S+)`)
	oneShotLog    = regexp.MustCompile(`one-shot armed: "(.*)"`)
)

// TestDiskImage builds the real firmware of every board with a test update key, a bundle
// of it signed with that key and disk images from the bundle (firmware/image), and boots
// them through the board's UEFI firmware (OVMF on x86_64, AAVMF on arm64), side by side,
// from the board's kind of disk: virtio on the qemu-* boards, an NVMe SSD on pc-x86_64, a
// USB stick on generic-arm64, whose drivers PID 1 loads for the devices it finds:
//
//   - slot-a: a gateway's first image (slot A, slot B empty). The partition table is what
//     sfdisk reads, the ESP and the data partition hold what the layout says; systemd-boot
//     boots slot A, edgegate is PID 1 with the test key, mounts the data partition and
//     gets ready, and the command line names slot A.
//   - fallback: slot B holds a newer generation on trial (+0-0) whose kernel command line
//     cannot boot (rdinit=/nonexistent: the kernel panics, and panic=-1 reboots). The
//     first start boots A: a trial entry never boots by default. The guest test there
//     arms systemd-boot's one-shot variable for B, as the updater's switch does. The
//     second start of the same machine (same disk, same NVRAM) boots B once, counting the
//     boot in the entry's name (edgegate-b+0-1.conf), and after the panic boots A by itself
//     in the same QEMU run, with the variable gone.
func TestDiskImage(t *testing.T) {
	eachBoard(t, board.Names(), func(tb testing.TB, b board.Board) {
		RequireUEFI(tb, b)
		RequireTools(tb, append(slices.Clone(image.Tools),
			image.Tool{Command: "sfdisk", Package: "fdisk"}, image.Tool{Command: "dumpe2fs", Package: "e2fsprogs"},
			image.Tool{Command: "debugfs", Package: "e2fsprogs"})...)
	}, 15*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		d := newDiskTest(ctx, t, b)
		t.Run("slot-a", d.slotA)
		t.Run("fallback", d.fallback)
	})
}

// diskTest is one board's firmware, signed bundle and boot loader, from which the
// subtests build their images.
type diskTest struct {
	ctx      context.Context
	board    board.Board
	log      *slog.Logger
	fw       initramfs.Firmware
	key      bundle.PublicKey
	bundle   string
	manifest bundle.Manifest
	loader   image.BootLoader
}

func newDiskTest(ctx context.Context, t *testing.T, b board.Board) *diskTest {
	t.Helper()
	d := &diskTest{ctx: ctx, board: b, log: testLog(t)}
	dir := t.TempDir()
	pub, priv, err := bundle.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d.key = pub
	pubFile := filepath.Join(dir, "firmware.pub")
	if err := os.WriteFile(pubFile, pub.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	buildStart := time.Now()
	d.fw, err = BuildTestImage(ctx, d.log, t.TempDir(), TestImage{
		Board:      b,
		Init:       "github.com/edgegate/edgegate/daemon",
		Test:       "github.com/edgegate/edgegate/qemu/testdata/imagetest",
		TestArgs:   []string{"-test.v=test2json", "-test.timeout=2m"},
		Manifests:  "testdata/firmwaretest/manifests",
		UpdateKeys: []string{pubFile},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.fw.Info.UpdateKeys; !slices.Equal(got, []string{pub.ID}) {
		t.Errorf("build.json's updateKeys %v, want the test key %s", got, pub.ID)
	}
	d.bundle = filepath.Join(dir, "firmware.bundle")
	f, err := os.Create(d.bundle)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel := bundle.Release{Board: b.Name, Version: "v1.0.0", BuildTime: time.Now()}
	if d.manifest, err = bundle.CreateFiles(f, rel, d.fw.Kernel(), d.fw.Initramfs(), priv); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cache, err := debianCache(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.loader, err = image.FetchBootLoader(ctx, d.log, b.Arch, cache); err != nil {
		t.Fatal(err)
	}
	p := d.loader.Package
	t.Logf("%s: firmware and bundle built in %v (kernel %d bytes, initramfs %d bytes gz); systemd-boot from %s %s (%s)",
		b.Name, time.Since(buildStart).Round(time.Millisecond), d.manifest.Kernel.Size, d.manifest.Initramfs.Size,
		p.Name, p.Version, p.Arch)
	return d
}

// slotA is the image's main line: a first image, checked on the disk, then booted. Its
// data partition holds a config.yaml (dataConfig) from the builder's data directory.
func (d *diskTest) slotA(t *testing.T) {
	content := t.TempDir()
	if err := os.WriteFile(filepath.Join(content, "config.yaml"), []byte(dataConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	disk := filepath.Join(t.TempDir(), "disk.img")
	info, err := image.Build(d.ctx, d.log, disk, image.Spec{
		Board: d.board, BootLoader: d.loader, DataDir: content,
		A: &image.Slot{Bundle: d.bundle, Keys: []bundle.PublicKey{d.key}, Generation: 1, Options: imageTestOptions},
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(disk)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: disk image %d MiB, %.1f MiB allocated (sparse)", d.board.Name, st.Size()>>20,
		float64(st.Sys().(*syscall.Stat_t).Blocks*512)/(1<<20))
	t.Run("table", func(t *testing.T) { checkTableWithSfdisk(d.ctx, t, disk, info.Table) })
	t.Run("esp", func(t *testing.T) { d.checkESP(t, disk, info) })
	t.Run("data", func(t *testing.T) { checkDataPartition(d.ctx, t, disk, info.Table) })

	vars := filepath.Join(t.TempDir(), "vars.fd")
	vm := d.start(t, disk, vars, false)
	r := d.waitForFirmware(t, vm)
	checkCleanEnd(t, vm, nil)
	if r.slot != "a" {
		t.Errorf("booted slot %q, want a", r.slot)
	}
	if n := countLines(vm.Lines(), dataConfigLog); n != 1 {
		t.Errorf("%d console lines %s, want 1: the daemon did not read the image's config.yaml", n, dataConfigLog)
	}
	// The firmware wrote its boot options into the VM's own copy of the variable store.
	template, err := os.ReadFile(d.board.QEMU.UEFI.Vars)
	if err != nil {
		t.Fatal(err)
	}
	if nvram, err := os.ReadFile(vars); err != nil || bytes.Equal(nvram, template) {
		t.Errorf("the VM's NVRAM %s is unchanged from the template (%v)", vars, err)
	}
	t.Logf("%s: UEFI boot of slot A (%s): /init started %v after QEMU's start (UEFI firmware, systemd-boot, kernel), "+
		"modules loaded at %v, data partition at %v, EDGEGATE-READY at %v, power-off at %v, QEMU exited after %v",
		d.board.Name, r.loader, r.start.At.Round(time.Millisecond), r.loaded.At.Round(time.Millisecond),
		r.data.At.Round(time.Millisecond), r.ready.At.Round(time.Millisecond), r.poweroff.At.Round(time.Millisecond),
		vm.Elapsed().Round(time.Millisecond))
}

// fallback boots an image whose slot B is on trial and cannot boot.
func (d *diskTest) fallback(t *testing.T) {
	disk := filepath.Join(t.TempDir(), "disk.img")
	trial := layout.Trial
	info, err := image.Build(d.ctx, d.log, disk, image.Spec{
		Board: d.board, BootLoader: d.loader,
		A: &image.Slot{Bundle: d.bundle, Keys: []bundle.PublicKey{d.key}, Generation: 1, Options: imageTestOptions},
		B: &image.Slot{Bundle: d.bundle, Keys: []bundle.PublicKey{d.key}, Generation: 2, Tries: &trial,
			Options: append(slices.Clone(imageTestOptions), "rdinit=/nonexistent")},
	})
	if err != nil {
		t.Fatal(err)
	}
	esp, err := image.OpenESP(disk)
	if err != nil {
		t.Fatal(err)
	}
	if first := layout.Order(readEntries(d.ctx, t, esp))[0]; first.Slot != layout.SlotA {
		t.Fatalf("before the boot the contract says slot %s boots by default, want a: the trial is newer, never the default", first.Slot)
	}

	// First start: A by default; the guest test arms B's one try.
	vars := filepath.Join(t.TempDir(), "vars.fd")
	first := d.start(t, disk, vars, true)
	r := d.waitForFirmware(t, first)
	checkCleanEnd(t, first, nil)
	if r.slot != "a" || r.armed != layout.OneShotPattern(layout.SlotB) {
		t.Fatalf("first start: booted slot %q, armed %q; want slot a, arming %s", r.slot, r.armed, layout.OneShotPattern(layout.SlotB))
	}
	if n := firmwareStarts(first.Lines()); n != 1 {
		t.Errorf("the first start started %d boot options, want 1", n)
	}
	if names, err := esp.Entries(d.ctx); err != nil || !slices.Equal(names, []string{"edgegate-a.conf", "edgegate-b+0-0.conf"}) {
		t.Errorf("entries after the first start %v (%v): nothing may have booted B yet", names, err)
	}

	// Second start: B once, its panic, then A.
	vm := d.start(t, disk, vars, true)
	panicked := waitFor(t, vm, "Kernel panic - not syncing")
	for _, l := range vm.Lines()[:panicked.N] {
		if strings.Contains(l.Text, "EDGEGATE-BOOT-START") {
			t.Fatalf("console line %d: an /init ran before slot B's kernel panicked: %q", l.N, l.Text)
		}
	}
	r = d.waitForFirmware(t, vm)
	checkCleanEnd(t, vm, &panicked)
	if r.slot != "a" {
		t.Errorf("after slot B's failed try the machine booted slot %q, want a", r.slot)
	}
	if r.armed != "" || !r.oneShotSeen {
		t.Errorf("after slot B's try the one-shot variable holds %q (seen: %v), want it removed by systemd-boot", r.armed, r.oneShotSeen)
	}
	if n := firmwareStarts(vm.Lines()); n != 2 {
		t.Errorf("the UEFI firmware started a boot option %d times, want 2 (slot B's try, then slot A)", n)
	}
	t.Logf("%s: fallback: slot B's kernel panicked at %v (%q); after the reboot slot A's /init started at %v, "+
		"EDGEGATE-READY at %v, power-off at %v, QEMU exited after %v",
		d.board.Name, panicked.At.Round(time.Millisecond), strings.TrimSpace(panicked.Text), r.start.At.Round(time.Millisecond),
		r.ready.At.Round(time.Millisecond), r.poweroff.At.Round(time.Millisecond), vm.Elapsed().Round(time.Millisecond))

	// systemd-boot counted the try in the entry's name, before it started B's kernel, and
	// left the content alone.
	names, err := esp.Entries(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"edgegate-a.conf", "edgegate-b+0-1.conf"}; !slices.Equal(names, want) {
		t.Fatalf("entries after the fallback %v, want %v", names, want)
	}
	got, err := esp.ReadFile(d.ctx, layout.EntryPath("edgegate-b+0-1.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if want := info.Slots[1].Entry.Render(); !bytes.Equal(got, want) {
		t.Errorf("slot B's entry after the try:\n%s\nwant as written:\n%s", got, want)
	}
	if first := layout.Order(readEntries(d.ctx, t, esp))[0]; first.Slot != layout.SlotA {
		t.Errorf("after the try the contract says slot %s boots first, want a", first.Slot)
	}
}

// start boots disk through the board's UEFI firmware with vars as the NVRAM.
func (d *diskTest) start(t *testing.T, disk, vars string, allowReboot bool) *VM {
	t.Helper()
	return startVM(d.ctx, t, Options{
		Board: d.board, UEFIVars: vars, AllowReboot: allowReboot,
		Disks:   []Disk{{Path: disk}},
		Timeout: 5 * time.Minute,
	})
}

// firmwareBoot is one boot of the firmware, seen on the console.
type firmwareBoot struct {
	start, loaded, data, ready, poweroff Line
	// slot, entry and loader are what the guest test found: the slot on the kernel command
	// line, the entry systemd-boot booted and systemd-boot's version.
	slot, entry, loader string
	// armed is the one-shot pattern the guest test armed, or found armed (oneShotSeen).
	armed       string
	oneShotSeen bool
}

// waitForFirmware follows one boot of the firmware from the console's current position to
// its power-off: every module loaded (efivarfs too: this is a UEFI boot), the data
// partition mounted from the image's second partition, the daemon ready, and the guest
// test passed, having seen the test key and the slot it reports.
func (d *diskTest) waitForFirmware(t *testing.T, vm *VM) firmwareBoot {
	t.Helper()
	var r firmwareBoot
	r.start = waitFor(t, vm, "EDGEGATE-BOOT-START")
	r.loaded = waitFor(t, vm, "EDGEGATE-MODULES-LOADED")
	m := modulesLoaded.FindStringSubmatch(r.loaded.Text)
	if m == nil {
		t.Fatalf("malformed marker %q", r.loaded.Text)
	}
	if n, _ := strconv.Atoi(m[1]); n != len(d.fw.Info.Modules.LoadOrder) || m[2] != "0" {
		t.Errorf("%q: want n=%d failed=0 (under UEFI every module finds its device)", r.loaded.Text, len(d.fw.Info.Modules.LoadOrder))
	}
	checkDriverList(t, waitFor(t, vm, "EDGEGATE-DRIVERS").Text, expectedDrivers(d.board))
	r.data = waitFor(t, vm, "EDGEGATE-DATA")
	if want := "EDGEGATE-DATA " + PartitionNode(d.board, 0, 2) + " /var/lib/edgegate"; r.data.Text != want {
		t.Errorf("%q, want %q", r.data.Text, want)
	}
	r.ready = waitFor(t, vm, "EDGEGATE-READY")
	_, results := guestResults(t, vm)
	var keys []string
	for _, res := range results {
		for _, line := range res.Output {
			if m := bootedSlotLog.FindStringSubmatch(line); m != nil {
				r.slot, r.entry, r.loader = m[1], m[2], m[3]
			}
			if m := updateKeysLog.FindStringSubmatch(line); m != nil {
				keys = strings.Fields(m[1])
			}
			if m := armedLog.FindStringSubmatch(line); m != nil {
				r.armed = m[1]
			}
			if m := oneShotLog.FindStringSubmatch(line); m != nil {
				r.armed, r.oneShotSeen = m[1], true
			}
		}
	}
	if r.slot == "" {
		t.Error("the guest test did not say which slot booted")
	}
	if !slices.Equal(keys, []string{d.key.ID}) {
		t.Errorf("the firmware trusts update keys %v, want the test key %s", keys, d.key.ID)
	}
	r.poweroff = waitFor(t, vm, "EDGEGATE-POWEROFF")
	return r
}

// expectedDrivers are the drivers PID 1 must load at boot for the devices QEMU gives a
// board: its disk's controller and its watchdog. (A USB stick's own driver comes later,
// when the controller has found it.)
func expectedDrivers(b board.Board) []string {
	want := map[string][]string{"": {"virtio_pci", "virtio_blk"}, "virtio": {"virtio_pci", "virtio_blk"},
		"nvme": {"nvme"}, "usb": {"xhci_pci"}}[b.QEMU.Disk]
	if b.QEMU.Watchdog != "" {
		want = append(want, b.QEMU.Watchdog)
	}
	return want
}

// checkCleanEnd waits for QEMU's exit after the power-off: exit code 0, and no kernel
// trouble on the console but the expected panic, when there is one (a VM that allows
// reboots lives on after a panic; Wait still reports it).
func checkCleanEnd(t *testing.T, vm *VM, expected *Line) {
	t.Helper()
	code, err := vm.Wait()
	if code != 0 || (err != nil && !(expected != nil && errors.Is(err, ErrKernelPanic))) {
		t.Fatalf("QEMU ended with code %d, %v", code, err)
	}
	if expected != nil && !errors.Is(err, ErrKernelPanic) {
		t.Errorf("Wait = %v, want ErrKernelPanic for the panic before the reboot", err)
	}
	for _, l := range vm.Lines() {
		if expected != nil && l.N == expected.N {
			continue
		}
		for _, bad := range kernelTrouble {
			if strings.Contains(l.Text, bad) {
				t.Errorf("console line %d: %q", l.N, l.Text)
			}
		}
	}
}

// firmwareStarts counts the boot options the UEFI firmware started (OVMF's and AAVMF's
// boot manager prints one line for each): one per boot of the machine.
func firmwareStarts(lines []Line) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l.Text, "BdsDxe: starting Boot") {
			n++
		}
	}
	return n
}

// readEntries parses every entry file on the ESP.
func readEntries(ctx context.Context, t *testing.T, esp image.ESP) []layout.Entry {
	t.Helper()
	names, err := esp.Entries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var entries []layout.Entry
	for _, n := range names {
		raw, err := esp.ReadFile(ctx, layout.EntryPath(n))
		if err != nil {
			t.Fatal(err)
		}
		e, err := layout.ParseEntry(n, raw)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	return entries
}

// checkTableWithSfdisk reads the image's partition table with util-linux's sfdisk, which
// knows nothing of our writer: what it reads must be the table we meant, and its check
// must find no error (CRCs, backup, overlaps).
func checkTableWithSfdisk(ctx context.Context, t *testing.T, disk string, want image.Table) {
	sfdisk, err := image.LookTool("sfdisk")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, sfdisk, "--json", disk).Output()
	if err != nil {
		t.Fatalf("sfdisk --json: %v", err)
	}
	var j struct {
		PT struct {
			Label      string `json:"label"`
			ID         string `json:"id"`
			FirstLBA   uint64 `json:"firstlba"`
			LastLBA    uint64 `json:"lastlba"`
			SectorSize int    `json:"sectorsize"`
			Partitions []struct {
				Start, Size      uint64
				Type, UUID, Name string
			} `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &j); err != nil {
		t.Fatalf("sfdisk --json: %v\n%s", err, out)
	}
	pt := j.PT
	if pt.Label != "gpt" || pt.ID != want.DiskGUID.String() || pt.SectorSize != image.SectorSize ||
		pt.FirstLBA != 34 || pt.LastLBA != want.Sectors-34 || len(pt.Partitions) != len(want.Partitions) {
		t.Fatalf("sfdisk reads %s", out)
	}
	for i, p := range pt.Partitions {
		w := want.Partitions[i]
		if p.Start != w.FirstLBA || p.Size != w.LastLBA-w.FirstLBA+1 || p.Type != w.Type.String() ||
			p.UUID != w.GUID.String() || p.Name != w.Name {
			t.Errorf("sfdisk reads partition %d as %+v, want %+v", i+1, p, w)
		}
	}
	verify, err := exec.CommandContext(ctx, sfdisk, "--verify", disk).CombinedOutput()
	if err != nil || !bytes.Contains(verify, []byte("No errors detected")) {
		t.Errorf("sfdisk --verify: %v\n%s", err, verify)
	}
	t.Logf("sfdisk --json: %s disk %s, %d sectors; %s at %d+%d, %s at %d+%d; sfdisk --verify: no errors",
		pt.Label, pt.ID, want.Sectors, pt.Partitions[0].Name, pt.Partitions[0].Start, pt.Partitions[0].Size,
		pt.Partitions[1].Name, pt.Partitions[1].Start, pt.Partitions[1].Size)
}

// checkESP reads the ESP back with mtools: exactly the files of the layout, the boot
// loader, loader.conf, slot A's entry as Build describes it, and the bundle's parts with
// its manifest and signature, which verify with the key.
func (d *diskTest) checkESP(t *testing.T, disk string, info image.Info) {
	esp, err := image.OpenESP(disk)
	if err != nil {
		t.Fatal(err)
	}
	files, err := esp.Files(d.ctx)
	if err != nil {
		t.Fatal(err)
	}
	bootPath, err := image.BootPath(d.board.Arch)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"EFI/", "EFI/BOOT/", bootPath, "edgegate/", "edgegate/a/", "edgegate/b/",
		layout.SlotA.File(layout.InitramfsFile), layout.SlotA.File(layout.KernelFile),
		layout.SlotA.File(layout.ManifestFile), layout.SlotA.File(layout.SignatureFile),
		"loader/", layout.EntriesDir + "/", layout.EntryPath("edgegate-a.conf"), layout.LoaderConfPath,
	}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("ESP files:\n%s\nwant:\n%s", strings.Join(files, "\n"), strings.Join(want, "\n"))
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := esp.ReadFile(d.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if got := string(read(layout.LoaderConfPath)); got != layout.LoaderConf {
		t.Errorf("loader.conf %q, want %q", got, layout.LoaderConf)
	}
	if got := sha(read(bootPath)); got != d.loader.SHA256 {
		t.Errorf("%s sha256 %s, want systemd-boot's %s", bootPath, got, d.loader.SHA256)
	}
	entry, err := layout.ParseEntry("edgegate-a.conf", read(layout.EntryPath("edgegate-a.conf")))
	if err != nil {
		t.Fatal(err)
	}
	wantOptions := append(append(d.board.KernelArgs(), imageTestOptions...), "edgegate.slot=a")
	if entry.Tries != nil || entry.Generation != 1 || entry.Firmware != d.manifest.Version || !slices.Equal(entry.Options, wantOptions) {
		t.Errorf("slot A's entry %+v, want generation 1, no counter, firmware %s, options %v", entry, d.manifest.Version, wantOptions)
	}
	if len(info.Slots) != 1 || info.Slots[0].EntryFile != "edgegate-a.conf" {
		t.Errorf("Build says it filled %+v, want slot A only", info.Slots)
	}
	m, err := bundle.VerifyManifest(read(layout.SlotA.File(layout.ManifestFile)), read(layout.SlotA.File(layout.SignatureFile)), []bundle.PublicKey{d.key})
	if err != nil {
		t.Fatal(err)
	}
	if sha(read(layout.SlotA.File(layout.KernelFile))) != m.Kernel.SHA256 || sha(read(layout.SlotA.File(layout.InitramfsFile))) != m.Initramfs.SHA256 {
		t.Error("slot A's kernel or initramfs does not match its manifest")
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// countLines counts the console lines that contain s.
func countLines(lines []Line, s string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l.Text, s) {
			n++
		}
	}
	return n
}

// checkDataPartition reads the second partition's ext4 file system in place (e2fsprogs'
// ?offset= file names): labelled edgegate-data, clean, holding the builder's config.yaml.
func checkDataPartition(ctx context.Context, t *testing.T, disk string, tb image.Table) {
	p, ok := tb.Partition(layout.DataPartName)
	if !ok {
		t.Fatalf("no %s partition", layout.DataPartName)
	}
	dumpe2fs, err := image.LookTool("dumpe2fs")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, dumpe2fs, "-h", fmt.Sprintf("%s?offset=%d", disk, p.Offset())).Output()
	if err != nil {
		t.Fatalf("dumpe2fs: %v", err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	if fields["Filesystem volume name"] != layout.DataPartName || fields["Filesystem state"] != "clean" {
		t.Errorf("data partition: volume name %q, state %q", fields["Filesystem volume name"], fields["Filesystem state"])
	}
	debugfs, err := image.LookTool("debugfs")
	if err != nil {
		t.Fatal(err)
	}
	out, err = exec.CommandContext(ctx, debugfs, "-R", "cat /config.yaml", fmt.Sprintf("%s?offset=%d", disk, p.Offset())).Output()
	if err != nil || string(out) != dataConfig {
		t.Errorf("config.yaml on the data partition: %q, %v; want %q", out, err, dataConfig)
	}
}
