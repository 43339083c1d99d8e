// Package pid1 is what edgegate does as the machine's init (PID 1) on the edge gateway
// firmware: it mounts the kernel's file systems, logs to the console and the kernel log,
// loads the board's kernel modules, mounts the persistent data partition, brings up the
// network, reaps orphans, runs the firmware's updater, starts the daemon as its child process
// in a cgroup of its own and starts it again when it ends (see child.go), feeds the hardware
// watchdog while that helps, runs a test image's test, and powers off or reboots cleanly.
//
// The boot sequence is this file, top to bottom. Each step lives in a small file of its
// own and reaches the machine through a small interface (System), so the sequence is
// tested without root against fakes; the QEMU boot tests prove it against a real kernel.
package pid1

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/pid1/ctl"
	"github.com/edgegate/edgegate/daemon/update"
)

// System is everything outside the process that PID 1 acts on.
type System struct {
	// Root is where the machine's files are: "/" on the machine, a directory in tests.
	Root string
	// Console is where the kernel pointed init's standard output.
	Console       *os.File
	KernelRelease string
	Mounts        Mounter
	Modules       ModuleLoader
	// Uevents delivers device events, for the drivers of devices that appear after boot;
	// nil: drivers load for the devices present at boot only.
	Uevents UeventSource
	Links   LinkConfigurator
	DHCP    DHCPClient
	Power   Rebooter
	// Spawn starts the daemon's process.
	Spawn SpawnFunc
}

// Rebooter ends the machine.
type Rebooter interface {
	// Sync flushes file system buffers to their disks.
	Sync()
	// Reboot calls reboot(2) with a LINUX_REBOOT_CMD_* command.
	Reboot(cmd int) error
}

// KernelSystem is the System of the running kernel.
func KernelSystem() System {
	var uts unix.Utsname
	release := "unknown"
	if err := unix.Uname(&uts); err == nil {
		release = unix.ByteSliceToString(uts.Release[:])
	}
	return System{
		Root: "/", Console: os.Stdout, KernelRelease: release,
		Mounts: kernelMounts{}, Modules: kernelModules{}, Uevents: netlinkUevents{}, Links: &netlinkLinks{},
		DHCP: nclient4DHCP{}, Power: kernelPower{}, Spawn: spawnSelf(slog.Default()),
	}
}

type kernelPower struct{}

func (kernelPower) Sync()                { unix.Sync() }
func (kernelPower) Reboot(cmd int) error { return unix.Reboot(cmd) }

// Timeouts of the machine's own steps; tests shorten them.
type timing struct {
	dhcpRetry     time.Duration // shortest wait between failed DHCP renewals
	shutdownGrace time.Duration // for components to stop before the power goes
	readyWait     time.Duration // for EDGEGATE-READY before a test image's test runs anyway
	dataWait      time.Duration // for a data partition the kernel command line names
	bootDiskWait  time.Duration // for the disk the boot loader booted from
}

type action int

const (
	powerOff action = iota
	reboot
)

func (a action) String() string {
	if a == reboot {
		return "reboot"
	}
	return "power-off"
}

// Machine is the booted machine: what Boot set up and what Run supervises.
type Machine struct {
	sys       System
	console   *console
	level     slog.LevelVar
	log       *slog.Logger
	cmdline   Cmdline
	mounted   []Mount
	tokenFile string // where writeToken put edgegate.token; empty without one
	bootDisk  string // the disk the boot loader booted from (findBootDisk); empty: unknown
	// modMu guards the kernel modules' state: the boot's loading and the device event
	// goroutine's.
	modMu   sync.Mutex
	loaded  map[string]bool // modules loaded, by name
	drivers *driverIndex    // the image's device drivers; nil without an index
	handled map[string]bool // modaliases whose drivers were looked up
	espDev  string          // the mounted EFI system partition's device; empty without one
	espMu   sync.Mutex
	netMu   sync.Mutex
	netPlan []IPConfig      // what configureNetwork was asked to bring up
	netUp   map[string]bool // which of netPlan is up, by IPConfig.String
	// skipDataConfig: the data partition's config.yaml was refused; the image's is used.
	skipDataConfig bool
	leases         []*leaseKeeper
	watchdog       *os.File
	supervisor     *Supervisor
	timing         timing
	// daemon is the daemon's process, once Main has started it.
	daemon atomic.Pointer[daemonProc]

	stopWatchdog context.CancelFunc
	readyOnce    sync.Once
	ready        chan struct{}
	syncMu       sync.Mutex
	synced       chan struct{} // closed and replaced by every Ready
	requests     chan action
}

