package pid1

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// journal records, in order, what the fakes were asked to do, as text a test compares.
type journal struct {
	mu    sync.Mutex
	lines []string
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
}

func (j *journal) dump() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.lines, "\n") + "\n"
}

// count returns how many lines start with prefix.
func (j *journal) count(prefix string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, l := range j.lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

type fakeMounts struct {
	j    *journal
	fail map[string]error // by target
	mu   sync.Mutex
	made []Mount // the mounts that succeeded, in order
}

var _ Mounter = (*fakeMounts)(nil)

func (f *fakeMounts) Mount(m Mount) error {
	if err := f.fail[m.Target]; err != nil {
		f.j.add("mount %s: %v", m.Target, err)
		return err
	}
	f.j.add("mount %s %s", m.Target, m.FSType)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.made = append(f.made, m)
	return nil
}

// mount returns the mount made on target.
func (f *fakeMounts) mount(target string) (Mount, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.made {
		if m.Target == target {
			return m, true
		}
	}
	return Mount{}, false
}

func (f *fakeMounts) Unmount(target string) error {
	f.j.add("unmount %s", target)
	return nil
}

type fakeModules struct {
	j    *journal
	root string
	fail map[string]error // by module file base name
	// onLoad runs after a module loads, by module file base name: a driver that brings
	// up a bus adds its devices.
	onLoad map[string]func()
}

var _ ModuleLoader = (*fakeModules)(nil)

func (f *fakeModules) Load(file, params string) error {
	rel := strings.TrimPrefix(file, f.root)
	err := f.fail[path.Base(file)]
	switch {
	case err != nil:
		f.j.add("load %s: %v", rel, err)
	case params != "":
		f.j.add("load %s %s", rel, params)
	default:
		f.j.add("load %s", rel)
	}
	if fn := f.onLoad[path.Base(file)]; err == nil && fn != nil {
		fn()
	}
	return err
}

// fakeUevents is a device event source the test feeds.
type fakeUevents struct{ events chan Uevent }

func (f *fakeUevents) Listen() (<-chan Uevent, error) { return f.events, nil }

type fakeLinks struct {
	j    *journal
	nics []string
	// late devices appear when waited for; any other unknown device never does.
	late map[string]bool
	fail map[string]error // by operation and device, "up eth0"
}

var _ LinkConfigurator = (*fakeLinks)(nil)

func (f *fakeLinks) NICs() ([]string, error) { return f.nics, nil }

func (f *fakeLinks) WaitLink(ctx context.Context, dev string) error {
	if f.late[dev] {
		f.j.add("wait %s", dev)
		return nil
	}
	f.j.add("wait %s: never appeared", dev)
	return fmt.Errorf("link %s did not appear", dev)
}

func (f *fakeLinks) op(name string) error {
	if err := f.fail[name]; err != nil {
		f.j.add("%s: %v", name, err)
		return err
	}
	f.j.add("%s", name)
	return nil
}

func (f *fakeLinks) SetUp(dev string) error { return f.op("up " + dev) }

func (f *fakeLinks) Rename(dev, name string) error {
	if err := f.op("rename " + dev + " " + name); err != nil {
		return err
	}
	for i, n := range f.nics {
		if n == dev {
			f.nics[i] = name
		}
	}
	return nil
}

func (f *fakeLinks) AddAltName(dev, name string) error { return f.op("altname " + dev + " " + name) }

func (f *fakeLinks) ReplaceAddress(dev string, a netip.Prefix, lifetime time.Duration) error {
	if lifetime > 0 {
		return f.op(fmt.Sprintf("addr %s %s valid %s", dev, a, lifetime))
	}
	return f.op(fmt.Sprintf("addr %s %s", dev, a))
}

func (f *fakeLinks) ReplaceDefaultRoute(dev string, gw netip.Addr) error {
	return f.op(fmt.Sprintf("route default via %s dev %s", gw, dev))
}

// fakeDHCP grants the same lease to every acquisition and renewal, or fails as told.
type fakeDHCP struct {
	j          *journal
	mu         sync.Mutex
	lease      Lease
	acquireErr error
	renewErr   error
}

// set changes the answers while a machine runs.
func (f *fakeDHCP) set(lease Lease, acquireErr, renewErr error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lease, f.acquireErr, f.renewErr = lease, acquireErr, renewErr
}

func (f *fakeDHCP) answer(renew bool) (Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if renew {
		return f.lease, f.renewErr
	}
	return f.lease, f.acquireErr
}

var _ DHCPClient = (*fakeDHCP)(nil)

func (f *fakeDHCP) Open(dev string) (DHCPSession, error) {
	f.j.add("dhcp open %s", dev)
	return &fakeSession{f: f, dev: dev}, nil
}

type fakeSession struct {
	f   *fakeDHCP
	dev string
}

func (s *fakeSession) Acquire(ctx context.Context) (Lease, error) { return s.answer("acquire") }

func (s *fakeSession) Renew(ctx context.Context) (Lease, error) { return s.answer("renew") }

// answer journals op ("acquire" or "renew") with its outcome and returns the fake's answer.
func (s *fakeSession) answer(op string) (Lease, error) {
	l, err := s.f.answer(op == "renew")
	if err != nil {
		s.f.j.add("dhcp %s %s: %v", op, s.dev, err)
		return Lease{}, err
	}
	s.f.j.add("dhcp %s %s", op, s.dev)
	return l, nil
}

func (s *fakeSession) Close() error {
	s.f.j.add("dhcp close %s", s.dev)
	return nil
}

type fakePower struct {
	j *journal
	// done receives the command of every reboot(2) other than Ctrl-Alt-Del settings.
	done chan int
}

var _ Rebooter = (*fakePower)(nil)

func (f *fakePower) Sync() { f.j.add("sync") }

func (f *fakePower) Reboot(cmd int) error {
	switch cmd {
	case unix.LINUX_REBOOT_CMD_CAD_OFF:
		f.j.add("reboot cad-off")
		return nil
	case unix.LINUX_REBOOT_CMD_POWER_OFF:
		f.j.add("reboot power-off")
	case unix.LINUX_REBOOT_CMD_RESTART:
		f.j.add("reboot restart")
	default:
		f.j.add("reboot %#x", cmd)
	}
	f.done <- cmd
	return nil
}

// testMachine is a fake machine: a directory as its root, a file as its console, fakes for
// everything else.
type testMachine struct {
	t       *testing.T
	j       *journal
	sys     System
	mounts  *fakeMounts
	modules *fakeModules
	links   *fakeLinks
	dhcp    *fakeDHCP
	power   *fakePower
}

const testRelease = "6.1.0-test-amd64"

// newTestMachine lays out a root with the given files (path: content) on top of an empty
// /dev/kmsg, /proc/modules and a plain kernel command line.
func newTestMachine(t *testing.T, files map[string]string) *testMachine {
	t.Helper()
	root := t.TempDir()
	base := map[string]string{
		"/proc/cmdline": "console=ttyS0 panic=-1 quiet\n",
		"/proc/modules": "",
		"/dev/kmsg":     "",
		// What a fresh kernel says: no forwarding.
		"/proc/sys/net/ipv4/ip_forward":          "0\n",
		"/proc/sys/net/ipv6/conf/all/forwarding": "0\n",
	}
	for p, c := range files {
		base[p] = c
	}
	for p, c := range base {
		file := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	con, err := os.Create(filepath.Join(t.TempDir(), "console"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })
	j := &journal{}
	tm := &testMachine{
		t: t, j: j,
		mounts:  &fakeMounts{j: j, fail: map[string]error{}},
		modules: &fakeModules{j: j, root: root, fail: map[string]error{}, onLoad: map[string]func(){}},
		links:   &fakeLinks{j: j, nics: []string{"eth0"}, late: map[string]bool{}, fail: map[string]error{}},
		dhcp:    &fakeDHCP{j: j},
		power:   &fakePower{j: j, done: make(chan int, 4)},
	}
	tm.sys = System{
		Root: root, Console: con, KernelRelease: testRelease,
		Mounts: tm.mounts, Modules: tm.modules, Links: tm.links, DHCP: tm.dhcp, Power: tm.power,
	}
	return tm
}

// addBlockDevice adds a block device as the kernel shows it: its sysfs entry (uevent and
// size in sectors, under its disk's for a partition, linked from /sys/class/block) and its
// devtmpfs node, a file holding the device's first bytes. uevent lines come after the
// ones every device has, PARTNAME=edgegate-data for example; a partition (PARTN=) is on
// the disk its name ends in (vdb1 on vdb, nvme0n1p2 on nvme0n1).
func (tm *testMachine) addBlockDevice(name string, content []byte, uevent ...string) {
	tm.t.Helper()
	devices := filepath.Join(tm.sys.Root, "sys/devices/virtual/block")
	sys := filepath.Join(devices, name)
	devtype := "disk"
	if strings.Contains(strings.Join(uevent, "\n"), "PARTN=") {
		devtype = "partition"
		disk := strings.TrimRight(name, "0123456789")
		if strings.HasSuffix(disk, "p") && strings.ContainsAny(disk[len(disk)-2:], "0123456789") {
			disk = strings.TrimSuffix(disk, "p")
		}
		sys = filepath.Join(devices, disk, name)
	}
	lines := append([]string{"MAJOR=254", "MINOR=0", "DEVNAME=" + name, "DEVTYPE=" + devtype}, uevent...)
	for file, c := range map[string]string{
		filepath.Join(sys, "uevent"):            strings.Join(lines, "\n") + "\n",
		filepath.Join(sys, "size"):              fmt.Sprintf("%d\n", 32768), // 16 MiB
		filepath.Join(tm.sys.Root, "dev", name): string(content),
	} {
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			tm.t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(c), 0o644); err != nil {
			tm.t.Fatal(err)
		}
	}
	link := filepath.Join(tm.sys.Root, "sys/class/block", name)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		tm.t.Fatal(err)
	}
	if err := os.Symlink(sys, link); err != nil {
		tm.t.Fatal(err)
	}
}

