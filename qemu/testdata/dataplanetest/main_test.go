// Package dataplanetest runs inside a QEMU guest booted from the real firmware (edgegate as
// /init) as /edgegate-test, for what the development hosts' kernels cannot show: the
// firmware's Debian kernel has nftables flowtables (the fast path), its modules for SYN
// proxying and connection counting, and a connection tracking table the test may shrink
// (nf_conntrack_max is global to a kernel). Each test builds a lab of network namespaces
// inside the guest with /init as the gateway's plain daemon. qemu/dataplane_test.go turns
// its results into host subtests.
package dataplanetest

import (
	"testing"

	"github.com/edgegate/edgegate/lab/labtest"
)

func TestMain(m *testing.M) { labtest.GuestMain(m) }

// TestFastPath runs the traffic matrix in nftables mode with --fast-path, after proving
// that established connections skip the hooks (labtest.RunFastPath).
func TestFastPath(t *testing.T) { labtest.RunFastPath(t) }

// TestSynProxy: SYN proxying on the firmware's kernel and modules (labtest.RunSynProxy).
func TestSynProxy(t *testing.T) { labtest.RunSynProxy(t) }

// TestConntrackFull fills the lab gateway's connection tracking table: established
// connections keep working and the gateway says the table is full
// (labtest.RunConntrackFull).
func TestConntrackFull(t *testing.T) { labtest.RunConntrackFull(t, 2048) }
