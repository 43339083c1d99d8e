// Package guesttest runs inside a QEMU guest (as /edgegate-test of the harness's smoke
// image) and checks what the image put there; the host turns its results into subtests.
package guesttest

import (
	"os"
	"path"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/qemu/testdata/guestutil"
)

func TestModulesLoaded(t *testing.T) {
	loaded := guestutil.LoadedModules(t)
	for _, m := range []string{"nf_tables", "nf_conntrack", "ip_vs", "ip_vs_rr", "ip_vs_mh", "nft_compat", "xt_statistic", "veth"} {
		t.Run(m, func(t *testing.T) {
			if !loaded[m] {
				t.Errorf("%s is not in /proc/modules", m)
			}
		})
	}
}

func TestImageLayout(t *testing.T) {
	board, err := os.ReadFile("/etc/edgegate/board")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("board %s", strings.TrimSpace(string(board)))
	if _, err := os.Stat("/bin/sh"); err == nil {
		t.Error("the image has a shell")
	}
	// Drivers load for their devices (PID 1 does that, not the stand-in init): the image
	// indexes them as depmod would; every board has the virtio set.
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	dir := path.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:]))
	aliases, err := os.ReadFile(path.Join(dir, "modules.alias"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(aliases), " virtio_net\n") {
		t.Errorf("modules.alias has no alias of virtio_net:\n%s", aliases)
	}
	if _, err := os.Stat(path.Join(dir, "modules.dep")); err != nil {
		t.Error(err)
	}
}