// Supervisor names of the components Main runs for the daemon.
const (
	daemonComponent  = "daemon"
	controlComponent = "control"
)

// Daemon is how PID 1 runs the daemon: as its child process, this same binary started with
// argv[0] DaemonArgv0 and the arguments daemonArgs builds (the data partition's or the
// image's config.yaml, and the kernel's edgegate.flags).
type Daemon struct {
	// Check parses the daemon's arguments and says what is wrong with them; it may set the
	// machine's log level from them.
	Check func(m *Machine, args []string) error
	// Updater builds the firmware's updater, which PID 1 runs and serves to the daemon over
	// the control socket. It is called once per boot, also when Check refused the
	// arguments (checkErr): a new firmware whose daemon cannot even start must still
	// reboot at its trial deadline, so that the old slot comes back. nil: no updater.
	Updater func(m *Machine, args []string, checkErr error) update.Updater
}

// Main is the whole life of PID 1: Boot, then the daemon's process under the supervisor
// until a power-off or reboot. It never returns: when init exits the kernel panics. A boot
// that fails on an essential step prints EDGEGATE-BOOT-FAILED and reboots.
func Main(d Daemon) {
	sys := KernelSystem()
	m, err := Boot(sys)
	if err != nil {
		bootFailed(sys, err)
	}
	m.Run(context.Background(), m.daemonComponents(d)...)
	m.log.Error("the machine did not turn off; waiting for the watchdog or a hard reset")
	for {
		time.Sleep(time.Hour)
	}
}

// daemonComponents are the daemon's process and the control socket it reports on; none
// when even the image's configuration is refused.
func (m *Machine) daemonComponents(d Daemon) []Component {
	args, err := m.checkedDaemonArgs(d.Check)
	var up update.Updater
	if d.Updater != nil {
		up = d.Updater(m, args, err)
	}
	if err != nil {
		return nil
	}
	proc := m.newDaemonProc(args)
	m.daemon.Store(proc)
	srv := ctl.NewServer(proc, up, proc.isChild, m.log.With("component", controlComponent))
	return []Component{
		{Name: controlComponent, Run: func(ctx context.Context) error {
			if err := os.MkdirAll(filepath.Dir(m.path(controlSocket)), 0o700); err != nil {
				return err
			}
			l, err := ctl.Listen(m.path(controlSocket))
			if err != nil {
				return err
			}
			return srv.Serve(ctx, l)
		}},
		{Name: daemonComponent, Run: proc.runOnce},
	}
}

// checkedDaemonArgs builds the daemon's arguments and checks them. When the data
// partition's config.yaml is what the daemon refuses, the gateway falls back to the image's
// configuration (logged by file, with the daemon's error naming the field) rather than run
// no proxy at all: an operator's typo must not take the box off the network.
func (m *Machine) checkedDaemonArgs(check func(*Machine, []string) error) ([]string, error) {
	for {
		args := m.daemonArgs()
		err := Protect(func() error { return check(m, args) })
		if err == nil {
			return args, nil
		}
		if file, from, _ := m.daemonConfig(); from == "data partition" && !m.skipDataConfig {
			m.log.Error("the data partition's daemon configuration is invalid; falling back to the image's", "file", file, "err", err)
			m.skipDataConfig = true
			continue
		}
		m.log.Error("the daemon's configuration is invalid; the daemon is not started", "args", args, "err", err)
		return args, err
	}
}

func bootFailed(sys System, err error) {
	fmt.Fprintf(sys.Console, "EDGEGATE-BOOT-FAILED %v\n", err)
	time.Sleep(10 * time.Second) // for a person at the console to read it
	sys.Power.Sync()
	_ = sys.Power.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	for {
		time.Sleep(time.Hour)
	}
}

