package pid1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/pid1/ctl"
)

// The daemon runs as PID 1's child process: the same binary, started with argv[0]
// DaemonArgv0, in a cgroup of its own with a memory limit. A panic, a fatal error or the OOM
// killer ends the child, never PID 1; the kernel's rules keep forwarding meanwhile, and the
// supervisor starts it again with backoff. The child reports its liveness every second over
// the control socket (package ctl); one that stops reporting, or reports a part of itself
// stuck, is killed (SIGQUIT first, so the Go runtime prints every goroutine's stack) and
// restarted. The hardware watchdog is fed only while restarts help (see daemonProc.alive).
const (
	// DaemonArgv0 is the daemon's argv[0]: package main runs the daemon, not PID 1, when it
	// sees it.
	DaemonArgv0 = "edgegate-daemon"
	// controlSocket is the control channel's socket, on /run (a tmpfs).
	controlSocket = "/run/edgegate/pid1.sock"
	// StuckAfterEnv tells the child how long a part of it may go without progress before it
	// reports that part stuck: PID 1's hang timeout, so both sides agree.
	StuckAfterEnv = "EDGEGATE_STUCK_AFTER"
	// TestPanicEnv asks the child of a test image to panic after its first sync (see
	// edgegate.test.panic); its value is the panic's message.
	TestPanicEnv = "EDGEGATE_TEST_PANIC"

	// defaultHang is how long a child may go without a report, or with a part stuck,
	// before it is killed; edgegate.daemon.hang= sets it.
	defaultHang = 30 * time.Second
	// futileRuns is how many hung runs in a row (each killed before it was stable, see
	// stableAfter) PID 1 restarts before it stops feeding the watchdog and lets the board
	// reset. Only hangs count: a reset may cure what holds a daemon (a kernel call that
	// never returns), while a daemon that panics at every start panics after a reset too,
	// and the reset would only take the rules that still forward with it.
	futileRuns = 5
	// killGrace is how long a hung child has to print its stacks after SIGQUIT.
	killGrace = 5 * time.Second
	// outputTail is how many lines of a run's output are kept to say how it ended.
	outputTail = 40
)

// IsDaemon reports whether this process is the daemon PID 1 started: its argv[0], and the
// control socket in its environment (a binary merely installed under that name runs as the
// plain daemon).
func IsDaemon() bool {
	return filepath.Base(os.Args[0]) == DaemonArgv0 && os.Getenv(ctl.SocketEnv) != ""
}

// daemonProc runs the daemon's process, once per call of runOnce, and keeps what PID 1 knows of
// its runs.
type daemonProc struct {
	m      *Machine
	args   []string
	cg     *cgroup // nil without one
	hang   time.Duration
	spawn  SpawnFunc
	signal func(pid int, sig unix.Signal) error
	now    func() time.Time

	mu         sync.Mutex
	pid        int // the running child; 0 between runs
	run        int
	started    time.Time
	reported   time.Time // of the current run; zero before its first report
	report     ctl.Report
	readyRun   int // the last run that said it synced
	restarts   map[ctl.Reason]int
	lastExit   string
	output     []string // the current run's last lines other than its log lines
	lastOutput []string // the previous run's
	futile     int      // hung runs since the last stable one
	synced     chan struct{}
}

func (m *Machine) newDaemonProc(args []string) *daemonProc {
	d := &daemonProc{
		m: m, args: args, hang: m.cmdline.DaemonHang, restarts: map[ctl.Reason]int{},
		spawn: m.sys.Spawn, signal: unix.Kill, now: time.Now, synced: make(chan struct{}),
	}
	if d.hang <= 0 {
		d.hang = defaultHang
	}
	cg, err := setupCgroup(m.path(cgroupRoot), m.daemonMemoryLimit())
	if err != nil {
		m.log.Error("the daemon runs without a cgroup memory limit", "err", err)
	} else {
		d.cg = cg
		m.log.Info("daemon cgroup", "dir", cg.dir, "memory.max", formatBytes(cg.max))
	}
	return d
}

// SpawnFunc starts a process of this binary with argv and env, its standard output and error
// on out, in the cgroup whose directory cgroupFD is (-1: PID 1's own). The exit status
// arrives on exited.
type SpawnFunc func(argv, env []string, out *os.File, cgroupFD int) (pid int, exited <-chan unix.WaitStatus, err error)

// spawnSelf is the kernel's SpawnFunc: /proc/self/exe through the reaper.
func spawnSelf(log *slog.Logger) SpawnFunc {
	return func(argv, env []string, out *os.File, cgroupFD int) (int, <-chan unix.WaitStatus, error) {
		attr := &os.ProcAttr{Dir: "/", Env: env, Files: []*os.File{nil, out, out}, Sys: &syscall.SysProcAttr{}}
		if cgroupFD >= 0 {
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, cgroupFD
		}
		return children.spawn(log, "/proc/self/exe", argv, attr)
	}
}

