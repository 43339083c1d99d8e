package pid1

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/internal/prereq"
)

// A board's disks as the tests lay them out: a GPT disk (vda: an ESP and the data
// partition), a second disk with a bare ext4 file system (vdb), an unused loop device.
type blockDev struct {
	name    string
	content []byte
	uevent  []string
}

var (
	gptDisk = []blockDev{
		{name: "vda"},
		{name: "vda1", uevent: []string{"PARTN=1", "PARTNAME=EFI system partition"}},
		{name: "vda2", content: ext4Start("rootfs-b"), uevent: []string{"PARTN=2", "PARTNAME=edgegate-data"}},
	}
	labelledDisk = blockDev{name: "vdb", content: ext4Start("edgegate-data")}
	otherDisk    = blockDev{name: "vdc", content: ext4Start("scratch")}
	notExt4      = blockDev{name: "sda", content: make([]byte, 4096)}
)

// TestDataPartitionSearch: where the data partition is found, by the default search and
// by each form of edgegate.data=, and that it is mounted on the state directory with the
// flags that keep programs and devices off it.
func TestDataPartitionSearch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cmdline string
		devs    []blockDev
		want    string // the device mounted; empty for none
	}{{
		name: "GPT partition name",
		devs: append(append([]blockDev{}, gptDisk...), otherDisk),
		want: "/dev/vda2",
	}, {
		name: "ext4 label on a disk without a partition table",
		devs: []blockDev{notExt4, otherDisk, labelledDisk},
		want: "/dev/vdb",
	}, {
		name: "the partition name wins over a label",
		devs: append([]blockDev{labelledDisk}, gptDisk...),
		want: "/dev/vda2",
	}, {
		name:    "edgegate.data names a device",
		cmdline: "edgegate.data=/dev/vdc",
		devs:    []blockDev{labelledDisk, otherDisk},
		want:    "/dev/vdc",
	}, {
		name:    "edgegate.data names a label",
		cmdline: "edgegate.data=LABEL=scratch",
		devs:    append([]blockDev{labelledDisk, otherDisk}, gptDisk...),
		want:    "/dev/vdc",
	}, {
		name:    "edgegate.data names a partition",
		cmdline: `"edgegate.data=PARTLABEL=EFI system partition"`,
		devs:    append([]blockDev{labelledDisk}, gptDisk...),
		want:    "/dev/vda1",
	}, {
		name: "none",
		devs: []blockDev{notExt4, otherDisk, {name: "vda"}, {name: "vda1", uevent: []string{"PARTN=1", "PARTNAME=EFI system partition"}}},
	}, {
		name: "no block devices at all",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			if tc.cmdline != "" {
				files["/proc/cmdline"] = tc.cmdline + "\n"
			}
			tm := newTestMachine(t, files)
			for _, d := range tc.devs {
				tm.addBlockDevice(d.name, d.content, d.uevent...)
			}
			m := tm.boot()
			got, mounted := tm.mounts.mount(dataMountpoint)
			if tc.want == "" {
				if mounted {
					t.Fatalf("mounted %s, want nothing", got)
				}
				if !strings.Contains(tm.console(), `msg="no persistent data partition; state lives in memory until power-off"`) {
					t.Errorf("no log line says there is no data partition:\n%s", tm.console())
				}
				if strings.Contains(tm.markers(), "EDGEGATE-DATA") {
					t.Errorf("markers:\n%s", tm.markers())
				}
				return
			}
			want := Mount{
				Source: tc.want, Target: "/var/lib/edgegate", FSType: "ext4",
				Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME, Data: "errors=remount-ro", Persistent: true,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("data mount (-want +got):\n%s", diff)
			}
			if !strings.Contains(tm.markers(), "EDGEGATE-DATA "+tc.want+" /var/lib/edgegate\n") {
				t.Errorf("markers:\n%s", tm.markers())
			}
			if n := len(m.mounted); n == 0 || m.mounted[n-1] != want {
				t.Errorf("the data partition is not remembered for the unmount: %v", m.mounted)
			}
			// Mounted after the modules (its driver) and before the network.
			j := tm.j.dump()
			if strings.Index(j, "mount /var/lib/edgegate ext4") > strings.Index(j, "up lo") {
				t.Errorf("the data partition was mounted after the network came up:\n%s", j)
			}
		})
	}
}