// Boot brings the machine up to a configured network: file systems, logging to the kernel
// log, the reaper, the kernel command line (and its bootstrap token), modules, the watchdog,
// the persistent data partition, the EFI system partition, forwarding and network. Only a
// failure of an essential step (a mount in the table marked so, or reading the command
// line) returns an error; everything else is logged by name and boot goes on.
func Boot(sys System) (*Machine, error) {
	start := time.Now()
	m := &Machine{
		sys:          sys,
		console:      newConsole(sys.Console),
		ready:        make(chan struct{}),
		synced:       make(chan struct{}),
		requests:     make(chan action, 1),
		timing:       timing{dhcpRetry: time.Minute, shutdownGrace: 10 * time.Second, readyWait: readyWait, dataWait: dataWait, bootDiskWait: bootDiskWait},
		stopWatchdog: func() {},
		loaded:       map[string]bool{},
		handled:      map[string]bool{},
	}
	m.log = slog.New(m.console.handler(&m.level))
	m.supervisor = &Supervisor{Log: m.log}
	m.console.marker("EDGEGATE-BOOT-START")
	children.start(m.log)

	mounted, err := m.mountAll(mountTable)
	m.mounted = mounted
	if err != nil {
		m.log.Error("boot failed", "err", err)
		return nil, err
	}
	m.attachKernelLog()
	b, err := os.ReadFile(m.path("/proc/cmdline"))
	if err != nil {
		m.log.Error("boot failed", "err", err)
		return nil, fmt.Errorf("kernel command line: %w", err)
	}
	m.cmdline = ParseCmdline(string(b))
	for _, p := range m.cmdline.Problems {
		m.log.Warn("kernel command line entry ignored", "problem", p)
	}
	m.writeToken()

	mods := m.loadModules()
	m.console.marker("EDGEGATE-MODULES-LOADED n=%d failed=%d", mods.Loaded, len(mods.Failed))
	m.startDrivers()
	// After the modules and drivers: the watchdog's (softdog, i6300esb, iTCO_wdt) is one.
	wctx, cancel := context.WithCancel(context.Background())
	m.stopWatchdog = cancel
	m.startWatchdog(wctx)
	// None of these is essential, so mountAll returns no error.
	more, _ := m.mountAll(moduleMountTable)
	m.mounted = append(m.mounted, more...)
	// After the modules: the disk's driver (virtio_blk, nvme, usb_storage) and, on generic
	// kernels, ext4; after efivarfs: the boot loader's partition.
	m.findBootDisk()
	m.mountData()
	m.mountESP()

	m.nameNICs()
	m.configureNetwork(context.Background())
	m.log.Info("boot done", "kernel", sys.KernelRelease, "took", since(start))
	return m, nil
}

// attachKernelLog sends the log to /dev/kmsg too, without the kernel's rate limit on
// userspace lines (10 per 5 s), which would drop most of a boot's log.
func (m *Machine) attachKernelLog() {
	if err := os.WriteFile(m.path("/proc/sys/kernel/printk_devkmsg"), []byte("on\n"), 0); err != nil {
		// Locked when the kernel command line sets printk.devkmsg itself.
		m.log.Debug("lifting the kernel log's rate limit failed", "err", err)
	}
	f, err := os.OpenFile(m.path("/dev/kmsg"), os.O_WRONLY, 0)
	if err != nil {
		m.log.Warn("logging to the console only", "err", err)
		return
	}
	m.console.attachKmsg(f, m.consoleLogLevel())
}

// consoleLogLevel is the kernel's console log level: the first number in
// /proc/sys/kernel/printk (4 with "quiet", 7 without).
func (m *Machine) consoleLogLevel() int {
	b, err := os.ReadFile(m.path("/proc/sys/kernel/printk"))
	if err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return kmsgWarn // what "quiet" sets
}

