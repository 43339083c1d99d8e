package pid1

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
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

// injectPanics makes the daemon panic for edgegate.test.panic=<n>, so a boot test can
// watch the supervisor restart it while PID 1 and the kernel's rules stay. It returns the
// components with the daemon wrapped, and what the test waits for instead of ready: the
// first sync of the daemon's run after its last panic.
func (m *Machine) injectPanics(components []Component, ready <-chan struct{}) ([]Component, <-chan struct{}) {
	i := slices.IndexFunc(components, func(c Component) bool { return c.Name == daemonComponent })
	if i < 0 {
		m.log.Warn("edgegate.test.panic: no daemon runs; nothing to panic", "panics", m.cmdline.TestPanics)
		return components, ready
	}
	done := make(chan struct{})
	components = slices.Clone(components)
	components[i] = m.panicAfterSync(components[i], m.cmdline.TestPanics, done)
	return components, done
}

// panicAfterSync wraps a component that calls Ready after its syncs: each of its first n
// runs is stopped after its first sync, then the supervisor's goroutine panics in its
// place, as a bug in the component would. The run after the last panic is left alone, and
// done closes at its first sync.
func (m *Machine) panicAfterSync(c Component, n int, done chan<- struct{}) Component {
	panics := 0
	var doneOnce sync.Once
	return Component{Name: c.Name, Run: func(ctx context.Context) error {
		// Taken before the run starts, so its first sync cannot be missed; the previous
		// run has ended, so no sync of that one can close it.
		synced := m.nextSync()
		if panics >= n {
			go func() {
				select {
				case <-synced:
					doneOnce.Do(func() { close(done) })
				case <-ctx.Done():
				}
			}()
			return c.Run(ctx)
		}
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		ended := make(chan error, 1)
		go func() { ended <- Protect(func() error { return c.Run(rctx) }) }()
		select {
		case <-synced:
		case err := <-ended:
			// It stopped on its own (or the machine is stopping): the supervisor deals
			// with that as without the injection.
			return err
		}
		stop()
		<-ended
		panics++
		panic(fmt.Sprintf("edgegate.test.panic: deliberate panic %d of %d after a sync", panics, n))
	}}
}
