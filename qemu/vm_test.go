package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
)

// TestMain lets the test binary stand in for QEMU: with FAKE_QEMU_CONSOLE set it prints
// that console (lines separated by |, with \r\n endings like a serial console), sleeps
// FAKE_QEMU_SLEEP and exits with FAKE_QEMU_EXIT.
func TestMain(m *testing.M) {
	if console, ok := os.LookupEnv("FAKE_QEMU_CONSOLE"); ok {
		for _, line := range strings.Split(console, "|") {
			fmt.Print(line + "\r\n")
		}
		if d, err := time.ParseDuration(os.Getenv("FAKE_QEMU_SLEEP")); err == nil {
			time.Sleep(d)
		}
		var code int
		fmt.Sscan(os.Getenv("FAKE_QEMU_EXIT"), &code)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func fakeVM(t *testing.T, ctx context.Context, console, sleep, exit string, timeout time.Duration) *VM {
	t.Helper()
	t.Setenv("FAKE_QEMU_CONSOLE", console)
	t.Setenv("FAKE_QEMU_SLEEP", sleep)
	t.Setenv("FAKE_QEMU_EXIT", exit)
	b := board.Board{Console: "ttyS0", QEMU: board.QEMU{Binary: os.Args[0], Machine: "pc", CPU: "max", MemoryMiB: 512, NIC: "virtio-net-pci"}}
	vm, err := Start(ctx, Options{Board: b, Kernel: "k", Initramfs: "i", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Kill)
	return vm
}

func TestWaitForReadsMarkersInOrder(t *testing.T) {
	vm := fakeVM(t, context.Background(), "boot|EDGEGATE-NET-UP eth0 10.0.0.2/24|noise|EDGEGATE-NET-UP eth0 fd00::2/64|EDGEGATE-POWEROFF", "", "0", time.Minute)
	first, err := vm.WaitFor("EDGEGATE-NET-UP")
	if err != nil {
		t.Fatal(err)
	}
	second, err := vm.WaitFor("EDGEGATE-NET-UP")
	if err != nil {
		t.Fatal(err)
	}
	if first.Text != "EDGEGATE-NET-UP eth0 10.0.0.2/24" || second.Text != "EDGEGATE-NET-UP eth0 fd00::2/64" || second.N != 3 {
		t.Errorf("markers = %+v, %+v", first, second)
	}
	if _, err := vm.WaitFor("EDGEGATE-READY"); !errors.Is(err, ErrExited) {
		t.Errorf("WaitFor a marker that never comes = %v, want ErrExited", err)
	}
	if code, err := vm.Wait(); code != 0 || err != nil {
		t.Errorf("Wait = %d, %v", code, err)
	}
	if got := vm.Console(); !strings.HasPrefix(got, "boot\nEDGEGATE-NET-UP") || strings.Contains(got, "\r") {
		t.Errorf("console %q: want the lines without \\r", got)
	}
}

func TestTimeoutKillsQEMU(t *testing.T) {
	vm := fakeVM(t, context.Background(), "booting", "1m", "0", 300*time.Millisecond)
	start := time.Now()
	_, err := vm.WaitFor("EDGEGATE-READY")
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "| booting") {
		t.Errorf("WaitFor = %v, want ErrTimeout with the console's end", err)
	}
	if _, err := vm.Wait(); !errors.Is(err, ErrTimeout) {
		t.Errorf("Wait = %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the timeout took %v to end the VM", d)
	}
}

func TestContextKillsQEMU(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	vm := fakeVM(t, ctx, "booting", "1m", "0", time.Minute)
	cancel()
	if code, err := vm.Wait(); code != -1 || err != nil {
		t.Errorf("Wait after cancel = %d, %v; want -1 (killed)", code, err)
	}
}

func TestKernelPanicIsAnError(t *testing.T) {
	// panic=-1 and -no-reboot make QEMU exit 0 on a panic.
	vm := fakeVM(t, context.Background(), "EDGEGATE-BOOT-START|[    1.2] Kernel panic - not syncing: Attempted to kill init! exitcode=0x00000100", "", "0", time.Minute)
	if _, err := vm.WaitFor("EDGEGATE-READY"); !errors.Is(err, ErrKernelPanic) {
		t.Errorf("WaitFor = %v, want ErrKernelPanic", err)
	}
	if _, err := vm.Wait(); !errors.Is(err, ErrKernelPanic) {
		t.Errorf("Wait = %v, want ErrKernelPanic", err)
	}
}

// argsHold builds QEMU's arguments for opts and checks that their line holds each of wants;
// it returns the arguments and the line.
func argsHold(t *testing.T, opts Options, wants ...string) (args []string, line string) {
	t.Helper()
	args, err := Args(opts)
	if err != nil {
		t.Fatal(err)
	}
	line = strings.Join(args, " ")
	for _, want := range wants {
		if !strings.Contains(line, want) {
			t.Errorf("args %q lack %q", line, want)
		}
	}
	return args, line
}

func TestArgs(t *testing.T) {
	b, err := board.Load("qemu-arm64")
	if err != nil {
		t.Fatal(err)
	}
	argsHold(t, Options{Board: b, Kernel: "vmlinuz", Initramfs: "initrd", Cmdline: []string{"edgegate.test=1"}},
		"-M virt -accel tcg -cpu cortex-a57 -m 512", "-nographic -no-reboot",
		"-kernel vmlinuz -initrd initrd", "console=ttyAMA0 panic=-1 quiet edgegate.test=1", "-nic none")
	args, err := Args(Options{Board: b, NICs: []NIC{
		{Netdev: "stream,server=on,addr.type=unix,addr.path=/tmp/l.sock", MAC: "52:54:00:00:00:01"},
		{Netdev: "user,restrict=on"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-netdev", "stream,server=on,addr.type=unix,addr.path=/tmp/l.sock,id=net0",
		"-device", "virtio-net-pci,netdev=net0,romfile=,mac=52:54:00:00:00:01",
		"-netdev", "user,restrict=on,id=net1", "-device", "virtio-net-pci,netdev=net1,romfile=",
	}
	if !slices.Equal(args[len(args)-len(want):], want) || slices.Contains(args, "none") {
		t.Errorf("NIC args = %q, want to end with %q", args, want)
	}
	for _, netdev := range []string{"user", "user,hostfwd=tcp::2222-:22", "user,restrict=off", "", "tap,id=x"} {
		if _, err := Args(Options{Board: b, NICs: []NIC{{Netdev: netdev}}}); err == nil {
			t.Errorf("netdev %q accepted", netdev)
		}
	}
}

func TestDiskArgs(t *testing.T) {
	b, err := board.Load("qemu-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	argsHold(t, Options{Board: b, Disks: []Disk{{Path: "/tmp/data.img"}, {Path: "/tmp/ro.img", ReadOnly: true}}},
		"-drive file=/tmp/data.img,format=raw,if=virtio -drive file=/tmp/ro.img,format=raw,if=virtio,readonly=on")
	for _, p := range []string{"", "/tmp/a,b.img"} {
		if _, err := Args(Options{Board: b, Disks: []Disk{{Path: p}}}); err == nil {
			t.Errorf("disk %q accepted", p)
		}
	}
}

// TestHardwareDiskArgs: the hardware boards' disks are an NVMe namespace (pc-x86_64) and a
// USB stick on an xHCI controller (generic-arm64), the first one booted under UEFI.
func TestHardwareDiskArgs(t *testing.T) {
	pc, err := board.Load("pc-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	argsHold(t, Options{Board: pc, UEFIVars: "/tmp/vars.fd", Disks: []Disk{{Path: "/tmp/disk.img"}, {Path: "/tmp/two.img"}}},
		"-drive file=/tmp/disk.img,format=raw,if=none,id=disk0 -device nvme,drive=disk0,serial=edgegate0,bootindex=0 "+
			"-drive file=/tmp/two.img,format=raw,if=none,id=disk1 -device nvme,drive=disk1,serial=edgegate1")
	arm, err := board.Load("generic-arm64")
	if err != nil {
		t.Fatal(err)
	}
	argsHold(t, Options{Board: arm, UEFIVars: "/tmp/vars.fd", Disks: []Disk{{Path: "/tmp/disk.img"}}},
		"-device qemu-xhci,id=xhci -drive file=/tmp/disk.img,format=raw,if=none,id=disk0 -device usb-storage,bus=xhci.0,drive=disk0,bootindex=0")
	// Booted with -kernel, the disks keep the board's kind.
	argsHold(t, Options{Board: pc, Disks: []Disk{{Path: "/tmp/data.img"}}},
		"-drive file=/tmp/data.img,format=raw,if=none,id=disk0 -device nvme,drive=disk0,serial=edgegate0")
}

func TestNBDDiskArgs(t *testing.T) {
	b, err := board.Load("qemu-arm64")
	if err != nil {
		t.Fatal(err)
	}
	argsHold(t, Options{Board: b, Disks: []Disk{{Path: "/tmp/data.img"}, {NBD: "/tmp/nbd/disk.sock"}, {NBD: "/tmp/ro.sock", ReadOnly: true}}},
		"-drive file=/tmp/data.img,format=raw,if=virtio "+
			"-blockdev driver=nbd,node-name=disk1,server.type=unix,server.path=/tmp/nbd/disk.sock "+
			"-device virtio-blk-pci,drive=disk1,write-cache=on "+
			"-blockdev driver=nbd,node-name=disk2,server.type=unix,server.path=/tmp/ro.sock,read-only=on "+
			"-device virtio-blk-pci,drive=disk2,write-cache=on -nic none")
	uefi := uefiBoard(t, "/fw")
	argsHold(t, Options{Board: uefi, UEFIVars: "/tmp/vm/vars.fd", Disks: []Disk{{NBD: "/tmp/nbd/disk.sock"}}},
		"-blockdev driver=nbd,node-name=disk0,server.type=unix,server.path=/tmp/nbd/disk.sock "+
			"-device virtio-blk-pci,drive=disk0,bootindex=0,write-cache=on -nic none")
	for name, d := range map[string]Disk{
		"neither":       {},
		"both":          {Path: "/tmp/d.img", NBD: "/tmp/d.sock"},
		"comma in path": {NBD: "/tmp/a,b.sock"},
	} {
		if _, err := Args(Options{Board: b, Disks: []Disk{d}}); err == nil {
			t.Errorf("%s: disk %+v accepted", name, d)
		}
	}
}

// uefiBoard is qemu-x86_64 with its UEFI firmware files replaced by dir's code.fd and
// vars.fd, so that the harness's side of a UEFI boot is tested without the firmware.
func uefiBoard(t *testing.T, dir string) board.Board {
	t.Helper()
	b, err := board.Load("qemu-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	if b.QEMU.UEFI == nil {
		t.Fatal("qemu-x86_64 has no qemu.uefi section")
	}
	u := *b.QEMU.UEFI
	u.Code, u.Vars = filepath.Join(dir, "code.fd"), filepath.Join(dir, "vars.fd")
	b.QEMU.UEFI = &u
	return b
}

func TestUEFIArgs(t *testing.T) {
	b := uefiBoard(t, "/fw")
	disks := []Disk{{Path: "/tmp/disk.img"}, {Path: "/tmp/ro.img", ReadOnly: true}}
	args, got := argsHold(t, Options{Board: b, UEFIVars: "/tmp/vm/vars.fd", Disks: disks, AllowReboot: true},
		// q35 from the uefi section, not the board's pc.
		"-M q35 -accel tcg -cpu max -m 512 -nographic -drive",
		"-drive if=pflash,format=raw,unit=0,readonly=on,file=/fw/code.fd -drive if=pflash,format=raw,unit=1,file=/tmp/vm/vars.fd",
		"-drive file=/tmp/disk.img,format=raw,if=none,id=disk0 -device virtio-blk-pci,drive=disk0,bootindex=0",
		"-drive file=/tmp/ro.img,format=raw,if=none,id=disk1,readonly=on -device virtio-blk-pci,drive=disk1 -nic none",
	)
	for _, unwanted := range []string{"-no-reboot", "-kernel", "-initrd", "-append"} {
		if slices.Contains(args, unwanted) {
			t.Errorf("args %q hold %s", got, unwanted)
		}
	}
	if args, _ = argsHold(t, Options{Board: b, UEFIVars: "/tmp/vm/vars.fd", Disks: disks[:1]}); !slices.Contains(args, "-no-reboot") {
		t.Errorf("args %q: a UEFI boot without AllowReboot lacks -no-reboot", args)
	}

	noUEFI := b
	noUEFI.QEMU.UEFI = nil
	for name, opts := range map[string]Options{
		"no uefi section": {Board: noUEFI, UEFIVars: "/tmp/vars.fd", Disks: disks},
		"a kernel too":    {Board: b, UEFIVars: "/tmp/vars.fd", Disks: disks, Kernel: "vmlinuz", Initramfs: "initrd"},
		"a cmdline too":   {Board: b, UEFIVars: "/tmp/vars.fd", Disks: disks, Cmdline: []string{"quiet"}},
		"no disk":         {Board: b, UEFIVars: "/tmp/vars.fd"},
		"comma in vars":   {Board: b, UEFIVars: "/tmp/a,b.fd", Disks: disks},
	} {
		if _, err := Args(opts); err == nil {
			t.Errorf("%s: Args accepted %+v", name, opts)
		}
	}
}

// TestUEFIVarsPersist: the first Start copies the board's template to the VM's variable
// store; a later Start keeps what the firmware wrote there, and never touches the template.
func TestUEFIVarsPersist(t *testing.T) {
	fw := t.TempDir()
	b := uefiBoard(t, fw)
	b.QEMU.Binary = os.Args[0] // TestMain's fake QEMU
	template := []byte("template NVRAM")
	if err := os.WriteFile(b.QEMU.UEFI.Vars, template, 0o444); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_QEMU_CONSOLE", "BdsDxe: starting Boot0001")
	t.Setenv("FAKE_QEMU_EXIT", "0")
	vars := filepath.Join(t.TempDir(), "vars.fd")
	start := func() {
		t.Helper()
		vm, err := Start(context.Background(), Options{Board: b, UEFIVars: vars, Disks: []Disk{{Path: "/tmp/disk.img"}}, Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := vm.Wait(); code != 0 || err != nil {
			t.Fatalf("Wait = %d, %v", code, err)
		}
	}
	start()
	got, err := os.ReadFile(vars)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(template) {
		t.Fatalf("first start: vars %q, want the template %q", got, template)
	}
	// What the firmware would have written (boot options) before the VM stopped.
	written := []byte("NVRAM with Boot0001")
	if err := os.WriteFile(vars, written, 0o644); err != nil {
		t.Fatal(err)
	}
	start()
	if got, _ := os.ReadFile(vars); string(got) != string(written) {
		t.Errorf("second start: vars %q, want what the first run left, %q", got, written)
	}
	if got, _ := os.ReadFile(b.QEMU.UEFI.Vars); string(got) != string(template) {
		t.Errorf("the template changed to %q", got)
	}
	if entries, _ := os.ReadDir(filepath.Dir(vars)); len(entries) != 1 {
		t.Errorf("the vars directory holds %d files, want only vars.fd", len(entries))
	}
}

// TestLinesTimeTheirParts: a line written in parts seconds apart (SeaBIOS's "Booting from
// ROM.." and, with no line break, PID 1's first line) dates each part by its arrival; a
// line of one read is dated by its end, and several lines in one read share its time.
func TestLinesTimeTheirParts(t *testing.T) {
	var clock time.Duration
	console := &timedReader{clock: &clock, chunks: []timedChunk{
		{100 * time.Millisecond, "SeaBIOS\r\n"},
		{350 * time.Millisecond, "Booting from ROM.."},
		{3 * time.Second, "\x1bcEDGEGATE-BOOT-START\r\nEDGEGATE-MODULES-LOADED n=1\r\n"},
		{4 * time.Second, "no end"},
	}}
	var lines []Line
	scanLines(console, func() time.Duration { return clock }, func(l Line) { lines = append(lines, l) })
	want := []struct {
		text   string
		marker string
		at     time.Duration
	}{
		{"SeaBIOS", "SeaBIOS", 100 * time.Millisecond},
		{"Booting from ROM..\x1bcEDGEGATE-BOOT-START", "Booting", 350 * time.Millisecond},
		{"Booting from ROM..\x1bcEDGEGATE-BOOT-START", "EDGEGATE-BOOT-START", 3 * time.Second},
		{"EDGEGATE-MODULES-LOADED n=1", "EDGEGATE", 3 * time.Second},
		{"no end", "no", 4 * time.Second},
	}
	texts := []string{}
	for _, l := range lines {
		texts = append(texts, l.Text)
	}
	if len(lines) != 4 {
		t.Fatalf("lines %q", texts)
	}
	for _, w := range want {
		i := slices.IndexFunc(lines, func(l Line) bool { return l.Text == w.text })
		if i < 0 {
			t.Errorf("no line %q in %q", w.text, texts)
			continue
		}
		if at := lines[i].ArrivedAt(strings.Index(w.text, w.marker)); at != w.at {
			t.Errorf("%q in %q arrived at %v, want %v", w.marker, w.text, at, w.at)
		}
	}
	if lines[1].At != 3*time.Second {
		t.Errorf("the split line ended at %v, want 3s", lines[1].At)
	}
}

// timedReader returns one chunk per Read, setting *clock to the chunk's time first.
type timedReader struct {
	clock  *time.Duration
	chunks []timedChunk
}

type timedChunk struct {
	at   time.Duration
	text string
}

func (r *timedReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	c := r.chunks[0]
	r.chunks = r.chunks[1:]
	*r.clock = c.at
	return copy(p, c.text), nil
}