// TestDataPartitionMountFails: a partition that does not mount (not ext4, damaged) is
// logged by name, boot goes on without it, and nothing unmounts it at shutdown.
func TestDataPartitionMountFails(t *testing.T) {
	tm := newTestMachine(t, nil)
	for _, d := range gptDisk {
		tm.addBlockDevice(d.name, d.content, d.uevent...)
	}
	tm.mounts.fail[dataMountpoint] = unix.EUCLEAN
	m := tm.boot()
	con := tm.console()
	if want := `level=ERROR msg="mounting the persistent data partition failed; state lives in memory until power-off" dev=/dev/vda2 target=/var/lib/edgegate fstype=ext4 err="structure needs cleaning"`; !strings.Contains(con, want) {
		t.Errorf("console lacks %q:\n%s", want, con)
	}
	if strings.Contains(tm.markers(), "EDGEGATE-DATA") {
		t.Errorf("markers:\n%s", tm.markers())
	}
	if !strings.Contains(tm.j.dump(), "up lo\n") {
		t.Errorf("boot did not go on to the network:\n%s", tm.j.dump())
	}
	wait := run(m)
	tm.powerOff(m, wait)
	if n := tm.j.count("unmount /var/lib/edgegate"); n != 0 {
		t.Errorf("the partition that failed to mount was unmounted %d times", n)
	}
}

// TestDataPartitionUnmountedAtShutdown: the data partition is the first file system
// unmounted, after the daemon stopped and the buffers were synced, and before the power
// goes.
func TestDataPartitionUnmountedAtShutdown(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.addBlockDevice(labelledDisk.name, labelledDisk.content)
	m := tm.boot()
	daemon := Component{Name: "daemon", Run: func(ctx context.Context) error {
		<-ctx.Done()
		tm.j.add("daemon stopped")
		return nil
	}}
	wait := run(m, daemon)
	tm.powerOff(m, wait)
	j := tm.j.dump()
	i := strings.Index(j, "daemon stopped")
	if i < 0 {
		t.Fatalf("the daemon was not stopped:\n%s", j)
	}
	shutdown := j[i:]
	want := "daemon stopped\nsync\nunmount /var/lib/edgegate\nunmount /sys/fs/cgroup\n"
	if !strings.HasPrefix(shutdown, want) || !strings.HasSuffix(shutdown, "unmount /proc\nsync\nreboot power-off\n") {
		t.Errorf("shutdown:\n%s\nwant it to start with\n%s", shutdown, want)
	}
	if !strings.Contains(tm.console(), `msg=unmounted target=/var/lib/edgegate dev=/dev/vdb`) {
		t.Errorf("the unmount is not logged:\n%s", tm.console())
	}
}

// TestDataPartitionUnmountFailure: a failed unmount of the data partition is an error in
// the log, by name; the pseudo file systems' failures stay at debug level.
func TestDataPartitionUnmountFailure(t *testing.T) {
	tm := newTestMachine(t, nil)
	m := &Machine{sys: tm.sys, console: newConsole(tm.sys.Console)}
	m.log = slog.New(m.console.handler(&m.level))
	m.sys.Mounts = failingUnmounts{}
	m.mounted = []Mount{mountTable[0], dataMount("/dev/vdb")}
	m.unmountAll()
	con := tm.console()
	if want := `level=ERROR msg="unmount failed; the journal is replayed at the next mount" target=/var/lib/edgegate dev=/dev/vdb err="device or resource busy"`; !strings.Contains(con, want) {
		t.Errorf("console lacks %q:\n%s", want, con)
	}
	if strings.Contains(con, "target=/proc") {
		t.Errorf("a pseudo file system's unmount failure is logged above debug level:\n%s", con)
	}
}

type failingUnmounts struct{}

func (failingUnmounts) Mount(Mount) error           { return nil }
func (failingUnmounts) Unmount(target string) error { return unix.EBUSY }

// bareMachine is a machine that has not booted, for one step on its own.
func bareMachine(tm *testMachine, cmdline string, dataWait time.Duration) *Machine {
	m := &Machine{sys: tm.sys, console: newConsole(tm.sys.Console), cmdline: ParseCmdline(cmdline)}
	m.log = slog.New(m.console.handler(&m.level))
	m.timing.dataWait = dataWait
	return m
}

