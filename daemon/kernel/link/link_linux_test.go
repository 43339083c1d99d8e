package link

import (
	"errors"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// TestByName: a Handle reports an interface's index, MAC and carrier as the kernel holds
// them, and ErrNotFound for one that does not exist.
func TestByName(t *testing.T) {
	kerneltest.InNetns(t, "link", func(string) {
		h, err := Open()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if _, err := h.ByName("eglate0"); !errors.Is(err, ErrNotFound) {
			t.Errorf("ByName of a missing interface = %v; want ErrNotFound", err)
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eglate0"}, PeerName: "eglate1"}); err != nil {
			t.Fatal(err)
		}
		nl, err := netlink.LinkByName("eglate0")
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.ByName("eglate0")
		if err != nil || l.Up || l.Index != nl.Attrs().Index || l.HardwareAddr.String() != nl.Attrs().HardwareAddr.String() {
			t.Errorf("ByName = %+v, %v; want index %d, MAC %s, down", l, err, nl.Attrs().Index, nl.Attrs().HardwareAddr)
		}
		// A veth has carrier once both ends are up.
		if err := netlink.LinkSetUp(nl); err != nil {
			t.Fatal(err)
		}
		if l, err := h.ByName("eglate0"); err != nil || l.Up {
			t.Errorf("with its peer down, ByName = %+v, %v; want down", l, err)
		}
		peer, err := netlink.LinkByName("eglate1")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			t.Fatal(err)
		}
		// The operational state follows through the kernel's link watcher, within a second.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			l, err := h.ByName("eglate0")
			if err == nil && l.Up {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with both ends up, ByName = %+v, %v; want up within 10s", l, err)
			}
		}
	})
}
