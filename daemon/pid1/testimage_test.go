package pid1

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// guestTest stands in for a Go test binary: it prints -test.v-style lines and its
// arguments, and exits 3.
const guestTest = `#!/bin/sh
echo "=== RUN   TestInGuest"
echo "args: $*"
/bin/sleep 0.2
echo "--- FAIL: TestInGuest (0.20s)"
exit 3
`

// between returns the console lines after the line start and before the line end.
func between(console, start, end string) string {
	_, after, ok := strings.Cut(console, start+"\n")
	if !ok {
		return "(no " + start + ")"
	}
	before, _, ok := strings.Cut(after, end)
	if !ok {
		return "(no " + end + ")"
	}
	return before
}

// TestTestImage: the test runs after EDGEGATE-READY with its arguments, has the console
// to itself between the markers, and the machine powers off after it.
func TestTestImage(t *testing.T) {
	tm := newTestMachine(t, map[string]string{
		"/proc/cmdline": "console=ttyS0 edgegate.test=1",
		testBinary:      guestTest,
		testArgsFile:    "-test.v -test.run TestInGuest\n",
	})
	m := tm.boot()
	daemon := Component{Name: "daemon", Run: func(ctx context.Context) error {
		m.Log().Info("first sync done")
		m.Ready()
		// Log while the test runs: the line must wait until the test is over.
		for {
			b, _ := os.ReadFile(tm.sys.Console.Name())
			if strings.Contains(string(b), "=== RUN") {
				break
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(5 * time.Millisecond):
			}
		}
		m.Log().Info("logged during the test")
		<-ctx.Done()
		return nil
	}}
	wait := run(m, daemon)
	if cmd := <-tm.power.done; cmd != unix.LINUX_REBOOT_CMD_POWER_OFF {
		t.Errorf("reboot(%#x), want power-off after the test", cmd)
	}
	wait()
	con := tm.console()
	wantOut := "=== RUN   TestInGuest\nargs: -test.v -test.run TestInGuest\n--- FAIL: TestInGuest (0.20s)\n"
	if diff := cmp.Diff(wantOut, between(con, "EDGEGATE-TEST-BEGIN", "EDGEGATE-TEST-EXIT 3\n")); diff != "" {
		t.Errorf("the test's output between the markers (-want +got):\n%s\nconsole:\n%s", diff, con)
	}
	wantMarkers := "EDGEGATE-BOOT-START\nEDGEGATE-MODULES-LOADED n=0 failed=0\nEDGEGATE-READY\nEDGEGATE-TEST-BEGIN\nEDGEGATE-TEST-EXIT 3\nEDGEGATE-POWEROFF\n"
	if diff := cmp.Diff(wantMarkers, tm.markers()); diff != "" {
		t.Errorf("markers (-want +got):\n%s", diff)
	}
	if !strings.Contains(between(con, "EDGEGATE-TEST-EXIT 3", "EDGEGATE-POWEROFF"), `msg="logged during the test"`) {
		t.Errorf("a log line from during the test is not after EDGEGATE-TEST-EXIT:\n%s", con)
	}
}

// TestTestImageWithoutDaemon: with no component (the daemon could not be configured) the
// test runs right after boot.
func TestTestImageWithoutDaemon(t *testing.T) {
	runTestImageAlone(t, "edgegate.test=1")
}

func TestTestImageWithoutTestBinary(t *testing.T) {
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.test=1"})
	m := tm.boot()
	wait := run(m)
	<-tm.power.done
	wait()
	if !strings.Contains(tm.markers(), "EDGEGATE-TEST-BEGIN\nEDGEGATE-TEST-EXIT 127\nEDGEGATE-POWEROFF\n") {
		t.Errorf("markers:\n%s", tm.markers())
	}
}

// TestPanicsWithoutDaemon: with no daemon to panic the test still runs, and the console
// says why nothing panicked.
func TestPanicsWithoutDaemon(t *testing.T) {
	tm := runTestImageAlone(t, "edgegate.test=1 edgegate.test.panic=1")
	if !strings.Contains(tm.console(), `msg="edgegate.test.panic: no daemon runs; nothing to panic" panics=1`) {
		t.Errorf("console:\n%s", tm.console())
	}
}

// runTestImageAlone boots a test image whose test prints "ok" with cmdline and no
// component, until its power-off, and checks the test's output.
func runTestImageAlone(t *testing.T, cmdline string) *testMachine {
	t.Helper()
	tm := newTestMachine(t, map[string]string{
		"/proc/cmdline": cmdline,
		testBinary:      "#!/bin/sh\necho ok\n",
	})
	wait := run(tm.boot())
	<-tm.power.done
	wait()
	if got := between(tm.console(), "EDGEGATE-TEST-BEGIN", "EDGEGATE-TEST-EXIT 0\n"); got != "ok\n" {
		t.Errorf("test output %q, want \"ok\\n\"; console:\n%s", got, tm.console())
	}
	return tm
}
