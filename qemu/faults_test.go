package qemu

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
)

// The fault boot's data partition: the announcer on for the client's segment (the veth
// egt0-root the guest test makes), with the site's heartbeat key; the dashboard on loopback,
// for the guest test's websocket client.
const (
	faultConfig = `loadBalancer:
  announce: true
  poolsFile: /var/lib/edgegate/pools.yaml
  keyFile: /var/lib/edgegate/lb.key
dashboardBindAddress: 127.0.0.1:8080
dashboardTokenFile: /var/lib/edgegate/dashboard-token
`
	faultPools = `pools:
- name: client-segment
  addresses: ["10.201.1.100-10.201.1.109"]
  interfaces: [egt0-root]
`
	faultKey = "a test image's heartbeat key, not a secret\n"
)

// faultRunEnded matches PID 1's line for a run of the daemon that ended early.
var faultRunEnded = regexp.MustCompile(`msg="the daemon's run ended" run=(\d+) reason=(\w+)`)

// runEnds is how PID 1 said the daemon's runs that ended early ended, in order, joined by
// spaces ("panic hang").
func runEnds(vm *VM) string {
	var ended []string
	for _, l := range vm.Lines() {
		if m := faultRunEnded.FindStringSubmatch(l.Text); m != nil {
			ended = append(ended, m[2])
		}
	}
	return strings.Join(ended, " ")
}

// TestFaults boots the firmware of each QEMU board built with the fault hook (tag egfault)
// and runs the guest test TestFaults: each goroutine family of the daemon panics (the
// dashboard's websocket reader as a client in the guest talks to it), the sync
// loop deadlocks, the daemon allocates until its cgroup's memory limit, and PID 1's updater
// panics, while a client in the guest sends requests through a ClusterIP and a LoadBalancer
// IP. PID 1 must live through all of it (a kernel panic would end the boot), every request
// must be answered, and PID 1's console must say how each run ended.
func TestFaults(t *testing.T) {
	eachBoard(t, firmwareBoards, Require, 12*time.Minute, func(ctx context.Context, t *testing.T, b board.Board) {
		fw, buildTime := buildImage(ctx, t, testLog(t), TestImage{
			Board:     b,
			Init:      "github.com/edgegate/edgegate/daemon",
			Tags:      []string{"egfault"},
			Test:      "github.com/edgegate/edgegate/qemu/testdata/firmwaretest",
			TestArgs:  []string{"-test.v=test2json", "-test.timeout=8m", "-test.run=^TestFaults$"},
			Manifests: "testdata/firmwaretest/manifests",
		})
		t.Logf("%s: fault image built in %v", b.Name, buildTime.Round(time.Millisecond))
		disk := makeDataDiskWith(ctx, t, map[string]string{
			"config.yaml": faultConfig, "pools.yaml": faultPools, "lb.key": faultKey,
			"dashboard-token": dashboardToken + "\n",
		})
		vm := startVM(ctx, t, Options{
			Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
			Cmdline: []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr,
				"edgegate.daemon.hang=5s", "edgegate.daemon.memory=160M"},
			NICs:    []NIC{{Netdev: "user,restrict=on"}},
			Disks:   []Disk{{Path: disk}},
			Timeout: 10 * time.Minute,
		})
		bootMarkers(t, vm, fw)
		waitFor(t, vm, "EDGEGATE-READY")
		runGuest(t, vm)
		poweredOff(t, vm)
		want := "panic panic panic panic panic hang oom"
		if got := runEnds(vm); got != want {
			t.Errorf("PID 1 logged the daemon's runs ending as %q, want %q", got, want)
		}
	})
}
