package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/board/debian"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
)

// The tests here need no tools: they stop before mkfs.vfat, or never get there.
// qemu/image_test.go builds whole images and boots them.

var testBoard = board.Board{Name: "qemu-x86_64", Arch: "amd64", Console: "ttyS0"}

func testKeys(t *testing.T, seed byte) (bundle.PublicKey, bundle.PrivateKey) {
	t.Helper()
	pub, priv, err := bundle.GenerateKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// makeBundle writes a bundle for boardName with the given parts, signed with priv.
func makeBundle(t *testing.T, boardName, version string, kernel, initramfs []byte, priv bundle.PrivateKey) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "test.bundle")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel := bundle.Release{Board: boardName, Version: version, BuildTime: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if _, err := bundle.Create(f, rel, bytes.NewReader(kernel), bytes.NewReader(initramfs), priv); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestBootPath(t *testing.T) {
	for arch, want := range map[string]string{"amd64": "EFI/BOOT/BOOTX64.EFI", "arm64": "EFI/BOOT/BOOTAA64.EFI"} {
		if got, err := BootPath(arch); err != nil || got != want {
			t.Errorf("BootPath(%s) = %q, %v; want %q", arch, got, err, want)
		}
	}
	if _, err := BootPath("riscv64"); err == nil {
		t.Error("BootPath(riscv64) succeeded")
	}
}

func TestStageSlotFromBundle(t *testing.T) {
	pub, priv := testKeys(t, 1)
	kernel, initramfs := []byte("a kernel"), []byte("an initramfs")
	b := makeBundle(t, testBoard.Name, "v1.2.3", kernel, initramfs, priv)
	staging := t.TempDir()
	si, err := stageSlot(staging, testBoard, layout.SlotB, Slot{
		Bundle: b, Keys: []bundle.PublicKey{pub}, Generation: 7, Tries: &layout.Tries{Done: 2},
		Options: []string{"edgegate.test=1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if si.EntryFile != "edgegate-b+0-2.conf" || si.Manifest == nil || si.Manifest.Version != "v1.2.3" || si.Manifest.KeyID != pub.ID {
		t.Errorf("slot info %+v", si)
	}
	files := map[string][]byte{}
	err = filepath.WalkDir(staging, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(staging, p)
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{
		"edgegate/b/initramfs.cpio.gz", "edgegate/b/manifest.json", "edgegate/b/manifest.sig", "edgegate/b/vmlinuz",
		"loader/entries/edgegate-b+0-2.conf",
	}
	if !slices.Equal(names, want) {
		t.Fatalf("staged %v, want %v", names, want)
	}
	if !bytes.Equal(files["edgegate/b/vmlinuz"], kernel) || !bytes.Equal(files["edgegate/b/initramfs.cpio.gz"], initramfs) {
		t.Error("the slot's kernel or initramfs differs from the bundle's")
	}
	// The stored manifest and signature verify as the updater will check them.
	m, err := bundle.VerifyManifest(files["edgegate/b/manifest.json"], files["edgegate/b/manifest.sig"], []bundle.PublicKey{pub})
	if err != nil || m.Version != "v1.2.3" {
		t.Errorf("the slot's manifest: %+v, %v", m, err)
	}
	e, err := layout.ParseEntry("edgegate-b+0-2.conf", files["loader/entries/edgegate-b+0-2.conf"])
	if err != nil {
		t.Fatal(err)
	}
	wantOptions := []string{"console=ttyS0", "panic=-1", "quiet", "edgegate.test=1", "edgegate.slot=b"}
	if e.Generation != 7 || e.Firmware != "v1.2.3" || *e.Tries != (layout.Tries{Done: 2}) || !slices.Equal(e.Options, wantOptions) {
		t.Errorf("entry %+v, want generation 7, firmware v1.2.3, tries +0-2, options %v", e, wantOptions)
	}
}

func TestStageSlotFromFiles(t *testing.T) {
	dir := t.TempDir()
	kernel, initramfs := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd")
	for _, f := range []string{kernel, initramfs} {
		if err := os.WriteFile(f, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	staging := t.TempDir()
	si, err := stageSlot(staging, testBoard, layout.SlotA, Slot{Kernel: kernel, Initramfs: initramfs, Firmware: "dev", Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	if si.EntryFile != "edgegate-a.conf" || si.Manifest != nil || si.Entry.Firmware != "dev" {
		t.Errorf("slot info %+v", si)
	}
	for _, f := range []string{"edgegate/a/vmlinuz", "edgegate/a/initramfs.cpio.gz", "loader/entries/edgegate-a.conf"} {
		if _, err := os.Stat(filepath.Join(staging, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(staging, "edgegate/a/manifest.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a slot from raw files has a manifest: %v", err)
	}
}

func TestSlotValidate(t *testing.T) {
	pub, _ := testKeys(t, 1)
	keys := []bundle.PublicKey{pub}
	for name, tc := range map[string]struct {
		slot Slot
		want string
	}{
		"nothing":            {Slot{Generation: 1}, "want a bundle"},
		"kernel only":        {Slot{Kernel: "k", Firmware: "dev", Generation: 1}, "want a bundle"},
		"bundle and files":   {Slot{Bundle: "b", Keys: keys, Kernel: "k", Initramfs: "i", Generation: 1}, "give one"},
		"bundle without key": {Slot{Bundle: "b", Generation: 1}, "no keys"},
		"bundle firmware":    {Slot{Bundle: "b", Keys: keys, Firmware: "v1", Generation: 1}, "the bundle's"},
		"files no firmware":  {Slot{Kernel: "k", Initramfs: "i", Generation: 1}, "need a version"},
		"firmware spaces":    {Slot{Kernel: "k", Initramfs: "i", Firmware: "v 1", Generation: 1}, "one word"},
		"generation 0":       {Slot{Bundle: "b", Keys: keys}, "generation 0"},
		"tries negative":     {Slot{Bundle: "b", Keys: keys, Generation: 1, Tries: &layout.Tries{Left: -1}}, "tries"},
		"tries too many":     {Slot{Bundle: "b", Keys: keys, Generation: 1, Tries: &layout.Tries{Done: 10000}}, "tries"},
		"tries left":         {Slot{Bundle: "b", Keys: keys, Generation: 1, Tries: &layout.Tries{Left: 2}}, "would boot by default"},
		"option space":       {Slot{Bundle: "b", Keys: keys, Generation: 1, Options: []string{"a b"}}, "one kernel argument"},
		"option empty":       {Slot{Bundle: "b", Keys: keys, Generation: 1, Options: []string{""}}, "one kernel argument"},
		"option slot":        {Slot{Bundle: "b", Keys: keys, Generation: 1, Options: []string{"edgegate.slot=b"}}, "sets edgegate.slot"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.slot.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// fakeLoader is a boot loader file good enough for the checks before the tools run.
func fakeLoader(t *testing.T, arch string) BootLoader {
	t.Helper()
	f := filepath.Join(t.TempDir(), "systemd-bootx64.efi")
	if err := os.WriteFile(f, []byte("MZ"), 0o644); err != nil {
		t.Fatal(err)
	}
	return BootLoader{Package: debian.Package{Name: BootLoaderPackage, Version: "252", Arch: arch}, File: f}
}

func TestSpecValidate(t *testing.T) {
	pub, _ := testKeys(t, 1)
	slot := &Slot{Bundle: "b", Keys: []bundle.PublicKey{pub}, Generation: 1}
	for name, tc := range map[string]struct {
		spec Spec
		want string
	}{
		"no boot loader":   {Spec{Board: testBoard, A: slot}, "no boot loader"},
		"loader arch":      {Spec{Board: testBoard, BootLoader: fakeLoader(t, "arm64"), A: slot}, `is for "arm64"`},
		"board arch":       {Spec{Board: board.Board{Name: "x", Arch: "mips"}, BootLoader: fakeLoader(t, "mips"), A: slot}, "no UEFI boot path"},
		"small ESP":        {Spec{Board: testBoard, BootLoader: fakeLoader(t, "amd64"), ESPSize: 32 << 20, A: slot}, "ESP size"},
		"unaligned data":   {Spec{Board: testBoard, BootLoader: fakeLoader(t, "amd64"), DataSize: 20<<20 + 512, A: slot}, "data partition size"},
		"bad slot B":       {Spec{Board: testBoard, BootLoader: fakeLoader(t, "amd64"), A: slot, B: &Slot{Generation: 1}}, "slot b:"},
		"zero sized parts": {Spec{Board: testBoard, BootLoader: fakeLoader(t, "amd64"), ESPSize: -1, A: slot}, "ESP size"},
	} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "disk.img")
			_, err := Build(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), out, tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build = %v, want an error with %q", err, tc.want)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused spec left %s: %v", out, err)
			}
		})
	}
}

// TestBuildRefusesBundles: a bundle for another board, signed with a key not given, or
// tampered with fails the build before anything is written, and leaves nothing behind.
func TestBuildRefusesBundles(t *testing.T) {
	pub, priv := testKeys(t, 1)
	_, otherPriv := testKeys(t, 2)
	good := makeBundle(t, testBoard.Name, "v1.0.0", []byte("kernel"), []byte("the initramfs content"), priv)
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(t.TempDir(), "tampered.bundle")
	if err := os.WriteFile(tampered, bytes.Replace(raw, []byte("the initramfs content"), []byte("THE initramfs content"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		bundle string
		want   error
	}{
		"other board": {makeBundle(t, "qemu-arm64", "v1.0.0", []byte("k"), []byte("i"), priv), bundle.ErrWrongBoard},
		"other key":   {makeBundle(t, testBoard.Name, "v1.0.0", []byte("k"), []byte("i"), otherPriv), bundle.ErrUnknownKey},
		"tampered":    {tampered, bundle.ErrBadDigest},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "disk.img")
			_, err := Build(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), out, Spec{
				Board: testBoard, BootLoader: fakeLoader(t, "amd64"),
				A: &Slot{Bundle: tc.bundle, Keys: []bundle.PublicKey{pub}, Generation: 1},
			})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Build = %v, want %v", err, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("a refused build left %v", left)
			}
		})
	}
}
