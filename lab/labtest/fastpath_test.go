package labtest

import (
	"testing"

	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/lab"
)

// TestForwardCounterWithoutFastPath is the control of RunFastPath's check (which needs a
// kernel with flowtables, in a QEMU guest): without the fast path, the forward hook sees
// every packet of a kept-alive connection's hundred exchanges. On this kernel --fast-path
// cannot take effect and the daemon says so and keeps running.
func TestForwardCounterWithoutFastPath(t *testing.T) {
	l := New(t, lab.Options{Prefix: "egk"})
	dir := ManifestDir(t.TempDir())
	svc := service("counted", []string{"10.96.10.91"})
	dir.Write(t, "counted", manifests(svc, slice(svc, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	d := StartDaemon(t, l.Gateway, append(lab.DaemonArgs("nftables", string(dir)), "--fast-path")...)
	packets := forwardedPackets(t, l, "10.96.10.91:80", 100)
	if packets < 200 {
		t.Errorf("100 exchanges: the forward hook counted %d packets, want 200 or more", packets)
	}
	if _, ok := d.LogLine("fast path unavailable"); !ok {
		t.Error("the daemon did not say that this kernel has no fast path")
	}
	if m, err := d.Metrics(l.Gateway); err != nil || m["edgegate_fast_path_interfaces"] != 0 {
		t.Errorf("edgegate_fast_path_interfaces = %v (%v), want 0 where the kernel has no flowtables", m["edgegate_fast_path_interfaces"], err)
	}
}
