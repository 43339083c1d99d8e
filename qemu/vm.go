// Package qemu boots edgegate firmware (a board's kernel + initramfs, or a disk image
// through the board's UEFI firmware and the boot loader on it) under QEMU with TCG and
// reads the guest's serial console: tests wait for the firmware contract's console
// markers, run Go test binaries inside the guest and report their results as host
// subtests. Guests never get a network to the outside: no NIC (-nic none), or NICs on
// backends the caller gives (unix-socket links between guests, a tap inside a test's
// network namespace); user-mode networking only with restrict=on.
package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/edgegate/edgegate/board"
)

// Errors a VM's waits return.
var (
	// ErrTimeout means the VM's deadline passed and QEMU was killed.
	ErrTimeout = errors.New("qemu: deadline passed, QEMU killed")
	// ErrExited means QEMU ended before the awaited console line appeared.
	ErrExited = errors.New("qemu: exited")
	// ErrKernelPanic means the guest kernel panicked (with panic=-1 and -no-reboot QEMU
	// then exits 0, so the exit code alone does not tell; with AllowReboot the machine
	// rebooted after it and may have run on).
	ErrKernelPanic = errors.New("qemu: guest kernel panic")
)

// Options describe one VM.
type Options struct {
	// Board gives the QEMU binary, machine, CPU, memory, NIC model and console.
	Board board.Board
	// Kernel and Initramfs are the firmware's files.
	Kernel, Initramfs string
	// Cmdline are kernel arguments added after the board's own (console, panic=-1, quiet),
	// e.g. edgegate.test=1 or edgegate.ip=eth0:10.0.2.15/24.
	Cmdline []string
	// UEFIVars, when set, boots the machine through the board's UEFI firmware
	// (board.QEMU.UEFI) from the first disk, like a gateway with a disk image
	// (firmware/image), instead of QEMU loading Kernel and Initramfs: the firmware's code
	// is attached read-only and this file is the VM's variable store (NVRAM). Start copies
	// the board's template there when the file does not exist; when it does, the VM goes on
	// with what earlier starts left in it, as a machine keeps its NVRAM across power cycles.
	// Kernel, Initramfs and Cmdline must be empty: the boot loader on the disk picks the
	// kernel and its command line.
	UEFIVars string
	// AllowReboot lets the guest reboot: QEMU runs without -no-reboot, and a reboot (also
	// a kernel panic's, with panic=-1) restarts the machine within the same QEMU run, with
	// the same disks and NVRAM, as an A/B update and its fallback need. Without it the
	// guest's first reboot ends QEMU.
	AllowReboot bool
	// NICs are the guest's network interfaces, eth0 first. None means -nic none.
	NICs []NIC
	// Disks are raw disk images, in order, attached as the board's qemu.disk says (virtio
	// block devices vda, vdb, ... by default; NVMe namespaces; USB sticks): a gateway's
	// persistent data partition, for example; each an image file or an NBD server's socket.
	Disks []Disk
	// Timeout bounds the VM's life: when it passes QEMU is killed and every wait fails
	// with ErrTimeout. Required: a hung guest must fail a test, not stall it.
	Timeout time.Duration
	// Console, when set, gets each console line as it arrives (a test's t.Log).
	Console func(line string)
	// Start, when set, starts QEMU's process instead of its Start method: lab.Host.Start
	// forks it inside a lab's network namespace, where the taps of its NICs are.
	Start func(*exec.Cmd) error
}

// NIC is one guest network interface.
type NIC struct {
	// Netdev is QEMU's -netdev value without the id, e.g.
	// "stream,server=off,addr.type=unix,addr.path=/tmp/link.sock" or
	// "tap,ifname=tap0,script=no,downscript=no".
	Netdev string
	// MAC is the interface's address; empty lets QEMU pick one.
	MAC string
}

