// Package ipvstest runs inside a QEMU guest booted from the real firmware (edgegate as
// /init, PID 1's daemon in ipvs mode on the baked manifests of manifests/) as
// /edgegate-test, once PID 1 has seen the daemon ready: the development hosts have no
// IPVS, the firmware's Debian kernel has. It checks PID 1's IPVS state in the guest's root
// namespace, then runs package labtest's traffic matrix in ipvs mode (real TCP and UDP between
// network namespaces inside the guest, with a second edgegate process, /init started as a
// plain daemon, as the lab's gateway) and switches that gateway among the three proxy
// modes. qemu/ipvs_test.go turns its results into host subtests.
package ipvstest

import (
	"testing"

	"github.com/edgegate/edgegate/lab/labtest"
)

func TestMain(m *testing.M) { labtest.GuestMain(m) }
