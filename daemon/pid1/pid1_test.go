package pid1

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

const moduleOrder = `# written by the initramfs builder: soft and hard dependencies first
kernel/crypto/crc32c_generic.ko

kernel/lib/libcrc32c.ko
kernel/drivers/net/virtio_net.ko
kernel/net/netfilter/nf_conntrack.ko
kernel/net/netfilter/ipvs/ip_vs.ko
kernel/net/netfilter/ipvs/ip_vs_rr.ko
`

// TestBootSequence boots a fake machine end to end and powers it off: the mounts in table
// order, the modules in list order (one already loaded, one failing, one answering
// EEXIST), lo and the NICs, a static address with its gateway, a late NIC on DHCP, then
// the shutdown.
func TestBootSequence(t *testing.T) {
	tm := newTestMachine(t, map[string]string{
		"/proc/cmdline": "console=ttyS0 quiet edgegate.ip=eth0:10.0.2.15/24:10.0.2.2 edgegate.ip=eth1:dhcp nf_conntrack.hashsize=4096\n",
		"/proc/modules": "virtio_net 57344 0 - Live 0x0000000000000000\n",
		"/lib/modules/" + testRelease + "/edgegate.order": moduleOrder,
	})
	tm.modules.fail["ip_vs.ko"] = unix.ENOENT
	tm.modules.fail["ip_vs_rr.ko"] = unix.EEXIST
	tm.links.late["eth1"] = true
	tm.dhcp.lease = Lease{
		Address: netip.MustParsePrefix("10.0.3.20/24"), Router: netip.MustParseAddr("10.0.3.1"),
		DNS: []netip.Addr{netip.MustParseAddr("10.0.3.53")}, Duration: time.Hour, Renew: 30 * time.Minute,
	}
	m := tm.boot()

	lib := "/lib/modules/" + testRelease + "/kernel"
	wantBoot := strings.Join([]string{
		"mount /proc proc",
		"mount /sys sysfs",
		"mount /dev devtmpfs",
		"mount /dev/pts devpts",
		"mount /run tmpfs",
		"mount /tmp tmpfs",
		"mount /sys/fs/cgroup cgroup2",
		"load " + lib + "/crypto/crc32c_generic.ko",
		"load " + lib + "/lib/libcrc32c.ko",
		"load " + lib + "/net/netfilter/nf_conntrack.ko hashsize=4096",
		"load " + lib + "/net/netfilter/ipvs/ip_vs.ko: no such file or directory",
		"load " + lib + "/net/netfilter/ipvs/ip_vs_rr.ko: file exists",
		"up lo",
		"up eth0",
		"addr eth0 10.0.2.15/24",
		"route default via 10.0.2.2 dev eth0",
		"wait eth1",
		"up eth1",
		"dhcp open eth1",
		"dhcp acquire eth1",
		"addr eth1 10.0.3.20/24 valid 1h0m0s",
		"route default via 10.0.3.1 dev eth1",
	}, "\n") + "\n"
	if diff := cmp.Diff(wantBoot, tm.j.dump()); diff != "" {
		t.Errorf("boot (-want +got):\n%s", diff)
	}
	wantMarkers := "EDGEGATE-BOOT-START\n" +
		"EDGEGATE-MODULES-LOADED n=5 failed=1\n" +
		"EDGEGATE-NET-UP eth0 10.0.2.15/24\n" +
		"EDGEGATE-NET-UP eth1 10.0.3.20/24\n"
	if diff := cmp.Diff(wantMarkers, tm.markers()); diff != "" {
		t.Errorf("console markers (-want +got):\n%s", diff)
	}
	if !strings.Contains(tm.console(), `level=ERROR msg="module failed to load" module=ip_vs`) {
		t.Errorf("the failed module is not logged by name on the console:\n%s", tm.console())
	}
	kmsg := tm.kmsg()
	for _, want := range []string{
		"<6>edgegate: EDGEGATE-MODULES-LOADED n=5 failed=1\n",
		`<4>edgegate: time=`, // an error, at the "quiet" console level so the kernel does not echo it
		`msg="module failed to load" module=ip_vs`,
	} {
		if !strings.Contains(kmsg, want) {
			t.Errorf("kernel log lacks %q:\n%s", want, kmsg)
		}
	}
	for _, s := range forwardingSysctls {
		if b, err := os.ReadFile(filepath.Join(tm.sys.Root, s)); err != nil || string(b) != "1\n" {
			t.Errorf("%s = %q, %v; want forwarding on", s, b, err)
		}
	}
	resolv, err := os.ReadFile(filepath.Join(tm.sys.Root, "etc/resolv.conf"))
	if err != nil || !strings.Contains(string(resolv), "nameserver 10.0.3.53\n") {
		t.Errorf("resolv.conf = %q, %v; want the lease's name server", resolv, err)
	}

	stopped := make(chan struct{})
	daemon := Component{Name: "daemon", Run: func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return nil
	}}
	wait := run(m, daemon)
	m.PowerOff()
	if cmd := <-tm.power.done; cmd != unix.LINUX_REBOOT_CMD_POWER_OFF {
		t.Errorf("reboot(%#x), want power-off", cmd)
	}
	wait()
	select {
	case <-stopped:
	default:
		t.Error("the daemon was not stopped before the power-off")
	}
	wantShutdown := strings.Join([]string{
		"reboot cad-off",
		"dhcp close eth1",
		"sync",
		"unmount /sys/fs/cgroup",
		"unmount /tmp",
		"unmount /run",
		"unmount /dev/pts",
		"unmount /dev",
		"unmount /sys",
		"unmount /proc",
		"sync",
		"reboot power-off",
	}, "\n") + "\n"
	if diff := cmp.Diff(wantBoot+wantShutdown, tm.j.dump()); diff != "" {
		t.Errorf("shutdown (-want +got):\n%s", diff)
	}
	if got := tm.markers(); !strings.HasSuffix(got, "EDGEGATE-POWEROFF\n") {
		t.Errorf("the console does not end with EDGEGATE-POWEROFF:\n%s", got)
	}
}