// Disk is one virtio block device backed by a raw image file or an NBD server.
type Disk struct {
	// Path is the image file; QEMU's default write-back cache keeps every write it issued
	// in the host's page cache, so killing QEMU loses none.
	Path string
	// NBD, instead of Path, is the unix socket of an NBD server serving the disk (a
	// qemu/nbddisk test disk, whose cache a power cut can lose). The guest gets a virtio
	// disk with its write cache on: writes reach the server without FUA and the guest's
	// flushes as NBD flushes. The server must listen before Start.
	NBD string
	// ReadOnly attaches it read-only.
	ReadOnly bool
}

// Line is one console line.
type Line struct {
	// Text is the line without its line ending.
	Text string
	// At is when it arrived, measured from QEMU's start.
	At time.Duration
	// N is its index in the console (VM.Lines).
	N int
	// arrived holds where in Text each read of the console began and when: a line can be
	// written in parts seconds apart (SeaBIOS's "Booting from ROM..", then PID 1's first
	// line with no line break between them).
	arrived []arrival
}

type arrival struct {
	off int
	at  time.Duration
}

// ArrivedAt is when the byte at offset i of Text arrived: At for a line that came in one
// read, earlier for the first parts of one that came in several.
func (l Line) ArrivedAt(i int) time.Duration {
	at := l.At
	for _, a := range l.arrived {
		if a.off > i {
			break
		}
		at = a.at
	}
	return at
}

// VM is a running QEMU.
type VM struct {
	args    []string
	cmd     *exec.Cmd
	started time.Time
	stderr  bytes.Buffer // QEMU's own messages, guarded by mu after start

	mu       sync.Mutex
	changed  *sync.Cond // broadcast on every new line and on exit
	lines    []Line
	cursor   int  // WaitFor searches from here
	exited   bool // QEMU has ended and the console is fully read
	timedOut bool
	elapsed  time.Duration // from start to exit
	exitCode int
	waitErr  error

	stopTimer func() bool
	stopCtx   func() bool
}

// Args returns QEMU's command line for opts.
func Args(opts Options) ([]string, error) {
	q := opts.Board.QEMU
	machine := q.Machine
	var boot []string
	if opts.UEFIVars != "" {
		u, err := uefiOf(opts)
		if err != nil {
			return nil, err
		}
		if u.Machine != "" {
			machine = u.Machine
		}
		boot = []string{
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + u.Code,
			"-drive", "if=pflash,format=raw,unit=1,file=" + opts.UEFIVars,
		}
	} else {
		boot = []string{
			"-kernel", opts.Kernel, "-initrd", opts.Initramfs,
			"-append", strings.Join(append(opts.Board.KernelArgs(), opts.Cmdline...), " "),
		}
	}
	args := []string{"-M", machine, "-accel", "tcg", "-cpu", q.CPU, "-m", fmt.Sprint(q.MemoryMiB), "-nographic"}
	if !opts.AllowReboot {
		args = append(args, "-no-reboot")
	}
	args = append(args, boot...)
	if opts.Board.QEMU.Disk == "usb" && len(opts.Disks) > 0 {
		// USB mass storage hangs off an xHCI controller, as on a board's USB port.
		args = append(args, "-device", "qemu-xhci,id=xhci")
	}
	for i, d := range opts.Disks {
		diskArgs, err := d.args(i, opts.Board.QEMU.Disk, opts.UEFIVars != "")
		if err != nil {
			return nil, err
		}
		args = append(args, diskArgs...)
	}
	if w := opts.Board.QEMU.Watchdog; w != "" {
		// Its action is QEMU's default, a reset (with -no-reboot: QEMU exits).
		args = append(args, "-device", w)
	}
	if len(opts.NICs) == 0 {
		return append(args, "-nic", "none"), nil
	}
	for i, nic := range opts.NICs {
		if err := checkNetdev(nic.Netdev); err != nil {
			return nil, err
		}
		id := fmt.Sprintf("net%d", i)
		// romfile= skips loading the iPXE option ROM: nothing here network-boots.
		dev := fmt.Sprintf("%s,netdev=%s,romfile=", q.NIC, id)
		if nic.MAC != "" {
			dev += ",mac=" + nic.MAC
		}
		args = append(args, "-netdev", nic.Netdev+",id="+id, "-device", dev)
	}
	return args, nil
}

