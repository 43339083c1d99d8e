// Command mkimage writes a board's bootable disk image (firmware/image): a GPT disk with
// the EFI system partition (systemd-boot from Debian's systemd-boot-efi, slot A written
// from a signed bundle, slot B empty) and the persistent data partition. It then prints
// the layout, read back from the image, and writes what went in to -info.
//
//	mkimage -board qemu-x86_64 -bundle out/firmware/qemu-x86_64/edgegate-qemu-x86_64-v0.4.0.bundle \
//		-pub out/keys/firmware.pub -out out/firmware/qemu-x86_64/disk.img
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/image"
	"github.com/edgegate/edgegate/firmware/layout"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	boardName := fs.String("board", "", "board name ("+strings.Join(board.Names(), ", ")+")")
	bundleFile := fs.String("bundle", "", "signed update bundle to write into slot A")
	var pubs, options listFlag
	fs.Var(&pubs, "pub", "public key file to verify the bundle with; repeatable")
	fs.Var(&options, "option", "kernel argument for slot A's entry after the board's; repeatable")
	out := fs.String("out", "", "the disk image to write")
	info := fs.String("info", "", "where to write what went into the image as JSON (default: image.json beside -out)")
	cache := fs.String("cache", "out/debian", "directory of unpacked Debian packages (systemd-boot-efi)")
	espMiB := fs.Int64("esp-size", image.DefaultESPSize>>20, "EFI system partition size in MiB")
	dataMiB := fs.Int64("data-size", image.DefaultDataSize>>20, "data partition size in MiB")
	dataDir := fs.String("data-dir", "", "directory whose content becomes the data partition's root")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *boardName == "" || *bundleFile == "" || len(pubs) == 0 || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("-board, -bundle, -pub and -out are required, and nothing else")
	}
	if *info == "" {
		*info = filepath.Join(filepath.Dir(*out), "image.json")
	}
	b, err := board.Load(*boardName)
	if err != nil {
		return err
	}
	var keys []bundle.PublicKey
	for _, p := range pubs {
		k, err := bundle.ReadPublicKeyFile(p)
		if err != nil {
			return err
		}
		keys = append(keys, k)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	loader, err := image.FetchBootLoader(ctx, log, b.Arch, *cache)
	if err != nil {
		return err
	}
	im, err := image.Build(ctx, log, *out, image.Spec{
		Board: b, BootLoader: loader, ESPSize: *espMiB << 20, DataSize: *dataMiB << 20, DataDir: *dataDir,
		A: &image.Slot{Bundle: *bundleFile, Keys: keys, Generation: 1, Options: options},
	})
	if err != nil {
		return err
	}
	raw, err := json.MarshalIndent(im, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(*info, append(raw, '\n'), 0o644); err != nil {
		return err
	}
	return describe(ctx, stdout, *out, im)
}

// describe prints the image's layout, read back from the disk: the partition table and the
// ESP's files, with what Build says it put there.
func describe(ctx context.Context, w io.Writer, disk string, im image.Info) error {
	t, err := image.ReadDiskTable(disk)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: disk image for %s, %d MiB, GPT disk %s\n", disk, im.Board, int64(t.Sectors)*image.SectorSize>>20, t.DiskGUID)
	fs := map[string]string{
		layout.ESPPartName:  fmt.Sprintf("FAT32 %q", layout.ESPLabel),
		layout.DataPartName: fmt.Sprintf("ext4 %q", layout.DataPartName),
	}
	fmt.Fprintf(w, "  %-2s %11s %10s  %-36s  %-14s %s\n", "#", "start", "size", "type", "name", "file system")
	for _, p := range t.Partitions {
		fmt.Fprintf(w, "  %-2d %7d MiB %6d MiB  %-36s  %-14s %s\n", p.Number, p.Offset()>>20, p.Size()>>20, p.Type, p.Name, fs[p.Name])
	}
	l := im.BootLoader.Package
	fmt.Fprintf(w, "boot loader: %s from %s %s (%s), sha256 %s\n", im.BootPath, l.Name, l.Version, l.Arch, im.BootLoader.SHA256)
	filled := map[layout.Slot]bool{}
	for _, s := range im.Slots {
		filled[s.Entry.Slot] = true
		fmt.Fprintf(w, "slot %s: edgegate %s, generation %d, entry %s", s.Entry.Slot, s.Entry.Firmware, s.Entry.Generation, layout.EntryPath(s.EntryFile))
		if s.Manifest != nil {
			fmt.Fprintf(w, ", bundle signed by key %s", s.Manifest.KeyID)
		}
		fmt.Fprintf(w, "\n  options %s\n", strings.Join(s.Entry.Options, " "))
	}
	for _, s := range layout.Slots {
		if !filled[s] {
			fmt.Fprintf(w, "slot %s: empty, no entry\n", s)
		}
	}
	esp, err := image.OpenESP(disk)
	if err != nil {
		return err
	}
	files, err := esp.Files(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "ESP files:\n")
	for _, f := range files {
		fmt.Fprintf(w, "  %s\n", f)
	}
	return nil
}