func TestBootFailsOnEssentialMount(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.mounts.fail["/dev"] = unix.ENODEV
	_, err := Boot(tm.sys)
	if err == nil || !strings.Contains(err.Error(), "mount devtmpfs on /dev type devtmpfs") || !errors.Is(err, unix.ENODEV) {
		t.Fatalf("Boot = %v, want the /dev mount's error", err)
	}
	want := "mount /proc proc\nmount /sys sysfs\nmount /dev: no such device\n"
	if diff := cmp.Diff(want, tm.j.dump()); diff != "" {
		t.Errorf("nothing may follow a failed essential mount (-want +got):\n%s", diff)
	}
}

func TestBootContinuesPastNonEssentialMounts(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/sys/firmware/efi/runtime": ""})
	tm.mounts.fail["/sys/fs/cgroup"] = unix.ENODEV
	tm.mounts.fail["/dev/pts"] = unix.EPERM
	m := tm.boot()
	for _, want := range []string{"mount /sys/fs/cgroup: no such device", "mount /sys/firmware/efi/efivars efivarfs", "up lo"} {
		if !strings.Contains(tm.j.dump(), want+"\n") {
			t.Errorf("journal lacks %q:\n%s", want, tm.j.dump())
		}
	}
	for _, target := range []string{"/sys/fs/cgroup", "/dev/pts"} {
		if !strings.Contains(tm.console(), `msg="mount failed; continuing without it" target=`+target) {
			t.Errorf("the failed mount of %s is not logged by name:\n%s", target, tm.console())
		}
	}
	for _, mt := range m.mounted {
		if mt.Target == "/sys/fs/cgroup" || mt.Target == "/dev/pts" {
			t.Errorf("%s failed but is remembered for the unmount", mt.Target)
		}
	}
}

func TestNoModuleList(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.boot()
	if !strings.Contains(tm.markers(), "EDGEGATE-MODULES-LOADED n=0 failed=0\n") {
		t.Errorf("markers:\n%s", tm.markers())
	}
	if tm.j.count("load ") != 0 {
		t.Errorf("modules loaded without a list:\n%s", tm.j.dump())
	}
}

