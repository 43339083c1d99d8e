// Command egprovision makes a disk a gateway's: it writes the gateway's identity and
// configuration into the data partition of an edgegate disk image (make image's disk.img)
// or of the disk the image was written to, without mounting anything (firmware/provision),
// after checking it with the daemon's own parsers. With -image it first writes the image
// onto the disk, a whole block device that nothing on this machine uses.
//
//	egprovision -disk out/firmware/pc-x86_64/disk.img \
//	    -api-server https://10.0.0.1:6443 -token-file token -ca-file ca.crt \
//	    [-config config.yaml] [-network network.yaml] [-dashboard-cert c.pem -dashboard-key k.pem]
//	    [-dashboard-token-file dashboard-token]
//	egprovision -image out/firmware/pc-x86_64/disk.img -disk /dev/sdb -yes ...
//
// Exit status: 0 written, 1 refused or failed, 2 usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/edgegate/edgegate/firmware/provision"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("egprovision", flag.ContinueOnError)
	fs.SetOutput(stderr)
	disk := fs.String("disk", "", "the gateway's disk: an edgegate disk image file, or a whole block device holding one")
	img := fs.String("image", "", "first write this disk image onto -disk (a block device; needs -yes)")
	yes := fs.Bool("yes", false, "write the image onto the block device, destroying what it holds")
	apiServer := fs.String("api-server", "", "the cluster's API server, https://")
	tokenFile := fs.String("token-file", "", "file of the gateway's bearer (bootstrap) token")
	caFile := fs.String("ca-file", "", "PEM file of the cluster's CA")
	config := fs.String("config", "", "the gateway's config.yaml (the daemon's --config keys)")
	network := fs.String("network", "", "the gateway's network.yaml (ip: [eth0:192.0.2.10/24:192.0.2.1, eth1:dhcp])")
	dashCert := fs.String("dashboard-cert", "", "PEM certificate of the dashboard's TLS (with -dashboard-key)")
	dashKey := fs.String("dashboard-key", "", "PEM private key of -dashboard-cert")
	dashToken := fs.String("dashboard-token-file", "", "file of the dashboard's access token (default: generated at the gateway's first start, printed on its console)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *disk == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "egprovision: -disk is required, and takes no other arguments")
		fs.Usage()
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "egprovision:", err)
		return 1
	}
	id := provision.Identity{APIServer: *apiServer}
	for _, in := range []struct {
		file string
		into *[]byte
	}{{*caFile, &id.CA}, {*config, &id.Config}, {*network, &id.Network}, {*dashCert, &id.DashboardCert}, {*dashKey, &id.DashboardKey}} {
		if in.file == "" {
			continue
		}
		b, err := os.ReadFile(in.file)
		if err != nil {
			return fail(err)
		}
		*in.into = b
	}
	for _, in := range []struct {
		file string
		into *string
	}{{*tokenFile, &id.Token}, {*dashToken, &id.DashboardToken}} {
		if in.file == "" {
			continue
		}
		b, err := os.ReadFile(in.file)
		if err != nil {
			return fail(err)
		}
		*in.into = string(b)
	}
	files, err := provision.Files(id)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *img != "" {
		if !*yes {
			return fail(fmt.Errorf("writing %s onto %s (%s) destroys what it holds: run again with -yes", *img, *disk, describe(*disk)))
		}
		fmt.Fprintf(stdout, "writing %s onto %s (%s)\n", *img, *disk, describe(*disk))
		if err := provision.WriteImage(*img, *disk, provision.System{}); err != nil {
			return fail(err)
		}
	}
	target, err := provision.Open(*disk, provision.System{})
	if err != nil {
		return fail(err)
	}
	if err := target.Write(ctx, files); err != nil {
		return fail(err)
	}
	for _, f := range files {
		fmt.Fprintf(stdout, "%s/%s (%d bytes, mode %o)\n", provision.Dir, f.Name, len(f.Data), f.Mode)
	}
	fmt.Fprintf(stdout, "provisioned %s: partition %d (%s), read back\n", *disk, target.Data.Number, target.Data.Name)
	return 0
}

// describe says what a block device is (its model and size, from sysfs), so that the
// operator sees which disk is about to be overwritten.
func describe(dev string) string {
	real, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return err.Error()
	}
	dir := filepath.Join("/sys/class/block", filepath.Base(real))
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b))
	}
	sectors, err := strconv.ParseInt(read("size"), 10, 64)
	if err != nil {
		return "not a block device"
	}
	model := read("device/model")
	if model == "" {
		model = "unknown model"
	}
	removable := ""
	if read("removable") == "1" {
		removable = ", removable"
	}
	return fmt.Sprintf("%s, %.1f GB%s", model, float64(sectors*512)/1e9, removable)
}
