package fastpath

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// kernelHasFlowtables reads the running kernel's configuration: the development hosts'
// kernels are built without flowtables, the firmware's Debian kernels have them as modules.
func kernelHasFlowtables(t *testing.T) bool {
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		t.Fatalf("the kernel's configuration: %v", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := io.ReadAll(z)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(cfg, []byte("\nCONFIG_NF_FLOW_TABLE=")) && bytes.Contains(cfg, []byte("\nCONFIG_NFT_FLOW_OFFLOAD="))
}

// Apply writes the fast path over the namespace's interfaces where the kernel has
// flowtables, and replaces it when they change; where it has none, Apply says exactly that
// (ErrUnsupported) and leaves nothing behind. Cleanup removes it either way.
func TestApply(t *testing.T) {
	kerneltest.InNetns(t, "egfp", func(ns string) {
		for _, name := range []string{"fp0", "fp1"} {
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
			if err := netlink.LinkAdd(v); err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkSetUp(v); err != nil {
				t.Fatal(err)
			}
		}
		var k Kernel
		links, err := k.Links()
		if err != nil {
			t.Fatal(err)
		}
		devices := Devices(links)
		if strings.Join(devices, ",") != "fp0,fp1" { // their peers are down
			t.Fatalf("devices %v", devices)
		}
		err = k.Apply(devices)
		supported := kernelHasFlowtables(t)
		switch {
		case !supported && !errors.Is(err, ErrUnsupported):
			t.Fatalf("a kernel without flowtables: Apply = %v, want ErrUnsupported", err)
		case !supported:
			t.Logf("as expected on this kernel: %v", err)
			if out := kerneltest.NFT(t, ns, "list", "ruleset"); strings.Contains(out, TableName) {
				t.Errorf("a refused fast path left:\n%s", out)
			}
		case err != nil:
			t.Fatalf("Apply: %v", err)
		default:
			out := kerneltest.NFT(t, ns, "list", "table", "inet", TableName)
			for _, want := range []string{"flowtable services", "devices = { fp0, fp1 }", "flags counter",
				"ct state established ct status dnat meta l4proto tcp flow add @services"} {
				if !strings.Contains(out, want) {
					t.Errorf("the fast path lacks %q:\n%s", want, out)
				}
			}
			if err := k.Apply([]string{"fp0"}); err != nil {
				t.Fatalf("Apply over fewer devices: %v", err)
			}
			if out := kerneltest.NFT(t, ns, "list", "table", "inet", TableName); !strings.Contains(out, "devices = { fp0 }") {
				t.Errorf("after the devices changed:\n%s", out)
			}
		}
		if err := k.Cleanup(); err != nil {
			t.Fatal(err)
		}
		if out := kerneltest.NFT(t, ns, "list", "ruleset"); strings.Contains(out, TableName) {
			t.Errorf("Cleanup left:\n%s", out)
		}
	})
}