// TestNetworkFile: the network file configures the devices the kernel command line does
// not name; a bad entry and a device that never appears are logged and skipped.
func TestNetworkFile(t *testing.T) {
	tm := newTestMachine(t, map[string]string{
		"/proc/cmdline": "edgegate.ip=eth0:192.168.7.2/24\n",
		networkFile: `ip:
- eth0:10.0.2.15/24:10.0.2.2
- eth9:10.9.0.1/24
- eth1:fd00::2/64:fd00::1
- nonsense
`,
	})
	tm.links.nics = []string{"eth0", "eth1"}
	tm.links.fail["up eth1"] = unix.EIO
	tm.boot()
	want := strings.Join([]string{
		"up lo",
		"up eth0",
		"up eth1: input/output error",
		"wait eth9: never appeared",
		"addr eth1 fd00::2/64",
		"route default via fd00::1 dev eth1",
		"addr eth0 192.168.7.2/24",
	}, "\n") + "\n"
	got := tm.j.dump()
	got = got[strings.Index(got, "up lo"):]
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("network (-want +got):\n%s", diff)
	}
	for _, want := range []string{
		`msg="network entry ignored" file=/etc/edgegate/network.yaml entry=nonsense`,
		`msg="network device not found; its configuration is skipped" dev=eth9`,
		`msg="bringing up a NIC failed" dev=eth1`,
	} {
		if !strings.Contains(tm.console(), want) {
			t.Errorf("console lacks %q:\n%s", want, tm.console())
		}
	}
}

// TestNetworkFileOnTheDataPartition: the data partition's network.yaml replaces the
// image's; one that does not parse is logged by file and the image's is used.
func TestNetworkFileOnTheDataPartition(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       string // the address configured on eth0
		log        string
	}{{
		name: "the partition's wins",
		data: "ip:\n- eth0:10.1.0.2/24\n",
		want: "addr eth0 10.1.0.2/24\n",
		log:  `msg="network configuration" file=/var/lib/edgegate/network.yaml entries=1`,
	}, {
		name: "a broken one falls back to the image's",
		data: "ip: [eth0:10.1.0.2/24\n",
		want: "addr eth0 10.0.2.15/24\n",
		log:  `msg="network configuration ignored" file=/var/lib/edgegate/network.yaml`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tm := newTestMachine(t, map[string]string{
				networkFile:     "ip:\n- eth0:10.0.2.15/24\n",
				dataNetworkFile: tc.data,
			})
			tm.links.nics = []string{"eth0"}
			tm.boot()
			got := tm.j.dump()
			if !strings.Contains(got, tc.want) || strings.Count(got, "addr eth0") != 1 {
				t.Errorf("network journal lacks exactly %q:\n%s", tc.want, got)
			}
			if !strings.Contains(tm.console(), tc.log) {
				t.Errorf("console lacks %q:\n%s", tc.log, tm.console())
			}
		})
	}
}

func TestRebootOnRequest(t *testing.T) {
	tm := newTestMachine(t, nil)
	m := tm.boot()
	wait := run(m)
	m.Reboot()
	m.PowerOff() // a second request while the first is under way changes nothing
	if cmd := <-tm.power.done; cmd != unix.LINUX_REBOOT_CMD_RESTART {
		t.Errorf("reboot(%#x), want restart", cmd)
	}
	wait()
	if got := tm.markers(); !strings.HasSuffix(got, "EDGEGATE-REBOOT\n") || strings.Contains(got, "POWEROFF") {
		t.Errorf("markers:\n%s", got)
	}
}

// TestSignals sends the test process SIGTERM while Run holds the signal: the machine powers
// off instead of the process dying.
func TestSignals(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		want int
	}{
		{unix.SIGTERM, unix.LINUX_REBOOT_CMD_POWER_OFF},
		{unix.SIGPWR, unix.LINUX_REBOOT_CMD_POWER_OFF},
		{unix.SIGINT, unix.LINUX_REBOOT_CMD_RESTART},
	} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			tm := newTestMachine(t, nil)
			m := tm.boot()
			wait := run(m)
			// Run turns Ctrl-Alt-Del off once its handler is in place.
			waitFor(t, "the signal handler", func() bool { return tm.j.count("reboot cad-off") == 1 })
			if err := unix.Kill(os.Getpid(), tc.sig); err != nil {
				t.Fatal(err)
			}
			if cmd := <-tm.power.done; cmd != tc.want {
				t.Errorf("reboot(%#x), want %#x", cmd, tc.want)
			}
			wait()
		})
	}
}

func TestShutdownDoesNotWaitForeverForAComponent(t *testing.T) {
	tm := newTestMachine(t, nil)
	m := tm.boot()
	m.timing.shutdownGrace = 50 * time.Millisecond
	stuck := make(chan struct{})
	defer close(stuck)
	wait := run(m, Component{Name: "stuck", Run: func(context.Context) error { <-stuck; return nil }})
	m.PowerOff()
	select {
	case <-tm.power.done:
	case <-time.After(5 * time.Second):
		t.Fatal("a component that ignores its context held up the power-off")
	}
	wait()
	if !strings.Contains(tm.console(), "components did not stop in time") {
		t.Errorf("console:\n%s", tm.console())
	}
}

