package firmwaretest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The watchdog boots' side (qemu/watchdog_test.go): softdog is the watchdog, its timeout
// set on the kernel command line; the image has the fault hook.

// TestWatchdogHang deadlocks every run of the daemon at its first sync, so restarting it
// does not help: PID 1 must stop feeding the watchdog, and the board resets. The test never
// ends by itself; the reset ends it (the host checks the console), or its time bound.
func TestWatchdogHang(t *testing.T) {
	// PID 1 holds its own log lines off the console while this test runs, and the reset
	// comes before they would be shown: echo the ones the host waits for from the kernel log.
	go echoKernelLog(t, "the daemon's run ended", "hardware watchdog is no longer fed")
	changeManifests(t, 0) // the running daemon syncs once more, into the deadlock
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(faultDir, "sync")); os.IsNotExist(err) {
			arm(t, faultCase{point: "sync", kind: "block"})
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatal("no reset within 5 minutes of deadlocking the daemon at every start")
}

// TestWatchdogHealthy: a healthy daemon keeps the watchdog fed for ten times its timeout,
// its first run all along.
func TestWatchdogHealthy(t *testing.T) {
	before := daemonMetrics(t)
	time.Sleep(50 * time.Second) // softdog.soft_margin=5 on this boot
	after := daemonMetrics(t)
	if before["run"] != 1 || after["run"] != 1 {
		t.Errorf("the daemon's run went from %v to %v; want its first run all along", before["run"], after["run"])
	}
}

// echoKernelLog prints PID 1's kernel log records that contain one of the words, from the
// log's start, to the console as they come.
func echoKernelLog(t *testing.T, words ...string) {
	f, err := os.Open("/dev/kmsg")
	if err != nil {
		t.Errorf("kernel log: %v", err)
		return
	}
	defer f.Close()
	buf := make([]byte, 8192)
	for {
		n, err := f.Read(buf) // one record a read
		if errors.Is(err, unix.EPIPE) {
			continue // records were overwritten before we read them
		}
		if err != nil {
			return
		}
		_, msg, _ := strings.Cut(string(buf[:n]), ";")
		msg, _, _ = strings.Cut(msg, "\n")
		if strings.HasPrefix(msg, "edgegate: ") && slices.ContainsFunc(words, func(w string) bool { return strings.Contains(msg, w) }) {
			fmt.Println("kmsg:", msg)
		}
	}
}
