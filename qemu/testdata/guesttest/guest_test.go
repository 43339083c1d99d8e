// Package guesttest runs inside a QEMU guest (as /edgegate-test of the harness's smoke
// image) and checks what the image put there; the host turns its results into subtests.
package guesttest

import (
	"os"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/qemu/testdata/guestutil"
)

func TestModulesLoaded(t *testing.T) {
	loaded := guestutil.LoadedModules(t)
	for _, m := range []string{"nf_tables", "nf_conntrack", "ip_vs", "ip_vs_rr", "ip_vs_mh", "nft_compat", "xt_statistic", "veth", "virtio_net"} {
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
}