func TestReadyIsPrintedOnce(t *testing.T) {
	tm := newTestMachine(t, nil)
	m := tm.boot()
	m.Ready()
	m.Ready()
	if n := strings.Count(tm.console(), "EDGEGATE-READY\n"); n != 1 {
		t.Errorf("EDGEGATE-READY printed %d times", n)
	}
}

func TestDaemonArgs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  []string
		log   string // a line the console must show
	}{{
		name: "nothing in the image",
		log:  `msg="no daemon configuration file; the daemon's defaults and edgegate.flags"`,
	}, {
		name:  "config and baked manifests",
		files: map[string]string{configFile: "proxyMode: nftables\n", manifestsDir + "/web.yaml": "", "/proc/cmdline": "edgegate.flags=--log-level=debug"},
		want:  []string{"--config=ROOT/etc/edgegate/config.yaml", "--manifests=ROOT/etc/edgegate/manifests", "--log-level=debug"},
		log:   `msg="daemon configuration" file=/etc/edgegate/config.yaml from=image`,
	}, {
		name:  "config names its own manifests",
		files: map[string]string{configFile: "manifests: /perm/manifests\n", manifestsDir + "/web.yaml": ""},
		want:  []string{"--config=ROOT/etc/edgegate/config.yaml"},
	}, {
		name:  "manifests only",
		files: map[string]string{manifestsDir + "/web.yaml": ""},
		want:  []string{"--manifests=ROOT/etc/edgegate/manifests"},
	}, {
		name:  "the data partition's config beats the image's",
		files: map[string]string{dataConfigFile: "healthzBindAddress: 127.0.0.1:10257\n", configFile: "proxyMode: iptables\n", manifestsDir + "/web.yaml": ""},
		want:  []string{"--config=ROOT/var/lib/edgegate/config.yaml", "--manifests=ROOT/etc/edgegate/manifests"},
		log:   `msg="daemon configuration" file=/var/lib/edgegate/config.yaml from="data partition"`,
	}, {
		name:  "the data partition's config joins a cluster: no baked manifests",
		files: map[string]string{dataConfigFile: "apiServer: https://192.0.2.1:6443\ntokenFile: /var/lib/edgegate/token\ncaFile: /var/lib/edgegate/ca.crt\n", manifestsDir + "/web.yaml": ""},
		want:  []string{"--config=ROOT/var/lib/edgegate/config.yaml"},
		log:   `msg="baked manifests not used: the daemon joins a cluster" manifests=/etc/edgegate/manifests`,
	}, {
		name:  "the image's config names a kubeconfig",
		files: map[string]string{configFile: "kubeconfig: /var/lib/edgegate/kubeconfig\n", manifestsDir + "/web.yaml": ""},
		want:  []string{"--config=ROOT/etc/edgegate/config.yaml"},
	}, {
		name:  "edgegate.flags join a cluster",
		files: map[string]string{manifestsDir + "/web.yaml": "", "/proc/cmdline": "edgegate.flags=--api-server=https://192.0.2.1:6443,--token-file=/var/lib/edgegate/token"},
		want:  []string{"--api-server=https://192.0.2.1:6443", "--token-file=/var/lib/edgegate/token"},
	}, {
		name:  "kube-proxy's --master, with one dash",
		files: map[string]string{configFile: "proxyMode: nftables\n", manifestsDir + "/web.yaml": "", "/proc/cmdline": "edgegate.flags=-master=https://192.0.2.1:6443"},
		want:  []string{"--config=ROOT/etc/edgegate/config.yaml", "-master=https://192.0.2.1:6443"},
	}, {
		name:  "edgegate.flags name the manifests",
		files: map[string]string{manifestsDir + "/web.yaml": "", "/proc/cmdline": "edgegate.flags=--manifests=/var/lib/edgegate/manifests"},
		want:  []string{"--manifests=/var/lib/edgegate/manifests"},
	}, {
		name:  "edgegate.flags empty the config's kubeconfig: standalone again",
		files: map[string]string{dataConfigFile: "kubeconfig: /var/lib/edgegate/kubeconfig\n", manifestsDir + "/web.yaml": "", "/proc/cmdline": "edgegate.flags=--kubeconfig="},
		want:  []string{"--config=ROOT/var/lib/edgegate/config.yaml", "--manifests=ROOT/etc/edgegate/manifests", "--kubeconfig="},
	}, {
		name: "edgegate.flags name the config file, which joins a cluster",
		files: map[string]string{
			"/var/lib/edgegate/cluster.yaml": "apiServer: https://192.0.2.1:6443\n", dataConfigFile: "proxyMode: nftables\n", manifestsDir + "/web.yaml": "",
			"/proc/cmdline": "edgegate.flags=--config=/var/lib/edgegate/cluster.yaml",
		},
		want: []string{"--config=/var/lib/edgegate/cluster.yaml"},
		log:  `msg="daemon configuration" file=/var/lib/edgegate/cluster.yaml from=edgegate.flags`,
	}, {
		name:  "a bootstrap token for an API server on the command line",
		files: map[string]string{manifestsDir + "/web.yaml": "", "/proc/cmdline": "edgegate.token=abcdef.0123456789abcdef edgegate.flags=--api-server=https://192.0.2.1:6443,--ca-file=/var/lib/edgegate/ca.crt"},
		want:  []string{"--token-file=ROOT/run/edgegate/token", "--api-server=https://192.0.2.1:6443", "--ca-file=/var/lib/edgegate/ca.crt"},
	}, {
		name:  "the token comes before edgegate.flags, which win",
		files: map[string]string{dataConfigFile: "apiServer: https://192.0.2.1:6443\n", "/proc/cmdline": "edgegate.token=t edgegate.flags=--token-file=/var/lib/edgegate/token"},
		want:  []string{"--config=ROOT/var/lib/edgegate/config.yaml", "--token-file=ROOT/run/edgegate/token", "--token-file=/var/lib/edgegate/token"},
	}, {
		name:  "no token file next to a kubeconfig, which the daemon refuses",
		files: map[string]string{dataConfigFile: "kubeconfig: /var/lib/edgegate/kubeconfig\n", "/proc/cmdline": "edgegate.token=abcdef.0123456789abcdef"},
		want:  []string{"--config=ROOT/var/lib/edgegate/config.yaml"},
		log:   `level=WARN msg="edgegate.token not used: the kubeconfig carries the credentials" kubeconfig=/var/lib/edgegate/kubeconfig`,
	}, {
		name:  "a token without an API server: standalone, the token passed on",
		files: map[string]string{manifestsDir + "/web.yaml": "", "/proc/cmdline": "edgegate.token=abcdef.0123456789abcdef"},
		want:  []string{"--manifests=ROOT/etc/edgegate/manifests", "--token-file=ROOT/run/edgegate/token"},
		log:   `level=WARN msg="edgegate.token without an API server (apiServer or --api-server): the daemon runs standalone"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tm := newTestMachine(t, tc.files)
			m := tm.boot()
			var want []string
			for _, a := range tc.want {
				want = append(want, strings.ReplaceAll(a, "ROOT", tm.sys.Root))
			}
			if diff := cmp.Diff(want, m.daemonArgs()); diff != "" {
				t.Errorf("daemonArgs (-want +got):\n%s", diff)
			}
			if !strings.Contains(tm.console(), tc.log) {
				t.Errorf("console lacks %s:\n%s", tc.log, tm.console())
			}
		})
	}
}

// TestModuleWithoutItsDevice: a module whose init answers ENODEV (efivarfs when the kernel
// was booted without UEFI) is logged by name as absent hardware, counted neither as loaded
// nor as failed; a real failure next to it still counts.
func TestModuleWithoutItsDevice(t *testing.T) {
	tm := newTestMachine(t, map[string]string{
		"/lib/modules/" + testRelease + "/edgegate.order": "kernel/fs/efivarfs/efivarfs.ko\n" +
			"kernel/net/netfilter/nf_conntrack.ko\nkernel/net/netfilter/ipvs/ip_vs.ko\n",
	})
	tm.modules.fail["efivarfs.ko"] = unix.ENODEV
	tm.modules.fail["ip_vs.ko"] = unix.EIO
	m := &Machine{sys: tm.sys, console: newConsole(tm.sys.Console)}
	m.log = slog.New(m.console.handler(&m.level))
	got := m.loadModules()
	want := ModuleResult{Loaded: 1, Failed: []string{"ip_vs"}, Absent: []string{"efivarfs"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("loadModules (-want +got):\n%s", diff)
	}
	con := tm.console()
	if !strings.Contains(con, `level=INFO msg="module found no device; not loaded" module=efivarfs`) {
		t.Errorf("the module without its device is not logged by name:\n%s", con)
	}
	if strings.Contains(con, `msg="module failed to load" module=efivarfs`) {
		t.Errorf("the module without its device is logged as a failure:\n%s", con)
	}
	if !strings.Contains(con, `level=ERROR msg="module failed to load" module=ip_vs`) {
		t.Errorf("the failed module is not logged by name:\n%s", con)
	}

	// Through Boot, the marker counts the same way.
	tm = newTestMachine(t, map[string]string{
		"/lib/modules/" + testRelease + "/edgegate.order": "kernel/fs/efivarfs/efivarfs.ko\nkernel/net/netfilter/nf_conntrack.ko\n",
	})
	tm.modules.fail["efivarfs.ko"] = unix.ENODEV
	tm.boot()
	if !strings.Contains(tm.markers(), "EDGEGATE-MODULES-LOADED n=1 failed=0\n") {
		t.Errorf("markers:\n%s", tm.markers())
	}
}

// TestForwardingFailureIsLoggedByName: a kernel without IPv6 has no IPv6 forwarding switch;
// boot logs it by name and IPv4 still forwards.
func TestForwardingFailureIsLoggedByName(t *testing.T) {
	tm := newTestMachine(t, nil)
	if err := os.RemoveAll(filepath.Join(tm.sys.Root, "proc/sys/net/ipv6")); err != nil {
		t.Fatal(err)
	}
	tm.boot()
	if !strings.Contains(tm.console(), `msg="enabling forwarding failed" sysctl=/proc/sys/net/ipv6/conf/all/forwarding`) {
		t.Errorf("console:\n%s", tm.console())
	}
	if b, err := os.ReadFile(filepath.Join(tm.sys.Root, "proc/sys/net/ipv4/ip_forward")); err != nil || string(b) != "1\n" {
		t.Errorf("ip_forward = %q, %v; want 1", b, err)
	}
	if !strings.Contains(tm.j.dump(), "up lo\n") {
		t.Errorf("the network was not configured after the failure:\n%s", tm.j.dump())
	}
}

// TestBadDataConfigFallsBackToTheImage: a data partition's config.yaml the daemon refuses
// does not leave the gateway without a proxy: PID 1 logs the file and the daemon's error and
// starts it with the image's configuration. When that is refused too, nothing runs and the
// console says why.
func TestBadDataConfigFallsBackToTheImage(t *testing.T) {
	tm := newTestMachine(t, map[string]string{
		dataConfigFile:           "proxyMode: nftabels\n",
		configFile:               "proxyMode: nftables\n",
		manifestsDir + "/w.yaml": "",
	})
	m := tm.boot()
	var tried [][]string
	check := func(_ *Machine, args []string) error {
		tried = append(tried, args)
		for _, a := range args {
			if strings.HasSuffix(a, dataConfigFile) {
				return errors.New("--proxy-mode: unknown mode \"nftabels\"")
			}
		}
		return nil
	}
	if _, err := m.checkedDaemonArgs(check); err != nil {
		t.Fatalf("the daemon was not started; tried %q", tried)
	}
	root := tm.sys.Root
	want := [][]string{
		{"--config=" + root + dataConfigFile, "--manifests=" + root + manifestsDir},
		{"--config=" + root + configFile, "--manifests=" + root + manifestsDir},
	}
	if diff := cmp.Diff(want, tried); diff != "" {
		t.Errorf("daemon args tried (-want +got):\n%s", diff)
	}
	if want := `msg="the data partition's daemon configuration is invalid; falling back to the image's" file=/var/lib/edgegate/config.yaml err="--proxy-mode: unknown mode \"nftabels\""`; !strings.Contains(tm.console(), want) {
		t.Errorf("console lacks %s:\n%s", want, tm.console())
	}

	refused := func(*Machine, []string) error { return errors.New("refused") }
	tm = newTestMachine(t, map[string]string{dataConfigFile: "x: 1\n"})
	m = tm.boot()
	if cs := m.daemonComponents(Daemon{Check: refused}); cs != nil {
		t.Fatal("a refused configuration started the daemon")
	}
	if want := `msg="the daemon's configuration is invalid; the daemon is not started"`; !strings.Contains(tm.console(), want) {
		t.Errorf("console lacks %s:\n%s", want, tm.console())
	}
}
