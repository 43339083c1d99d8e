package pid1

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"time"
)

// A test image (kernel command line edgegate.test=1) carries a Go test binary and its
// argument line. PID 1 runs it once the machine is ready, with the console to itself,
// then powers off: the host harness reads the result between two markers.
const (
	testBinary   = "/edgegate-test"
	testArgsFile = "/etc/edgegate/test"
	// readyWait bounds the wait for EDGEGATE-READY: a daemon that never gets ready still
	// lets the test run and say what is wrong, rather than leave the harness to time out.
	readyWait = 2 * time.Minute
)

// runTest runs the test binary with the arguments from testArgsFile (split on white space)
// and returns its exit code. Its output is the console's between EDGEGATE-TEST-BEGIN and
// EDGEGATE-TEST-EXIT <code>; PID 1's own log lines wait until after that.
func (m *Machine) runTest() int {
	var args []string
	b, err := os.ReadFile(m.path(testArgsFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		m.log.Error("reading the test's arguments failed", "file", testArgsFile, "err", err)
	default:
		args = strings.Fields(string(b))
	}
	m.log.Info("running the test image's test", "binary", testBinary, "args", args)
	// Held first: no log line may come between the marker and the test's first line.
	m.console.hold()
	m.console.marker("EDGEGATE-TEST-BEGIN")
	code := 127
	pid, exited, err := children.spawn(m.log, m.path(testBinary), append([]string{testBinary}, args...), &os.ProcAttr{
		Dir:   m.path("/"),
		Env:   []string{"HOME=/", "PATH=/", "TMPDIR=/tmp"},
		Files: []*os.File{nil, m.console.out, m.console.out},
	})
	if err != nil {
		m.log.Error("starting the test binary failed", "err", err)
	} else {
		code = exitCode(<-exited)
		m.log.Info("the test binary exited", "pid", pid, "code", code)
	}
	m.console.marker("EDGEGATE-TEST-EXIT %d", code)
	m.console.release()
	return code
}