// env is the child's environment: the control socket, the stuck timeout, and a Go memory
// limit under the cgroup's, so the runtime collects before the kernel kills.
func (d *daemonProc) env(run int) []string {
	env := []string{"PATH=/", "HOME=/", "TMPDIR=/tmp", ctl.SocketEnv + "=" + d.m.path(controlSocket), StuckAfterEnv + "=" + d.hang.String()}
	if d.cg != nil && d.cg.max > 0 {
		env = append(env, "GOMEMLIMIT="+strconv.FormatInt(d.cg.max/10*9, 10))
	}
	if n := d.m.cmdline.TestPanics; d.m.cmdline.Test && run <= n {
		env = append(env, fmt.Sprintf("%s=edgegate.test.panic: deliberate panic %d of %d after a sync", TestPanicEnv, run, n))
	}
	return env
}

// runOnce is one run of the daemon's process, until it exits or ctx ends (then it is asked to
// stop with SIGTERM, and killed after the shutdown grace). It returns how the run ended.
func (d *daemonProc) runOnce(ctx context.Context) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	d.mu.Lock()
	run := d.run + 1
	d.mu.Unlock()
	oomBefore := d.cg.oomKills()
	pid, exited, err := d.spawn(append([]string{DaemonArgv0}, d.args...), d.env(run), w, d.cg.dirFD())
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("starting the daemon: %w", err)
	}
	d.mu.Lock()
	d.pid, d.run, d.started, d.reported, d.report, d.output = pid, run, d.now(), time.Time{}, ctl.Report{}, nil
	d.mu.Unlock()
	d.m.log.Info("daemon started", "pid", pid, "run", run)
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		d.copyOutput(r)
	}()

	ws, killed, stopping := d.follow(ctx, pid, exited)
	// The child's output ends with it; a descendant holding the pipe must not hold PID 1.
	select {
	case <-outDone:
	case <-time.After(time.Second):
		r.Close()
	}
	reason, how := d.classify(ws, killed, oomBefore)
	d.mu.Lock()
	defer d.mu.Unlock()
	stable := !d.reported.IsZero() && d.now().Sub(d.started) >= stableAfter
	d.pid, d.lastOutput = 0, d.output
	if stopping {
		return nil
	}
	d.restarts[reason]++
	d.lastExit = how
	switch {
	case stable:
		d.futile = 0
	case reason == ctl.ReasonHang:
		d.futile++
	}
	d.m.log.Error("the daemon's run ended", "run", run, "reason", string(reason), "how", how, "futile", d.futile)
	return errors.New(how)
}

// follow waits for the child to exit, killing it when it hangs (killed says why) or when ctx
// ends (stopping).
func (d *daemonProc) follow(ctx context.Context, pid int, exited <-chan unix.WaitStatus) (ws unix.WaitStatus, killed string, stopping bool) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var killAt <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case ws = <-exited:
			return ws, killed, stopping
		case <-done:
			done, stopping = nil, true
			_ = d.signal(pid, unix.SIGTERM)
			killAt = time.After(d.m.timing.shutdownGrace)
		case <-tick.C:
			if killed != "" || stopping {
				continue
			}
			if killed = d.hung(); killed != "" {
				d.m.log.Error("the daemon is hung; killing it (its goroutines' stacks follow)", "pid", pid, "why", killed)
				_ = d.signal(pid, unix.SIGQUIT)
				killAt = time.After(killGrace)
			}
		case <-killAt:
			_ = d.signal(pid, unix.SIGKILL)
			killAt = nil
		}
	}
}

// hung says why the running child counts as hung, or "".
func (d *daemonProc) hung() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.now()
	switch {
	case d.reported.IsZero() && now.Sub(d.started) > d.hang:
		return fmt.Sprintf("no report in the %v since it started", d.hang)
	case !d.reported.IsZero() && now.Sub(d.reported) > d.hang:
		return fmt.Sprintf("no report for %v", now.Sub(d.reported).Round(time.Second))
	}
	if stuck := d.report.Stuck(); len(stuck) > 0 {
		return "not making progress: " + strings.Join(stuck, ", ")
	}
	return ""
}

// classify says why a run ended.
func (d *daemonProc) classify(ws unix.WaitStatus, killed string, oomBefore int) (ctl.Reason, string) {
	d.mu.Lock()
	out := slices.Clone(d.output)
	d.mu.Unlock()
	switch {
	case killed != "":
		return ctl.ReasonHang, "killed for hanging: " + killed
	case ws.Signaled() && ws.Signal() == unix.SIGKILL && d.cg.oomKills() > oomBefore:
		return ctl.ReasonOOM, fmt.Sprintf("killed by the OOM killer at its cgroup's memory limit (%s)", formatBytes(d.cg.max))
	case ws.Signaled():
		return ctl.ReasonExit, "killed by " + unix.SignalName(ws.Signal())
	}
	for _, l := range out {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return ctl.ReasonPanic, fmt.Sprintf("exited with status %d: %s", ws.ExitStatus(), l)
		}
	}
	return ctl.ReasonExit, fmt.Sprintf("exited with status %d", ws.ExitStatus())
}