// TestDataPartitionNamedIsWaitedFor: a device the kernel command line names may register
// after its driver loaded; the search waits for it.
func TestDataPartitionNamedIsWaitedFor(t *testing.T) {
	for _, cmdline := range []string{"edgegate.data=/dev/sdb1", "edgegate.data=PARTLABEL=edgegate-data", "edgegate.data=LABEL=edgegate-data"} {
		t.Run(cmdline, func(t *testing.T) {
			tm := newTestMachine(t, nil)
			m := bareMachine(tm, cmdline, time.Minute)
			found := make(chan string, 1)
			go func() { found <- m.findDataPartition() }()
			// The device comes while the search waits (or before it looked: the result
			// is the same, and the test cannot tell without a clock).
			time.Sleep(3 * dataPoll)
			tm.addBlockDevice("sdb1", ext4Start("edgegate-data"), "PARTN=1", "PARTNAME=edgegate-data")
			select {
			case dev := <-found:
				if dev != "/dev/sdb1" {
					t.Errorf("found %q, want /dev/sdb1", dev)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the device that appeared was not found")
			}
		})
	}
}

// TestDataPartitionNamedNotFound: a named partition that never comes is an error in the
// log, by name, after the wait; boot goes on.
func TestDataPartitionNamedNotFound(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.addBlockDevice(labelledDisk.name, labelledDisk.content)
	m := bareMachine(tm, "edgegate.data=/dev/mmcblk0p3", 10*time.Millisecond)
	m.mountData()
	if want := `level=ERROR msg="persistent data partition not found; state lives in memory until power-off" edgegate.data=/dev/mmcblk0p3 waited=10ms`; !strings.Contains(tm.console(), want) {
		t.Errorf("console lacks %q:\n%s", want, tm.console())
	}
	if _, ok := tm.mounts.mount(dataMountpoint); ok {
		t.Error("a partition other than the named one was mounted")
	}
}

// TestDataPartitionDefaultSearchDoesNotWait: without edgegate.data the search looks once,
// however long a named partition would be waited for: a board without a disk boots at once.
func TestDataPartitionDefaultSearchDoesNotWait(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.addBlockDevice(otherDisk.name, otherDisk.content)
	m := bareMachine(tm, "", time.Hour)
	done := make(chan string, 1)
	go func() { done <- m.findDataPartition() }()
	select {
	case dev := <-done:
		if dev != "" {
			t.Errorf("found %q, want nothing", dev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the default search waits for a partition")
	}
}

// TestSeveralDataPartitions: two candidates are logged, and the first is used.
func TestSeveralDataPartitions(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.addBlockDevice("vdb", ext4Start("edgegate-data"))
	tm.addBlockDevice("vdc", ext4Start("edgegate-data"))
	tm.boot()
	if !strings.Contains(tm.console(), `msg="several persistent data partitions; using the first" devs="[/dev/vdb /dev/vdc]"`) {
		t.Errorf("console:\n%s", tm.console())
	}
	if got, _ := tm.mounts.mount(dataMountpoint); got.Source != "/dev/vdb" {
		t.Errorf("mounted %q, want /dev/vdb", got.Source)
	}
}

// TestBlockDevicesSkipsEmpty: a device without sectors (an unused loop device, a card
// reader without a card) is not opened.
func TestBlockDevicesSkipsEmpty(t *testing.T) {
	tm := newTestMachine(t, nil)
	tm.addBlockDevice("loop0", nil)
	if err := os.WriteFile(filepath.Join(tm.sys.Root, "sys/class/block/loop0/size"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tm.addBlockDevice("cciss!c0d0", nil, "DEVNAME=cciss/c0d0")
	m := bareMachine(tm, "", 0)
	devs, err := m.blockDevices()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]blockDevice{{node: "/dev/cciss/c0d0", disk: "cciss!c0d0"}}, devs, cmp.AllowUnexported(blockDevice{})); diff != "" {
		t.Errorf("blockDevices (-want +got):\n%s", diff)
	}
}

// TestReadExt4LabelOfMke2fs reads the label of file systems mke2fs made (ext2 and ext4,
// 1 KiB and 4 KiB blocks): the offsets are the real tool's, not only the test's.
func TestReadExt4LabelOfMke2fs(t *testing.T) {
	mke2fs, err := exec.LookPath("mke2fs")
	if err != nil {
		for _, p := range []string{"/usr/sbin/mke2fs", "/sbin/mke2fs"} {
			if _, serr := os.Stat(p); serr == nil {
				mke2fs, err = p, nil
			}
		}
	}
	if err != nil {
		prereq.Missing(t, "mke2fs (Debian e2fsprogs) is not installed")
	}
	for _, tc := range []struct{ fstype, blockSize, label string }{
		{"ext4", "1024", "edgegate-data"},
		{"ext4", "4096", "sixteen-bytes-xx"},
		{"ext2", "1024", "x"},
	} {
		img := filepath.Join(t.TempDir(), "fs.img")
		out, err := exec.Command(mke2fs, "-q", "-F", "-t", tc.fstype, "-b", tc.blockSize, "-L", tc.label, img, "8M").CombinedOutput()
		if err != nil {
			t.Fatalf("mke2fs: %v\n%s", err, out)
		}
		label, ok, err := readExt4Label(img)
		if err != nil || !ok || label != tc.label {
			t.Errorf("%s with %s-byte blocks: readExt4Label = %q, %v, %v; want %q", tc.fstype, tc.blockSize, label, ok, err, tc.label)
		}
	}
	for name, content := range map[string][]byte{"zeros": make([]byte, 8192), "short": make([]byte, 1100)} {
		file := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(file, content, 0o644); err != nil {
			t.Fatal(err)
		}
		if label, ok, err := readExt4Label(file); ok || err != nil {
			t.Errorf("%s: readExt4Label = %q, %v, %v; want no file system", name, label, ok, err)
		}
	}
}

// TestParseDataSpec covers the forms of edgegate.data=.
func TestParseDataSpec(t *testing.T) {
	checkParse(t, "ParseDataSpec", ParseDataSpec, map[string]string{
		"/dev/vdb":                 "/dev/vdb",
		"/dev/mmcblk0p3":           "/dev/mmcblk0p3",
		"LABEL=edgegate-data":      "LABEL=edgegate-data",
		"PARTLABEL=edgegate-data":  "PARTLABEL=edgegate-data",
		"LABEL=seventeen-bytes-xx": "error",
		"LABEL=":                   "error",
		"PARTLABEL=":               "error",
		"/dev/":                    "error",
		"/dev/../etc/shadow":       "error",
		"vdb":                      "error",
		"UUID=1234":                "error",
	})
}

// TestBootstrapToken: edgegate.token lands in a file only PID 1's user can read, and never
// in the console or the kernel log, however the command line is printed.
func TestBootstrapToken(t *testing.T) {
	const token = "abcdef.0123456789abcdef"
	tm := newTestMachine(t, map[string]string{
		"/proc/cmdline": "console=ttyS0 edgegate.token=" + token + " edgegate.ip=eth0:dhcp edgegate.ip=bogus\n",
	})
	m := tm.boot()
	m.log.Info("kernel command line", "cmdline", m.cmdline)
	m.log.Info(fmt.Sprintf("%v %+v %#v %s %q", m.cmdline, m.cmdline, m.cmdline, m.cmdline.Token, m.cmdline.Token))
	m.daemonArgs()

	b, err := os.ReadFile(filepath.Join(tm.sys.Root, "run/edgegate/token"))
	if err != nil || string(b) != token+"\n" {
		t.Errorf("token file = %q, %v", b, err)
	}
	for file, want := range map[string]os.FileMode{"run/edgegate": 0o700 | os.ModeDir, "run/edgegate/token": 0o600} {
		st, err := os.Stat(filepath.Join(tm.sys.Root, file))
		if err != nil || st.Mode() != want {
			t.Errorf("/%s: mode %v, %v; want %v", file, st.Mode(), err, want)
		}
	}
	for name, log := range map[string]string{"console": tm.console(), "kernel log": tm.kmsg()} {
		if strings.Contains(log, token) || strings.Contains(log, "0123456789abcdef") {
			t.Errorf("the %s shows the token:\n%s", name, log)
		}
		if !strings.Contains(log, `msg="bootstrap token from the kernel command line" file=/run/edgegate/token`) {
			t.Errorf("the %s does not say where the token went:\n%s", name, log)
		}
	}
	if !strings.Contains(tm.console(), "Token:<redacted>") {
		t.Errorf("the command line's token does not print as <redacted>:\n%s", tm.console())
	}
}

// TestBootstrapTokenFileTightened: a token directory or file that exists with wider modes
// (a second boot of a test, a file left by hand) is tightened.
func TestBootstrapTokenFileTightened(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.token=new\n", "/run/edgegate/token": "old-and-longer\n"})
	if err := os.Chmod(filepath.Join(tm.sys.Root, "run/edgegate"), 0o755); err != nil {
		t.Fatal(err)
	}
	tm.boot()
	b, err := os.ReadFile(filepath.Join(tm.sys.Root, "run/edgegate/token"))
	if err != nil || string(b) != "new\n" {
		t.Errorf("token file = %q, %v", b, err)
	}
	for file, want := range map[string]os.FileMode{"run/edgegate": 0o700 | os.ModeDir, "run/edgegate/token": 0o600} {
		st, err := os.Stat(filepath.Join(tm.sys.Root, file))
		if err != nil || st.Mode() != want {
			t.Errorf("/%s: mode %v, %v; want %v", file, st.Mode(), err, want)
		}
	}
}