// ext4Start returns the first 2 KiB of an ext4 file system labelled label: the boot block,
// then the superblock's magic number and volume name where the kernel has them (the other
// fields stay zero: nothing reads them). TestReadExt4LabelOfMke2fs checks the offsets
// against a file system mke2fs made.
func ext4Start(label string) []byte {
	b := make([]byte, 2048)
	binary.LittleEndian.PutUint16(b[1024+56:], 0xEF53)
	copy(b[1024+120:1024+136], label)
	return b
}

// boot boots the fake machine and shortens its timeouts for tests.
func (tm *testMachine) boot() *Machine {
	tm.t.Helper()
	m, err := Boot(tm.sys)
	if err != nil {
		tm.t.Fatalf("Boot: %v\nconsole:\n%s", err, tm.console())
	}
	m.timing = timing{dhcpRetry: time.Millisecond, shutdownGrace: 5 * time.Second, readyWait: 5 * time.Second}
	m.supervisor.MinBackoff, m.supervisor.MaxBackoff = time.Millisecond, 10*time.Millisecond
	return m
}

func (tm *testMachine) console() string {
	b, err := os.ReadFile(tm.sys.Console.Name())
	if err != nil {
		tm.t.Fatal(err)
	}
	return string(b)
}

func (tm *testMachine) kmsg() string {
	b, err := os.ReadFile(filepath.Join(tm.sys.Root, "dev/kmsg"))
	if err != nil {
		tm.t.Fatal(err)
	}
	return string(b)
}

// markers returns the console's EDGEGATE-* lines.
func (tm *testMachine) markers() string {
	var out []string
	for _, l := range strings.Split(tm.console(), "\n") {
		if strings.HasPrefix(l, "EDGEGATE-") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n") + "\n"
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// run runs m in the background and returns a function that waits for Run to return.
func run(m *Machine, components ...Component) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(context.Background(), components...)
	}()
	return func() { <-done }
}

// powerOff powers m off and waits for the power-off and for Run (wait) to return.
func (tm *testMachine) powerOff(m *Machine, wait func()) {
	m.PowerOff()
	<-tm.power.done
	wait()
}

// runUntil boots the machine, runs it until cond holds (what names it) and powers it off.
func (tm *testMachine) runUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	m := tm.boot()
	wait := run(m)
	waitFor(t, what, cond)
	tm.powerOff(m, wait)
}