// args are QEMU's arguments for the ith disk, attached as kind says (board.QEMU.Disk:
// virtio, nvme or usb); under UEFI the first disk is the one booted.
func (d Disk) args(i int, kind string, uefi bool) ([]string, error) {
	switch source := d.Path + d.NBD; {
	case (d.Path == "") == (d.NBD == ""):
		return nil, fmt.Errorf("qemu: disk %d: set one of Path (%q) and NBD (%q)", i, d.Path, d.NBD)
	case strings.Contains(source, ","):
		return nil, fmt.Errorf("qemu: disk %q: the path must hold no comma", source)
	}
	id := fmt.Sprintf("disk%d", i)
	// The disk spelled as a device, which can carry a boot index (the firmware boots the
	// first disk first, not the machine's empty CD-ROM drive) and the write cache setting.
	var dev string
	switch kind {
	case "", "virtio":
		dev = "virtio-blk-pci,drive=" + id
	case "nvme":
		// An NVMe controller with one namespace; the serial number is required.
		dev = fmt.Sprintf("nvme,drive=%s,serial=edgegate%d", id, i)
	case "usb":
		dev = "usb-storage,bus=xhci.0,drive=" + id
	default:
		return nil, fmt.Errorf("qemu: disk %d: unknown kind %q", i, kind)
	}
	if uefi && i == 0 {
		dev += ",bootindex=0"
	}
	if d.NBD != "" {
		node := "driver=nbd,node-name=" + id + ",server.type=unix,server.path=" + d.NBD
		if d.ReadOnly {
			node += ",read-only=on"
		}
		// write-cache=on makes QEMU send the guest's writes without FUA and its flushes
		// as NBD_CMD_FLUSH; off would make every write FUA, a disk with no volatile cache.
		return []string{"-blockdev", node, "-device", dev + ",write-cache=on"}, nil
	}
	ro := ""
	if d.ReadOnly {
		ro = ",readonly=on"
	}
	if !uefi && (kind == "" || kind == "virtio") {
		return []string{"-drive", "file=" + d.Path + ",format=raw,if=virtio" + ro}, nil
	}
	return []string{"-drive", "file=" + d.Path + ",format=raw,if=none,id=" + id + ro, "-device", dev}, nil
}

// PartitionNode is the guest's device node for partition part of the ith disk, as the
// board's disk kind names it: /dev/vda2, /dev/nvme0n1p2, /dev/sda2.
func PartitionNode(b board.Board, i, part int) string {
	letter := string(rune('a' + i))
	switch b.QEMU.Disk {
	case "nvme":
		return fmt.Sprintf("/dev/nvme%dn1p%d", i, part)
	case "usb":
		return fmt.Sprintf("/dev/sd%s%d", letter, part)
	}
	return fmt.Sprintf("/dev/vd%s%d", letter, part)
}

// uefiOf checks a UEFI boot's options and returns the board's UEFI firmware.
func uefiOf(opts Options) (*board.UEFI, error) {
	u := opts.Board.QEMU.UEFI
	switch {
	case u == nil:
		return nil, fmt.Errorf("qemu: board %s: no qemu.uefi section, cannot boot through UEFI", opts.Board.Name)
	case opts.Kernel != "" || opts.Initramfs != "" || len(opts.Cmdline) > 0:
		return nil, errors.New("qemu: a UEFI boot takes the kernel and its command line from the disk; Kernel, Initramfs and Cmdline must be empty")
	case len(opts.Disks) == 0:
		return nil, errors.New("qemu: a UEFI boot boots the first disk; there is none")
	case strings.Contains(opts.UEFIVars, ","):
		return nil, fmt.Errorf("qemu: UEFI variable store %q: the path must hold no comma", opts.UEFIVars)
	}
	return u, nil
}

