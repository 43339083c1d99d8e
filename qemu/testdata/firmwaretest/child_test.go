package firmwaretest

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// daemonProcess finds the daemon PID 1 runs: its child whose argv[0] is edgegate-daemon.
func daemonProcess(t *testing.T) int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if argv0, _, _ := bytes.Cut(cmdline, []byte{0}); string(argv0) == "edgegate-daemon" {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("processes named edgegate-daemon: %v, want one", found)
	}
	return found[0]
}

// TestDaemonIsAChild: the daemon is PID 1's child process, the same binary, in the cgroup
// edgegate-daemon with a memory limit, the OOM killer set to end it whole, and a Go memory
// limit under the cgroup's.
func TestDaemonIsAChild(t *testing.T) {
	pid := daemonProcess(t)
	proc := func(name string) string {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	stat := proc("stat")
	// pid (comm) state ppid ...
	fields := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(fields) < 2 || fields[1] != "1" {
		t.Errorf("the daemon's parent: %q, want PID 1", fields)
	}
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil || exe != "/init" {
		t.Errorf("the daemon's executable: %q, %v; want /init", exe, err)
	}
	if cg := strings.TrimSpace(proc("cgroup")); cg != "0::/edgegate-daemon" {
		t.Errorf("the daemon's cgroup: %q, want 0::/edgegate-daemon", cg)
	}
	if cg := strings.TrimSpace(readFile(t, "/proc/1/cgroup")); cg != "0::/" {
		t.Errorf("PID 1's cgroup: %q, want the root", cg)
	}
	max, err := strconv.ParseInt(strings.TrimSpace(readFile(t, "/sys/fs/cgroup/edgegate-daemon/memory.max")), 10, 64)
	if err != nil || max <= 0 {
		t.Fatalf("memory.max: %d, %v; want a limit", max, err)
	}
	if g := strings.TrimSpace(readFile(t, "/sys/fs/cgroup/edgegate-daemon/memory.oom.group")); g != "1" {
		t.Errorf("memory.oom.group = %q, want 1", g)
	}
	var limit string
	for _, kv := range strings.Split(proc("environ"), "\x00") {
		if v, ok := strings.CutPrefix(kv, "GOMEMLIMIT="); ok {
			limit = v
		}
	}
	if gm, err := strconv.ParseInt(limit, 10, 64); err != nil || gm <= 0 || gm >= max {
		t.Errorf("GOMEMLIMIT=%q with memory.max %d; want a limit below it", limit, max)
	}
	t.Logf("daemon pid %d, memory.max %d MiB, GOMEMLIMIT %s", pid, max>>20, limit)
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