// copyOutput sends the child's output, line by line, to the console and the kernel log at
// the level its log line says, and keeps the last lines that are not log lines: what the Go
// runtime printed as the process ended.
func (d *daemonProc) copyOutput(r io.ReadCloser) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		level, logged := lineLevel(line)
		d.m.console.writeLog(level, []byte(line+"\n"))
		if logged {
			// Its own log lines the daemon has already said; and one (the dashboard's
			// generated token) is for the console only.
			continue
		}
		d.mu.Lock()
		d.output = keepOutput(d.output, line)
		d.mu.Unlock()
	}
}

// dumpStarts are the first lines of what the Go runtime prints as a process ends.
var dumpStarts = []string{"panic: ", "fatal error: ", "SIGQUIT: quit", "SIGABRT: abort", "runtime: "}

// keepOutput adds line to what is kept of a run's output: the last lines until the runtime
// starts a dump (a panic's message, a fatal error, the stacks SIGQUIT prints), then the two
// lines before it (an egfault line, say) and the dump's first lines, whose top says where it
// happened, up to outputTail lines in all.
func keepOutput(kept []string, line string) []string {
	dumpStart := func(l string) bool {
		return slices.ContainsFunc(dumpStarts, func(p string) bool { return strings.HasPrefix(l, p) })
	}
	dumping := slices.ContainsFunc(kept, dumpStart)
	switch {
	case !dumping && dumpStart(line):
		return append(slices.Clone(kept[len(kept)-min(len(kept), 2):]), line)
	case len(kept) < outputTail:
		return append(kept, line)
	case dumping:
		return kept // the dump's top is what matters
	}
	return append(slices.Delete(kept, 0, 1), line)
}

// lineLevel is the level of one line of the daemon's output and whether it is one of the
// daemon's log lines (slog's text: level=...); any other line (a panic's message and stack,
// the runtime's fatal error) is an error.
func lineLevel(line string) (slog.Level, bool) {
	after, ok := strings.CutPrefix(line, "level=")
	if !ok && strings.HasPrefix(line, "time=") {
		_, after, ok = strings.Cut(line, " level=")
	}
	if ok {
		word, _, _ := strings.Cut(after, " ")
		var l slog.Level
		if l.UnmarshalText([]byte(word)) == nil {
			return l, true
		}
	}
	return slog.LevelError, false
}

// isChild reports whether pid is the running child.
func (d *daemonProc) isChild(pid int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return pid > 0 && pid == d.pid
}

// Report records the child's report (ctl.Machine).
func (d *daemonProc) Report(pid int, r ctl.Report) ctl.Child {
	d.mu.Lock()
	defer d.mu.Unlock()
	if pid == d.pid {
		d.reported, d.report = d.now(), r
	}
	return ctl.Child{
		Run: d.run, Restarts: maps.Clone(d.restarts), LastExit: d.lastExit,
		LastOutput: slices.Clone(d.lastOutput), MemoryMax: d.cg.limit(),
	}
}

// Ready is the child's word that a sync succeeded (ctl.Machine).
func (d *daemonProc) Ready() {
	d.mu.Lock()
	d.readyRun = d.run
	close(d.synced)
	d.synced = make(chan struct{})
	d.mu.Unlock()
	d.m.Ready()
}

// readyAfter returns a channel that closes at the first sync of a run after run n.
func (d *daemonProc) readyAfter(ctx context.Context, n int) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		for {
			d.mu.Lock()
			ok, next := d.readyRun > n, d.synced
			d.mu.Unlock()
			if ok {
				close(out)
				return
			}
			select {
			case <-next:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// problem is the daemon's part of a trial boot's health check: its last report's, when
// that is fresh.
func (d *daemonProc) problem() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.pid == 0:
		return errors.New("the daemon is not running")
	case d.reported.IsZero() || d.now().Sub(d.reported) > 5*ctl.ReportInterval:
		return errors.New("the daemon does not report")
	case d.report.Problem != "":
		return errors.New(d.report.Problem)
	}
	return nil
}

// alive says whether restarting the daemon still helps: false once futileRuns runs in a row
// were killed for hanging before they were stable. The watchdog is fed only while it is
// true.
func (d *daemonProc) alive() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.futile < futileRuns
}

// DaemonProblem is the daemon's part of a trial boot's health check: nil while its process
// runs and its fresh report says it is healthy.
func (m *Machine) DaemonProblem() error {
	d := m.daemon.Load()
	if d == nil {
		return errors.New("the daemon is not started: its configuration is invalid")
	}
	return d.problem()
}
