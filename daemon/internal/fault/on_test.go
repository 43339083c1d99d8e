//go:build egfault

package fault

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
)

// out is what Point wrote to stderr.
var out testkit.Buffer

// allocChild names the directory of TestAlloc's child, which allocates until killed and
// so cannot clean up a directory of its own.
const allocChild = "EGFAULT_TEST_ALLOC_CHILD"

func TestMain(m *testing.M) {
	if d := os.Getenv(allocChild); d != "" {
		dir = d
		dirs = []string{d}
		os.Exit(m.Run())
	}
	var err error
	if dir, err = os.MkdirTemp("", "egfault"); err == nil {
		dataDir, err = os.MkdirTemp("", "egfault-data")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dirs, stderr = []string{dir, dataDir}, &out
	code := m.Run()
	_ = os.RemoveAll(dir)
	_ = os.RemoveAll(dataDir)
	os.Exit(code)
}

// dir and dataDir stand for Dir and DataDir.
var dir, dataDir string

func arm(t *testing.T, point, content string) { armIn(t, dir, point, content) }

func armIn(t *testing.T, d, point, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(d, point), []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(filepath.Join(d, point)) })
}

// seen waits until the watcher has read point's file.
func seen(t *testing.T, point string) {
	t.Helper()
	start()
	testkit.WaitFor(t, point+" armed", 5*time.Second, 10*time.Millisecond, func() bool {
		_, ok := (*armed.Load())[point]
		return ok
	})
}

func gone(point string) bool {
	_, err := os.Stat(filepath.Join(dir, point))
	return os.IsNotExist(err)
}

// caught calls Point and returns what it panicked with, nil when it returned.
func caught(point string) (v any) {
	defer func() { v = recover() }()
	Point(point)
	return nil
}

// injects calls Point and fails t unless it panicked with point's fault.
func injects(t *testing.T, point string) {
	t.Helper()
	if v := caught(point); v != "egfault: "+point {
		t.Fatalf("Point panicked with %v, want egfault: %s", v, point)
	}
}

func TestPanicOnce(t *testing.T) {
	arm(t, "t-panic", string(Panic))
	seen(t, "t-panic")
	injects(t, "t-panic")
	if !gone("t-panic") {
		t.Error("the injected fault's file is still there")
	}
	if !strings.Contains(out.String(), "egfault: injecting panic at t-panic\n") {
		t.Errorf("stderr does not say the injection:\n%s", out.String())
	}
	if v := caught("t-panic"); v != nil {
		t.Errorf("injected twice: %v", v)
	}
}

// TestDataDir: a fault armed on the data partition is injected and removed from there; one
// armed in Dir at the same time is taken first.
func TestDataDir(t *testing.T) {
	arm(t, "t-data", string(Panic)) // first: a scan between the two must not see DataDir's alone
	armIn(t, dataDir, "t-data", string(Panic))
	seen(t, "t-data")
	injects(t, "t-data")
	if !gone("t-data") {
		t.Fatal("the fault in Dir was not the one taken")
	}
	testkit.WaitFor(t, "the fault in DataDir armed", 5*time.Second, 10*time.Millisecond, func() bool {
		return (*armed.Load())["t-data"].file == filepath.Join(dataDir, "t-data")
	})
	injects(t, "t-data")
	if _, err := os.Stat(filepath.Join(dataDir, "t-data")); !os.IsNotExist(err) {
		t.Errorf("the injected fault's file is still on the data partition: %v", err)
	}
	if v := caught("t-data"); v != nil {
		t.Errorf("injected a third time: %v", v)
	}
}

// TestOneCallerWins: of the goroutines that find a point armed at once, one injects.
func TestOneCallerWins(t *testing.T) {
	arm(t, "t-race", string(Panic))
	seen(t, "t-race")
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		panics int
		ready  = make(chan struct{})
	)
	for range 8 {
		wg.Go(func() {
			<-ready
			if caught("t-race") != nil {
				mu.Lock()
				panics++
				mu.Unlock()
			}
		})
	}
	close(ready)
	wg.Wait()
	if panics != 1 {
		t.Errorf("%d callers injected, want 1", panics)
	}
}

func TestBlock(t *testing.T) {
	arm(t, "t-block", string(Block))
	seen(t, "t-block")
	returned := make(chan struct{})
	go func() { // blocks for the rest of the test binary's life
		Point("t-block")
		close(returned)
	}()
	testkit.WaitFor(t, "the fault taken", 5*time.Second, 10*time.Millisecond, func() bool { return gone("t-block") })
	select {
	case <-returned:
		t.Fatal("Point returned from a block")
	case <-time.After(300 * time.Millisecond):
	}
	if !strings.Contains(out.String(), "egfault: injecting block at t-block\n") {
		t.Errorf("stderr does not say the injection:\n%s", out.String())
	}
}

// TestNotYetArmed: an empty file is still being written and a dot file is yet to be
// renamed into place; neither arms its point, and a content that is no kind is refused.
func TestNotYetArmed(t *testing.T) {
	arm(t, "t-typo", "explode")
	testkit.WaitFor(t, "the unknown kind refused", 5*time.Second, 10*time.Millisecond, func() bool { return gone("t-typo") })
	if want := "egfault: ignoring " + filepath.Join(dir, "t-typo") + ": unknown kind explode (panic, block or alloc)\n"; !strings.Contains(out.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, out.String())
	}
	if err := os.WriteFile(filepath.Join(dir, "t-empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	arm(t, ".t-dot", string(Panic))
	start()
	time.Sleep(3 * pollEvery)
	for _, p := range []string{"t-typo", "t-empty", ".t-dot"} {
		if v := caught(p); v != nil {
			t.Errorf("%s injected: %v", p, v)
		}
	}
	if gone("t-empty") || gone(".t-dot") {
		t.Error("the watcher removed a file not yet written")
	}
	arm(t, "t-empty", string(Panic))
	seen(t, "t-empty")
	if v := caught("t-empty"); v == nil {
		t.Error("a file armed once written is not injected")
	}
}

func TestUnarmedPointDoesNotAllocate(t *testing.T) {
	start()
	if n := testing.AllocsPerRun(100, func() { Point(DashboardSampler) }); n != 0 {
		t.Errorf("Point allocates %v times per call", n)
	}
}

// TestAlloc runs the test binary again as a child that injects alloc, and waits for the
// child's resident memory to pass 256 MiB: the pages are touched, not only reserved.
func TestAlloc(t *testing.T) {
	if os.Getenv(allocChild) != "" {
		arm(t, "t-alloc", string(Alloc))
		Point("t-alloc")
		t.Fatal("Point returned from alloc")
	}
	var stderr testkit.Buffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestAlloc$")
	cmd.Env = append(os.Environ(), allocChild+"="+t.TempDir())
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	const want = 256 << 20
	testkit.WaitFor(t, "the child's memory to grow", 60*time.Second, 20*time.Millisecond, func() bool {
		return residentBytes(t, cmd.Process.Pid) >= want
	})
	if !strings.Contains(stderr.String(), "egfault: injecting alloc at t-alloc\n") {
		t.Errorf("the child's stderr does not say the injection:\n%s", stderr.String())
	}
}

// residentBytes reads VmRSS from /proc/<pid>/status.
func residentBytes(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		if kb, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS: %v", err)
			}
			return n << 10
		}
	}
	return 0
}
