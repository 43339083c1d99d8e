package pid1

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/pid1/ctl"
)

// TestMain makes the test binary also the daemon PID 1 starts: run with argv[0]
// DaemonArgv0, it is a stand-in daemon that behaves as testDaemonEnv says.
func TestMain(m *testing.M) {
	if IsDaemon() {
		testDaemon(os.Getenv(testDaemonEnv))
		return
	}
	os.Exit(m.Run())
}

const testDaemonEnv = "EGPID1_TEST_DAEMON"

// testDaemon is the stand-in daemon. Modes:
//   - serve: syncs, reports every 100ms, and exits 0 on SIGTERM;
//   - panic: syncs, then panics on a goroutine of its own;
//   - hang: syncs and reports once, then never again;
//   - stuck: reports its sync loop not live;
//   - exit: exits 3 at once.
func testDaemon(mode string) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, ok := ctl.FromEnv(log)
	if !ok {
		log.Error("no control socket")
		os.Exit(9)
	}
	ctx := context.Background()
	term := make(chan os.Signal, 1)
	signal.Notify(term, unix.SIGTERM)
	log.Info("test daemon started", "mode", mode)
	reported := false
	report := func(live bool) {
		r := ctl.Report{Components: []ctl.Component{{Name: "sync", Live: live, Detail: "running for 3m0s"}}}
		ch, err := c.Report(ctx, r)
		if err != nil {
			log.Error("report failed", "err", err)
			return
		}
		if !reported {
			reported = true
			log.Info("first answer", "run", ch.Run, "restarts", fmt.Sprint(ch.Restarts))
		}
	}
	switch mode {
	case "exit":
		os.Exit(3)
	case "stuck":
		for {
			report(false)
			time.Sleep(100 * time.Millisecond)
		}
	}
	report(true)
	if err := c.Ready(ctx); err != nil {
		log.Error("ready failed", "err", err)
	}
	switch mode {
	case "panic":
		go func() { panic("test daemon: deliberate") }()
		select {}
	case "hang":
		select {}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	for {
		select {
		case <-term:
			log.Info("test daemon stopping")
			os.Exit(0)
		case <-tick.C:
			report(true)
		}
	}
}

// childMachine boots a test machine whose daemon's runs behave as modes says, one mode a
// run (the last mode for the runs after), with a hang timeout of one second.
func childMachine(t *testing.T, modes ...string) (*testMachine, *Machine, *daemonProc) {
	t.Helper()
	tm := newTestMachine(t, map[string]string{"/proc/cmdline": "edgegate.daemon.hang=1s"})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := 0
	tm.sys.Spawn = func(argv, env []string, out *os.File, cgroupFD int) (int, <-chan unix.WaitStatus, error) {
		mu.Lock()
		mode := modes[min(runs, len(modes)-1)]
		runs++
		mu.Unlock()
		if cgroupFD != -1 {
			t.Errorf("spawned into cgroup fd %d; the fake root has no cgroup", cgroupFD)
		}
		return children.spawn(slog.Default(), exe, argv, &os.ProcAttr{Env: append(env, testDaemonEnv+"="+mode), Files: []*os.File{nil, out, out}})
	}
	m := tm.boot()
	cs := m.daemonComponents(Daemon{Check: func(*Machine, []string) error { return nil }})
	if len(cs) != 2 {
		t.Fatalf("components %v", cs)
	}
	d := m.daemon.Load()
	wait := run(m, cs...)
	t.Cleanup(func() {
		m.PowerOff()
		wait()
	})
	return tm, m, d
}

// child is what PID 1 tells its child now.
func (d *daemonProc) child() ctl.Child { return d.Report(-1, ctl.Report{}) }

