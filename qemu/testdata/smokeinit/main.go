// Command smokeinit is a stand-in PID 1 for the harness's own boot test, so that the
// initramfs builder, the kernels and the harness are proven without the daemon: it prints
// the firmware contract's console markers, loads the modules of the load order file with
// finit_module, runs /edgegate-test when booted with edgegate.test=1, and powers off.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	fmt.Println("EDGEGATE-BOOT-START")
	for _, m := range []struct{ fstype, target string }{
		{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"}, {"tmpfs", "/tmp"},
	} {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			fmt.Println("smokeinit:", err)
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, 0, ""); err != nil {
			fmt.Println("smokeinit: mount", m.target+":", err)
		}
	}
	fmt.Printf("smokeinit: pid %d\n", os.Getpid())
	loadModules()
	if cmdline, err := os.ReadFile("/proc/cmdline"); err == nil && hasArg(string(cmdline), "edgegate.test=1") {
		runTest()
	}
	fmt.Println("EDGEGATE-POWEROFF")
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Println("smokeinit: power off:", err)
	}
	select {}
}

func loadModules() {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		fmt.Println("smokeinit: uname:", err)
		return
	}
	dir := path.Join("/lib/modules", unix.ByteSliceToString(uts.Release[:]))
	f, err := os.Open(path.Join(dir, "edgegate.order"))
	if err != nil {
		fmt.Println("smokeinit:", err)
		return
	}
	defer f.Close()
	start := time.Now()
	n, failed := 0, 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		rel := strings.TrimSpace(s.Text())
		if rel == "" {
			continue
		}
		n++
		switch err := load(path.Join(dir, rel)); {
		case errors.Is(err, unix.ENODEV):
			// The module's init found none of its hardware (efivarfs without UEFI): the
			// module is fine, the machine lacks the device.
			fmt.Printf("smokeinit: module %s: no device\n", rel)
		case err != nil:
			failed++
			fmt.Printf("smokeinit: module %s: %v\n", rel, err)
		}
	}
	fmt.Printf("smokeinit: modules took %v\n", time.Since(start).Round(time.Millisecond))
	fmt.Printf("EDGEGATE-MODULES-LOADED n=%d failed=%d\n", n, failed)
}

func load(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

func runTest() {
	args, err := os.ReadFile("/etc/edgegate/test")
	if err != nil {
		fmt.Println("smokeinit:", err)
	}
	fmt.Println("EDGEGATE-TEST-BEGIN")
	cmd := exec.Command("/edgegate-test", strings.Fields(string(args))...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = os.Stdout, os.Stdout, "/tmp"
	code := 0
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Println("smokeinit: test:", err)
		}
		code = cmd.ProcessState.ExitCode()
	}
	fmt.Printf("EDGEGATE-TEST-EXIT %d\n", code)
}

func hasArg(cmdline, arg string) bool {
	for _, f := range strings.Fields(cmdline) {
		if f == arg {
			return true
		}
	}
	return false
}
