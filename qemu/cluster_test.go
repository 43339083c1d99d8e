package qemu

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
)

// The guestfwd addresses the guest reaches the host's etcd at (the apiserver is at
// fleetAPIAddr, as in TestFleetRollout).
const clusterEtcdAddr = "10.0.2.102"

// TestIPVSInCluster runs lab/cluster/gateway's TestFailClosedInCluster in ipvs mode, which
// the development hosts' kernels cannot: the firmware of qemu-x86_64 boots with that
// package's tests as /edgegate-test, and the guest's lab and its gateway daemon (the
// firmware's own binary) join a real kube-apiserver that runs here, on loopback, reached
// through QEMU's guestfwd and nothing else (restrict=on). The guest's test writes objects
// today's apiserver refuses straight into etcd, forwarded the same way, and checks that
// IPVS and ipvs mode's nftables firewall admit the inside client and refuse the outside
// one, and that the Events and the metric say so.
func TestIPVSInCluster(t *testing.T) {
	b, err := board.Load("qemu-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	Require(t, b)
	// The package's test binary (client-go, the lab) is large, and the guest runs it beside
	// two daemons.
	b.QEMU.MemoryMiB = max(b.QEMU.MemoryMiB, 1024)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := clustertest.Start(t, cluster.Options{
		// The guest's lab reaches the apiserver at upstream's address, as on the host.
		SANs:          []netip.Addr{lab.UpstreamIPv4},
		GatewayUser:   cluster.DefaultGatewayUser,
		GatewayGroups: []string{"system:bootstrappers:edgegate"},
	})
	if _, err := cluster.ApplyFile(ctx, c.Client, "../deploy/rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	relay := buildRelay(ctx, t)
	apiPort := c.Server[strings.LastIndex(c.Server, ":")+1:]
	etcdPort := c.EtcdURL[strings.LastIndex(c.EtcdURL, ":")+1:]
	remote := c.Remote("https://"+fleetAPIAddr+":6443", "http://"+clusterEtcdAddr+":2379")

	fw, buildTime := buildImage(ctx, t, testLog(t), TestImage{
		Board: b,
		Init:  "github.com/edgegate/edgegate/daemon",
		Test:  "github.com/edgegate/edgegate/lab/cluster/gateway",
		TestArgs: []string{"-test.v=test2json", "-test.timeout=8m", "-test.run=^TestFailClosedInCluster$",
			"-edgegate.bin=/init", "-edgegate.modes=ipvs", "-edgegate.attach=" + remote.Encode()},
		Manifests: "testdata/ipvstest/manifests",
	})
	t.Logf("test image built in %v: initramfs %d bytes gz", buildTime.Round(time.Millisecond), fw.Info.Initramfs.Size)
	vm := startVM(ctx, t, Options{
		Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
		Cmdline: []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr, "edgegate.flags=--proxy-mode=ipvs"},
		// No way out: exactly the apiserver and etcd, each through a relay to loopback.
		NICs: []NIC{{Netdev: fmt.Sprintf("user,restrict=on,guestfwd=tcp:%s:6443-cmd:%s 127.0.0.1:%s,guestfwd=tcp:%s:2379-cmd:%s 127.0.0.1:%s",
			fleetAPIAddr, relay, apiPort, clusterEtcdAddr, relay, etcdPort)}},
		Timeout: 12 * time.Minute,
	})
	_, results := guestResults(t, vm)
	t.Logf("guest tests %s", countResults(results))
	// A -test.run that matched nothing would pass too: the ipvs row must have run.
	if !slices.ContainsFunc(results, func(r Result) bool { return r.Name == "TestFailClosedInCluster/ipvs" && r.Action == "pass" }) {
		t.Errorf("the guest did not pass TestFailClosedInCluster/ipvs")
	}
	poweredOff(t, vm)
}