// prepareVars gives a UEFI VM its variable store: a copy of the board's template the
// first time, written beside the target and renamed into place so that an interrupted copy
// is never taken for an NVRAM.
func prepareVars(opts Options) error {
	if _, err := os.Stat(opts.UEFIVars); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("qemu: UEFI variable store: %w", err)
	}
	tmpl, err := os.Open(opts.Board.QEMU.UEFI.Vars)
	if err != nil {
		return fmt.Errorf("qemu: UEFI variable store template: %w", err)
	}
	defer tmpl.Close()
	tmp, err := os.CreateTemp(filepath.Dir(opts.UEFIVars), "."+filepath.Base(opts.UEFIVars)+".")
	if err != nil {
		return fmt.Errorf("qemu: UEFI variable store: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, tmpl); err != nil {
		tmp.Close()
		return fmt.Errorf("qemu: UEFI variable store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("qemu: UEFI variable store: %w", err)
	}
	if err := os.Rename(tmp.Name(), opts.UEFIVars); err != nil {
		return fmt.Errorf("qemu: UEFI variable store: %w", err)
	}
	return nil
}

// checkNetdev refuses backends that would reach the outside: user-mode networking is
// allowed only with restrict=on (no traffic leaves the emulator).
func checkNetdev(netdev string) error {
	opts := strings.Split(netdev, ",")
	if opts[0] == "" {
		return errors.New("qemu: NIC without a netdev backend")
	}
	for _, o := range opts[1:] {
		if strings.HasPrefix(o, "id=") {
			return fmt.Errorf("qemu: netdev %q: the harness sets the id", netdev)
		}
	}
	if opts[0] != "user" {
		return nil
	}
	for _, o := range opts[1:] {
		if o == "restrict=on" || o == "restrict=yes" {
			return nil
		}
	}
	return fmt.Errorf("qemu: netdev %q: user-mode networking reaches the outside; add restrict=on", netdev)
}

// Start boots a VM. It runs until the guest powers off, opts.Timeout passes, ctx ends or
// Kill is called.
func Start(ctx context.Context, opts Options) (*VM, error) {
	if opts.Timeout <= 0 {
		return nil, errors.New("qemu: Options.Timeout is required")
	}
	args, err := Args(opts)
	if err != nil {
		return nil, err
	}
	if opts.UEFIVars != "" {
		if err := prepareVars(opts); err != nil {
			return nil, err
		}
	}
	vm := &VM{args: append([]string{opts.Board.QEMU.Binary}, args...)}
	vm.changed = sync.NewCond(&vm.mu)
	vm.cmd = exec.Command(opts.Board.QEMU.Binary, args...)
	vm.cmd.Stderr = lockedWriter{mu: &vm.mu, w: &vm.stderr}
	console, err := vm.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	start := vm.cmd.Start
	if opts.Start != nil {
		start = func() error { return opts.Start(vm.cmd) }
	}
	vm.started = time.Now()
	if err := start(); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	timer := time.AfterFunc(opts.Timeout, func() {
		vm.mu.Lock()
		vm.timedOut = !vm.exited
		vm.mu.Unlock()
		vm.Kill()
	})
	vm.stopTimer = timer.Stop
	vm.stopCtx = context.AfterFunc(ctx, vm.Kill)
	go vm.read(console, opts.Console)
	return vm, nil
}

// read collects console lines until QEMU closes its output, then reaps QEMU.
func (vm *VM) read(console io.Reader, echo func(string)) {
	scanLines(console, func() time.Duration { return time.Since(vm.started) }, func(l Line) {
		if echo != nil {
			echo(l.Text)
		}
		vm.mu.Lock()
		l.N = len(vm.lines)
		vm.lines = append(vm.lines, l)
		vm.changed.Broadcast()
		vm.mu.Unlock()
	})
	err := vm.cmd.Wait()
	vm.stopTimer()
	vm.stopCtx()
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.exited = true
	vm.elapsed = time.Since(vm.started)
	vm.exitCode = vm.cmd.ProcessState.ExitCode()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		vm.waitErr = err
	}
	vm.changed.Broadcast()
}