// Run supervises the components and the machine's own (DHCP leases; on a test image the
// test) until a power-off or reboot is asked for: by PowerOff or Reboot, by a signal
// (SIGTERM and SIGPWR power off; SIGINT, which is what Ctrl-Alt-Del sends, reboots), by
// the end of a test image's test, or by ctx ending (power-off). It then stops the
// components, syncs, unmounts and calls reboot(2); it returns only if that failed.
func (m *Machine) Run(ctx context.Context, components ...Component) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, unix.SIGTERM, unix.SIGINT, unix.SIGPWR)
	defer signal.Stop(sig)
	if err := m.sys.Power.Reboot(unix.LINUX_REBOOT_CMD_CAD_OFF); err != nil {
		m.log.Warn("Ctrl-Alt-Del stays a hard reset", "err", err)
	}

	cctx, stopComponents := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	supervise := func(c Component) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.supervisor.Run(cctx, c)
		}()
	}
	for _, c := range components {
		supervise(c)
	}
	// The test runs once the daemon is ready (for edgegate.test.panic, once the run after
	// its last panic is), or at once when no component runs (the daemon could not be
	// started) and nothing will ever be ready.
	var testReady <-chan struct{}
	if len(components) > 0 {
		testReady = m.ready
	}
	if d := m.daemon.Load(); d != nil && m.cmdline.TestPanics > 0 {
		testReady = d.readyAfter(cctx, m.cmdline.TestPanics)
	} else if m.cmdline.Test && m.cmdline.TestPanics > 0 {
		m.log.Warn("edgegate.test.panic: no daemon runs; nothing to panic", "panics", m.cmdline.TestPanics)
	}
	for _, k := range m.leases {
		supervise(Component{Name: "dhcp-" + k.dev, Run: k.run})
	}
	if m.cmdline.Test {
		go m.test(cctx, testReady)
	}

	var a action
	select {
	case <-ctx.Done():
		a = powerOff
	case s := <-sig:
		a = powerOff
		if s == unix.SIGINT {
			a = reboot
		}
		m.log.Info("signal", "signal", s.String())
	case a = <-m.requests:
	}
	m.shutdown(a, stopComponents, &wg)
}

// test runs the test image's test once ready closes (right away when ready is nil), then
// powers off.
func (m *Machine) test(ctx context.Context, ready <-chan struct{}) {
	if ready != nil {
		t := time.NewTimer(m.timing.readyWait)
		defer t.Stop()
		select {
		case <-ready:
		case <-t.C:
			m.log.Warn("EDGEGATE-READY did not come; running the test anyway", "waited", m.timing.readyWait)
		case <-ctx.Done():
			return
		}
	}
	m.runTest()
	m.PowerOff()
}

// shutdown stops the components (bounded in time), syncs, unmounts and ends the machine.
func (m *Machine) shutdown(a action, stopComponents func(), wg *sync.WaitGroup) {
	m.log.Info("shutting down", "then", a.String())
	stopComponents()
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	t := time.NewTimer(m.timing.shutdownGrace)
	select {
	case <-stopped:
	case <-t.C:
		m.log.Warn("components did not stop in time; going on", "waited", m.timing.shutdownGrace)
	}
	t.Stop()
	m.stopWatchdog()
	m.console.release()
	m.sys.Power.Sync()
	m.unmountAll()
	m.sys.Power.Sync()
	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	if a == reboot {
		cmd = unix.LINUX_REBOOT_CMD_RESTART
		m.console.marker("EDGEGATE-REBOOT")
	} else {
		m.console.marker("EDGEGATE-POWEROFF")
	}
	m.console.drain()
	if err := m.sys.Power.Reboot(cmd); err != nil {
		m.log.Error("reboot(2) failed", "then", a.String(), "err", err)
	}
}

// Ready is called by the daemon after every successful sync; the first prints
// EDGEGATE-READY.
func (m *Machine) Ready() {
	m.readyOnce.Do(func() {
		m.console.marker("EDGEGATE-READY")
		close(m.ready)
	})
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	close(m.synced)
	m.synced = make(chan struct{})
}

// nextSync returns a channel that closes at the daemon's next Ready.
func (m *Machine) nextSync() <-chan struct{} {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	return m.synced
}

// PowerOff asks Run to stop everything and power the machine off. It does not wait.
func (m *Machine) PowerOff() { m.request(powerOff) }

// Reboot asks Run to stop everything and reboot the machine. It does not wait.
func (m *Machine) Reboot() { m.request(reboot) }

func (m *Machine) request(a action) {
	select {
	case m.requests <- a:
	default: // one is already on its way
	}
}

// Log is the machine's logger: console and kernel log.
func (m *Machine) Log() *slog.Logger { return m.log }

// SetLogLevel sets the level of the machine's log ("debug", "info", "warn", "error").
func (m *Machine) SetLogLevel(level string) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		m.log.Warn("unknown log level; keeping the current one", "level", level)
		return
	}
	m.level.Set(l)
}

// Components returns the supervisor's counters for every component.
func (m *Machine) Components() []ComponentStats { return m.supervisor.Stats() }

// path maps a path of the machine to the System's root.
func (m *Machine) path(p string) string { return filepath.Join(m.sys.Root, p) }
