package pid1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	cgroupRoot = "/sys/fs/cgroup"
	// daemonCgroup is the daemon's cgroup, below the root; PID 1 stays in the root.
	daemonCgroup = "edgegate-daemon"
	// minMemoryReserve is what the default limit leaves to PID 1, the kernel and the page
	// cache at the least; an eighth of the memory when that is more.
	minMemoryReserve = 64 << 20
)

// cgroup is the daemon's cgroup (v2).
type cgroup struct {
	dir string
	fd  int   // the directory, for clone3's CLONE_INTO_CGROUP
	max int64 // memory.max in bytes; 0 for none
}

// setupCgroup creates the daemon's cgroup below root with the memory controller, memory.max
// set to limit (0: no limit) and memory.oom.group set, so the OOM killer ends the whole
// daemon rather than one of its threads' victims.
func setupCgroup(root string, limit int64) (*cgroup, error) {
	// Already enabled is fine; a kernel without the controller is not.
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
		ctrl, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
		if !strings.Contains(string(ctrl), "memory") {
			return nil, fmt.Errorf("enabling the memory controller: %w", err)
		}
	}
	dir := filepath.Join(root, daemonCgroup)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	max := "max"
	if limit > 0 {
		max = strconv.FormatInt(limit, 10)
	}
	for _, f := range []struct{ name, value string }{{"memory.max", max}, {"memory.oom.group", "1"}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.value), 0); err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	// Without swap accounting the file is missing; with it, the limit must not be dodged.
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &cgroup{dir: dir, fd: fd, max: limit}, nil
}

// oomKills is the cgroup's count of processes the OOM killer ended; 0 without a cgroup.
func (c *cgroup) oomKills() int {
	if c == nil {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(c.dir, "memory.events"))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// dirFD is the cgroup directory's file descriptor; -1 without a cgroup.
func (c *cgroup) dirFD() int {
	if c == nil {
		return -1
	}
	return c.fd
}

// limit is the memory limit in bytes; 0 without a cgroup or a limit.
func (c *cgroup) limit() int64 {
	if c == nil {
		return 0
	}
	return c.max
}

// daemonMemoryLimit is edgegate.daemon.memory=, else the machine's memory less a reserve
// for PID 1, the kernel and the page cache.
func (m *Machine) daemonMemoryLimit() int64 {
	if m.cmdline.DaemonMemory != 0 {
		return max(m.cmdline.DaemonMemory, 0) // negative: "max", no limit
	}
	total := memTotal(m.path("/proc/meminfo"))
	if total <= 0 {
		return 0
	}
	return total - max(total/8, minMemoryReserve)
}

// memTotal is MemTotal from /proc/meminfo in bytes; 0 when unreadable.
func memTotal(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// parseBytes parses a size with an optional K, M or G suffix (powers of 1024); "max" is -1.
func parseBytes(s string) (int64, error) {
	if s == "max" {
		return -1, nil
	}
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("not a size (bytes with an optional K, M or G, or max)")
	}
	return n * mult, nil
}

// formatBytes prints a byte count in MiB, or "none" for 0.
func formatBytes(n int64) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