// scanLines splits console output into lines as it arrives, each timed by now() when its
// end arrived and, for every read it spans, when that part did.
func scanLines(console io.Reader, now func() time.Duration, emit func(Line)) {
	buf := make([]byte, 64<<10)
	var line []byte
	var parts []arrival // where each read began in line, and when
	flush := func(at time.Duration) {
		emit(Line{Text: strings.TrimRight(string(line), "\r\n"), At: at, arrived: parts})
		line, parts = line[:0], nil
	}
	for {
		n, err := console.Read(buf)
		at := now()
		for data := buf[:n]; len(data) > 0; {
			parts = append(parts, arrival{len(line), at})
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				line = append(line, data...)
				break
			}
			line = append(line, data[:i+1]...)
			flush(at)
			data = data[i+1:]
		}
		if err != nil {
			if len(line) > 0 {
				flush(at)
			}
			return
		}
	}
}

// WaitFor blocks until a console line containing marker arrives and returns it. The
// search starts after the line the previous WaitFor returned, so repeated markers
// (one EDGEGATE-NET-UP per address) are read one by one. It fails when QEMU exits or is
// killed first.
func (vm *VM) WaitFor(marker string) (Line, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	for {
		for ; vm.cursor < len(vm.lines); vm.cursor++ {
			if l := vm.lines[vm.cursor]; strings.Contains(l.Text, marker) {
				vm.cursor++
				return l, nil
			}
		}
		if vm.exited {
			return Line{}, fmt.Errorf("waiting for %q: %w", marker, vm.endLocked())
		}
		vm.changed.Wait()
	}
}

// Wait blocks until QEMU ends and returns its exit code. The error is ErrTimeout when the
// deadline killed it, ErrKernelPanic when the guest panicked, nil otherwise (the exit
// code then says how QEMU ended: 0 after the guest powered off).
func (vm *VM) Wait() (int, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	for !vm.exited {
		vm.changed.Wait()
	}
	switch {
	case vm.timedOut:
		return vm.exitCode, vm.endLocked()
	case vm.waitErr != nil:
		return vm.exitCode, fmt.Errorf("qemu: %w", vm.waitErr)
	}
	if l, ok := vm.panicLocked(); ok {
		return vm.exitCode, fmt.Errorf("%w: %s", ErrKernelPanic, l.Text)
	}
	return vm.exitCode, nil
}

// endLocked describes why the VM ended, with the end of the console and QEMU's stderr.
func (vm *VM) endLocked() error {
	var cause error
	switch l, panicked := vm.panicLocked(); {
	case vm.timedOut:
		cause = ErrTimeout
	case panicked:
		cause = fmt.Errorf("%w: %s", ErrKernelPanic, l.Text)
	default:
		cause = fmt.Errorf("%w with code %d", ErrExited, vm.exitCode)
	}
	tail := vm.lines[max(0, len(vm.lines)-15):]
	var b strings.Builder
	for _, l := range tail {
		b.WriteString("\n  | " + l.Text)
	}
	if s := strings.TrimSpace(vm.stderr.String()); s != "" {
		b.WriteString("\n  qemu: " + s)
	}
	return fmt.Errorf("%w; console ends:%s", cause, b.String())
}

func (vm *VM) panicLocked() (Line, bool) {
	for _, l := range vm.lines {
		if strings.Contains(l.Text, "Kernel panic - not syncing") {
			return l, true
		}
	}
	return Line{}, false
}

// Kill ends QEMU at once. Waits then fail unless QEMU had already exited.
func (vm *VM) Kill() {
	// An error here means the process is gone already, which is what Kill wants.
	_ = vm.cmd.Process.Kill()
}

// Elapsed returns how long QEMU ran: from start to exit, or until now while it runs.
func (vm *VM) Elapsed() time.Duration {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.exited {
		return vm.elapsed
	}
	return time.Since(vm.started)
}

// Lines returns the console so far.
func (vm *VM) Lines() []Line {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return append([]Line(nil), vm.lines...)
}

// Console returns the console so far as text.
func (vm *VM) Console() string {
	var b strings.Builder
	for _, l := range vm.Lines() {
		b.WriteString(l.Text + "\n")
	}
	return b.String()
}

// CommandLine returns the QEMU command the VM runs, for logs.
func (vm *VM) CommandLine() []string {
	return append([]string(nil), vm.args...)
}

// lockedWriter serialises QEMU's stderr writes with the VM's readers.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
