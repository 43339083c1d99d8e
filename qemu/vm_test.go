package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
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

func TestArgs(t *testing.T) {
	b, err := board.Load("qemu-arm64")
	if err != nil {
		t.Fatal(err)
	}
	args, err := Args(Options{Board: b, Kernel: "vmlinuz", Initramfs: "initrd", Cmdline: []string{"edgegate.test=1"}})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(args, " ")
	for _, want := range []string{
		"-M virt -accel tcg -cpu cortex-a57 -m 512", "-nographic -no-reboot",
		"-kernel vmlinuz -initrd initrd", "console=ttyAMA0 panic=-1 quiet edgegate.test=1", "-nic none",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("args %q lack %q", got, want)
		}
	}
	args, err = Args(Options{Board: b, NICs: []NIC{
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
	args, err := Args(Options{Board: b, Disks: []Disk{{Path: "/tmp/data.img"}, {Path: "/tmp/ro.img", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(args, " ")
	if want := "-drive file=/tmp/data.img,format=raw,if=virtio -drive file=/tmp/ro.img,format=raw,if=virtio,readonly=on"; !strings.Contains(got, want) {
		t.Errorf("args %q lack %q", got, want)
	}
	for _, p := range []string{"", "/tmp/a,b.img"} {
		if _, err := Args(Options{Board: b, Disks: []Disk{{Path: p}}}); err == nil {
			t.Errorf("disk %q accepted", p)
		}
	}
}
