package labtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/edgegate/edgegate/lab"
)

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// Main runs a test binary's tests and then removes the daemon binary DaemonBinary built for
// them. Test packages that start the daemon call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// GuestMain is Main for a test binary that runs inside a QEMU guest booted from the
// firmware (qemu/testdata/*test): the lab's gateway daemon is the firmware's own binary,
// /init, run as a plain daemon, and every prerequisite is there, so a lab that cannot be
// built fails rather than skips.
func GuestMain(m *testing.M) {
	os.Setenv("EDGEGATE_BIN", "/init")
	os.Setenv("CI", "true")
	Main(m)
}

// DaemonBinary returns the edgegate binary to test: $EDGEGATE_BIN when set, else ./daemon
// of this module built once per test binary.
func DaemonBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("EDGEGATE_BIN"); p != "" {
		return p
	}
	built.once.Do(func() {
		built.path, built.err = buildDaemon()
	})
	if built.err != nil {
		t.Fatalf("build edgegate: %v", built.err)
	}
	return built.path
}

func buildDaemon() (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if built.dir, err = os.MkdirTemp("", "edgegate-lab-"); err != nil {
		return "", fmt.Errorf("temp dir: %w", err)
	}
	path := filepath.Join(built.dir, "edgegate")
	cmd := exec.Command("go", "build", "-o", path, "./daemon")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./daemon in %s: %w\n%s", root, err, out)
	}
	return path, nil
}

// Daemon is a daemon a test started: stopping or killing it reports to the test.
type Daemon struct {
	*lab.Daemon
	ended bool
}

// StartDaemon starts DaemonBinary with args inside h's namespace (lab.Host.StartDaemon, its
// files in the test's temporary directory), copies its log into the test log, waits until
// it is healthy and has synced, and registers Stop with t.Cleanup.
func StartDaemon(t testing.TB, h *lab.Host, args ...string) *Daemon {
	t.Helper()
	bin := DaemonBinary(t)
	who := "edgegate"
	if h.Name != "gateway" {
		who = "edgegate on " + h.Name
	}
	ld, err := h.StartDaemon(bin, args, lab.DaemonOptions{
		Dir: t.TempDir(),
		Log: func(line string) { t.Logf("%s: %s", who, line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Daemon: ld}
	t.Cleanup(func() { d.Stop(t) })
	t.Logf("started edgegate (pid %d): %s %s", d.PID, bin, strings.Join(d.Args, " "))
	return d
}

// Kill ends the daemon at once with SIGKILL (lab.Daemon.Kill).
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	if d.ended {
		return
	}
	d.ended = true
	if err := d.Daemon.Kill(); err != nil {
		t.Error(err)
	}
}

// Stop ends the daemon (lab.Daemon.Stop) and logs how; a daemon that had exited on its own
// fails the test. Stop is idempotent.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	if d.ended {
		return
	}
	d.ended = true
	if err := d.Daemon.Stop(); err != nil {
		t.Errorf("%v during the test", err)
		return
	}
	if _, err := d.Exited(); err != nil {
		t.Logf("edgegate (pid %d) stopped: %v", d.PID, err)
	} else {
		t.Logf("edgegate (pid %d) stopped cleanly", d.PID)
	}
}