// waitChild waits up to half a minute for cond on what PID 1 knows of the daemon's runs.
func waitChild(t *testing.T, d *daemonProc, what string, cond func(ctl.Child) bool) ctl.Child {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := d.child()
		if cond(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; child %+v", what, c)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDaemonChildRestarts: a run that panics on a goroutine of its own and one that exits
// end the child, never PID 1; each is counted by reason, its output reaches the console,
// and the third run serves, reports healthy, and stops on SIGTERM at the power-off without
// counting as a restart.
func TestDaemonChildRestarts(t *testing.T) {
	tm, m, d := childMachine(t, "panic", "exit", "serve")
	c := waitChild(t, d, "the third run's report", func(c ctl.Child) bool { return c.Run == 3 && d.problem() == nil })
	if c.Restarts[ctl.ReasonPanic] != 1 || c.Restarts[ctl.ReasonExit] != 1 || c.LastExit != "exited with status 3" {
		t.Errorf("child %+v, want one panic and one exit with status 3", c)
	}
	con := tm.console()
	for _, want := range []string{
		"panic: test daemon: deliberate",
		`msg="the daemon's run ended" run=1 reason=panic how="exited with status 2: panic: test daemon: deliberate"`,
		`msg="test daemon started" mode=serve`,
	} {
		if !strings.Contains(con, want) {
			t.Errorf("console lacks %q:\n%s", want, con)
		}
	}
	if strings.Count(tm.markers(), "EDGEGATE-READY") != 1 {
		t.Errorf("markers:\n%s", tm.markers())
	}
	if !d.alive() {
		t.Error("two failed runs already stop the watchdog")
	}
	m.PowerOff()
	waitFor(t, "the daemon's stop", func() bool { return strings.Contains(tm.console(), "test daemon stopping") })
	waitFor(t, "the run's end", func() bool { return !d.isChild(d.pidNow()) })
	if c := d.child(); c.Restarts[ctl.ReasonExit] != 1 || len(c.Restarts) != 2 {
		t.Errorf("the stop counted as a restart: %+v", c.Restarts)
	}
}

func (d *daemonProc) pidNow() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pid
}

// TestHungDaemonIsKilled: a child that stops reporting is sent SIGQUIT (its goroutines'
// stacks reach the console) and restarted.
func TestHungDaemonIsKilled(t *testing.T) {
	tm, _, d := childMachine(t, "hang", "serve")
	c := waitChild(t, d, "the second run", func(c ctl.Child) bool { return c.Run == 2 && c.Restarts[ctl.ReasonHang] == 1 })
	if !strings.HasPrefix(c.LastExit, "killed for hanging: no report for") || !slices.Contains(c.LastOutput, "SIGQUIT: quit") {
		t.Errorf("last exit %q, output %q; want the hang and the runtime's SIGQUIT dump", c.LastExit, c.LastOutput)
	}
	con := tm.console()
	if !strings.Contains(con, "SIGQUIT: quit") || !strings.Contains(con, "goroutine ") {
		t.Errorf("no goroutine dump on the console:\n%s", con)
	}
	// The restarted daemon hears of it (for its metrics and its log).
	waitFor(t, "the second run's first answer", func() bool {
		return strings.Contains(tm.console(), `msg="first answer" run=2 restarts=map[hang:1]`)
	})
}

// TestStuckDaemonIsKilled: a child that reports a part of itself not live is killed too.
func TestStuckDaemonIsKilled(t *testing.T) {
	_, _, d := childMachine(t, "stuck", "serve")
	c := waitChild(t, d, "the second run", func(c ctl.Child) bool { return c.Run == 2 && c.Restarts[ctl.ReasonHang] == 1 })
	if want := "killed for hanging: not making progress: sync (running for 3m0s)"; c.LastExit != want {
		t.Errorf("last exit %q, want %q", c.LastExit, want)
	}
}

// TestFutileRestartsStopTheWatchdog: once futileRuns runs in a row were killed for hanging
// before they were stable, restarting stops counting as alive, so the watchdog resets the
// board.
func TestFutileRestartsStopTheWatchdog(t *testing.T) {
	_, _, d := childMachine(t, "hang")
	waitChild(t, d, "futile runs", func(c ctl.Child) bool { return c.Restarts[ctl.ReasonHang] >= futileRuns })
	if d.alive() {
		t.Fatal("still alive after futile restarts")
	}
}

// TestCrashLoopsKeepTheWatchdogFed: a daemon that exits (or panics) at every start is
// restarted for ever, but the board is not reset: a reset cannot cure that, and would take
// the rules that still forward with it.
func TestCrashLoopsKeepTheWatchdogFed(t *testing.T) {
	_, _, d := childMachine(t, "exit")
	waitChild(t, d, "a crash loop", func(c ctl.Child) bool { return c.Restarts[ctl.ReasonExit] >= 2*futileRuns })
	if !d.alive() {
		t.Fatal("a crash loop starved the watchdog")
	}
}

func TestClassify(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "memory.events")
	if err := os.WriteFile(events, []byte("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{cg: &cgroup{dir: dir, fd: -1, max: 256 << 20}}
	exited := func(code int) unix.WaitStatus { return unix.WaitStatus(code << 8) }
	killedBy := func(sig unix.Signal) unix.WaitStatus { return unix.WaitStatus(sig) }
	for _, c := range []struct {
		name      string
		ws        unix.WaitStatus
		killed    string
		oomBefore int
		output    []string
		reason    ctl.Reason
		how       string
	}{
		{"oom", killedBy(unix.SIGKILL), "", 0, nil, ctl.ReasonOOM, "killed by the OOM killer at its cgroup's memory limit (256 MiB)"},
		{"kill without oom", killedBy(unix.SIGKILL), "", 1, nil, ctl.ReasonExit, "killed by SIGKILL"},
		{"hang", exited(2), "no report for 31s", 0, []string{"SIGQUIT: quit"}, ctl.ReasonHang, "killed for hanging: no report for 31s"},
		{"panic", exited(2), "", 0, []string{"level=INFO msg=x", "panic: boom", "", "goroutine 7 [running]:"}, ctl.ReasonPanic, "exited with status 2: panic: boom"},
		{"fatal", exited(2), "", 0, []string{"fatal error: concurrent map writes"}, ctl.ReasonPanic, "exited with status 2: fatal error: concurrent map writes"},
		{"exit", exited(1), "", 0, []string{`level=ERROR msg="edgegate stopped"`}, ctl.ReasonExit, "exited with status 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d.output = c.output
			reason, how := d.classify(c.ws, c.killed, c.oomBefore)
			if reason != c.reason || how != c.how {
				t.Errorf("classify = %s, %q; want %s, %q", reason, how, c.reason, c.how)
			}
		})
	}
}

func TestLineLevel(t *testing.T) {
	for _, c := range []struct {
		line   string
		level  slog.Level
		logged bool
	}{
		{`time=12:00:00.000 level=WARN msg="x"`, slog.LevelWarn, true},
		{`level=DEBUG msg=y`, slog.LevelDebug, true},
		{`time=2026-11-27T12:00:00Z level=INFO msg=z`, slog.LevelInfo, true},
		{"panic: boom", slog.LevelError, false},
		{"goroutine 1 [running]:", slog.LevelError, false},
		{"\tgithub.com/x/y.go:70 +0x2a level=INFO", slog.LevelError, false},
		{`time=x level=LOUD msg=odd`, slog.LevelError, false},
	} {
		if level, logged := lineLevel(c.line); level != c.level || logged != c.logged {
			t.Errorf("lineLevel(%q) = %v, %v; want %v, %v", c.line, level, logged, c.level, c.logged)
		}
	}
}

func TestSetupCgroup(t *testing.T) {
	root := t.TempDir()
	cg, err := setupCgroup(root, 300<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(cg.fd) })
	for file, want := range map[string]string{
		"cgroup.subtree_control":           "+memory",
		daemonCgroup + "/memory.max":       fmt.Sprint(300 << 20),
		daemonCgroup + "/memory.oom.group": "1",
	} {
		if b, err := os.ReadFile(filepath.Join(root, file)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", file, b, err, want)
		}
	}
	if cg.dirFD() < 0 || cg.limit() != 300<<20 {
		t.Errorf("cgroup %+v", cg)
	}
	var none *cgroup
	if none.dirFD() != -1 || none.limit() != 0 || none.oomKills() != 0 {
		t.Error("a missing cgroup is not empty")
	}
}

func TestDaemonMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		cmdline, meminfo string
		want             int64
	}{
		{"", "MemTotal:        1014496 kB\nMemFree: 1 kB\n", 1014496<<10 - 1014496<<10/8},
		{"", "MemTotal:         262144 kB\n", 256<<20 - 64<<20},
		{"edgegate.daemon.memory=300M", "MemTotal: 1014496 kB\n", 300 << 20},
		{"edgegate.daemon.memory=max", "MemTotal: 1014496 kB\n", 0},
		{"", "", 0},
	} {
		tm := newTestMachine(t, map[string]string{"/proc/cmdline": c.cmdline, "/proc/meminfo": c.meminfo})
		if got := tm.boot().daemonMemoryLimit(); got != c.want {
			t.Errorf("%q with %q: limit %d, want %d", c.cmdline, c.meminfo, got, c.want)
		}
	}
}

func TestKeepOutput(t *testing.T) {
	var kept []string
	for i := range 50 {
		kept = keepOutput(kept, fmt.Sprint("before ", i))
	}
	if len(kept) != outputTail || kept[0] != "before 10" {
		t.Fatalf("before a dump: %d lines from %q, want the last %d", len(kept), kept[0], outputTail)
	}
	kept = keepOutput(kept, "panic: boom")
	for i := range 100 {
		kept = keepOutput(kept, fmt.Sprint("stack ", i))
	}
	kept = keepOutput(kept, "panic: a second one is still the first dump's tail")
	want := []string{"before 48", "before 49", "panic: boom"}
	if len(kept) != outputTail || !slices.Equal(kept[:3], want) || kept[outputTail-1] != fmt.Sprint("stack ", outputTail-4) {
		t.Fatalf("kept %q, want %q then the dump's first lines", kept, want)
	}
}

// TestIsDaemon: the role needs both the name and PID 1's socket, so a binary installed as
// edgegate-daemon by someone else still runs as the plain daemon.
func TestIsDaemon(t *testing.T) {
	args := os.Args
	t.Cleanup(func() { os.Args = args })
	for _, c := range []struct {
		argv0, socket string
		want          bool
	}{
		{"/init", "/run/edgegate/pid1.sock", false},
		{"/usr/bin/edgegate-daemon", "", false},
		{"edgegate-daemon", "/run/edgegate/pid1.sock", true},
	} {
		os.Args = []string{c.argv0}
		t.Setenv(ctl.SocketEnv, c.socket)
		if got := IsDaemon(); got != c.want {
			t.Errorf("argv[0] %q, socket %q: IsDaemon() = %v, want %v", c.argv0, c.socket, got, c.want)
		}
	}
}
