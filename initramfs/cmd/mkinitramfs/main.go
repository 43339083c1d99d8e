// Command mkinitramfs builds a board's firmware: it fetches the board's Debian kernel
// (cached in -cache), packs the static -init binary with the board's modules into a
// reproducible initramfs with the update keys it trusts (-update-key, repeatable), and
// writes vmlinuz, initramfs.cpio.gz and build.json into -out.
//
//	mkinitramfs -board qemu-x86_64 -init out/firmware/qemu-x86_64/edgegate \
//		-update-key out/keys/firmware.pub -out out/firmware/qemu-x86_64
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/initramfs"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "mkinitramfs:", err)
		os.Exit(1)
	}
}

// boardList is the -board help: each board with what it stands for.
func boardList() string {
	var b strings.Builder
	for _, name := range board.Names() {
		if bd, err := board.Load(name); err == nil {
			fmt.Fprintf(&b, "\n  %-14s %s", name, bd.Description)
		}
	}
	return b.String()
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkinitramfs", flag.ContinueOnError)
	boardName := fs.String("board", "", "board name:"+boardList())
	initBin := fs.String("init", "", "static binary to pack as /init")
	out := fs.String("out", "", "output directory for vmlinuz, initramfs.cpio.gz and build.json")
	cache := fs.String("cache", "out/kernels", "directory of unpacked kernel packages")
	config := fs.String("config", "", "daemon config file to bake in as /etc/edgegate/config.yaml")
	manifests := fs.String("manifests", "", "directory of standalone manifests to bake in")
	testBin := fs.String("test-binary", "", "Go test binary to bake in as /edgegate-test (test images)")
	testArgs := fs.String("test-args", "", "the test binary's arguments, space-separated")
	var updateKeys []string
	fs.Func("update-key", "public key file (egbundle keys) whose update bundles the firmware accepts; repeatable",
		func(f string) error {
			updateKeys = append(updateKeys, f)
			return nil
		})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *boardName == "" || *initBin == "" || *out == "" {
		fs.Usage()
		return errors.New("-board, -init and -out are required")
	}
	b, err := board.Load(*boardName)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fw, err := initramfs.BuildFirmware(ctx, log, initramfs.FirmwareSpec{
		Spec: initramfs.Spec{
			Board: b, Init: *initBin, Config: *config, Manifests: *manifests,
			TestBinary: *testBin, TestArgs: strings.Fields(*testArgs), UpdateKeys: updateKeys,
		},
		CacheDir: *cache, OutDir: *out,
	})
	if err != nil {
		return err
	}
	k := fw.Info.Kernel
	keys := "no update keys (this firmware refuses every update bundle)"
	if len(fw.Info.UpdateKeys) > 0 {
		keys = "update keys " + strings.Join(fw.Info.UpdateKeys, ", ")
	}
	fmt.Printf("%s: kernel %s %s (%s), %d modules (%d built in), initramfs %d bytes gz, %s\n",
		b.Name, k.Package, k.Version, k.Release, len(fw.Info.Modules.LoadOrder),
		len(fw.Info.Modules.Builtin), fw.Info.Initramfs.Size, keys)
	return nil
}
