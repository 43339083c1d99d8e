package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/metrics"
	"github.com/edgegate/edgegate/daemon/pid1"
	"github.com/edgegate/edgegate/daemon/pid1/ctl"
)

// defaultStuckAfter is how long one sync may run before the daemon reports its sync loop
// stuck, when PID 1 does not say (pid1.StuckAfterEnv).
const defaultStuckAfter = 30 * time.Second

// Child is the daemon as the firmware runs it: PID 1's child process (argv[0]
// pid1.DaemonArgv0), which reaches PID 1 over the control socket named in its environment.
// It logs to its standard error, which PID 1 copies to the console and the kernel log. It
// returns the process's exit code: 0 after SIGTERM (PID 1 stops it), 1 when a run failed
// and 2, after a panic's message and stack as the runtime prints them, when a unit
// panicked (PID 1 starts it again either way), 2 also when it cannot start at all.
func Child(args []string, version string) int {
	cfg, err := ParseConfig(args)
	log := childLogger(cfg.LogLevel)
	if err != nil {
		log.Error("the daemon's configuration is invalid", "err", err)
		return 2
	}
	c, ok := ctl.FromEnv(log.With("component", "control"))
	if !ok {
		log.Error("not started by PID 1: no control socket", "env", ctl.SocketEnv)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fw := &Firmware{updates: c, reports: c, health: &daemonHealth{stuckAfter: defaultStuckAfter}}
	if d, err := time.ParseDuration(os.Getenv(pid1.StuckAfterEnv)); err == nil && d > 0 {
		fw.health.stuckAfter = d
	}
	fw.ready = readyForwarder(ctx, c, os.Getenv(pid1.TestPanicEnv), log)
	err = Run(ctx, Options{Config: cfg, Version: version, Log: log, Firmware: fw})
	if err != nil {
		log.Error("the daemon's run failed; PID 1 starts it again", "err", err)
	}
	return exitCode(err, os.Stderr)
}

// exitCode is the child's exit code for how its run ended: 0 when it was stopped, 2 after a
// unit's panic, whose message and stack it writes to stderr as the runtime would (the
// panic was recovered to stop the other units cleanly, but PID 1 counts it as a panic),
// and 1 after any other error.
func exitCode(err error, stderr io.Writer) int {
	var pe *pid1.PanicError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &pe):
		fmt.Fprintf(stderr, "panic: %v\n\n%s", err, pe.Stack)
		return 2
	}
	return 1
}

// readyForwarder returns the sync loop's ready: it tells PID 1 from a goroutine of its own,
// so a slow PID 1 never holds a sync, and coalesces what comes meanwhile. With testPanic
// set (a test image's edgegate.test.panic) the process panics after its first sync is told,
// on a goroutine nothing recovers, as a bug would.
func readyForwarder(ctx context.Context, c *ctl.Client, testPanic string, log *slog.Logger) func() {
	synced := make(chan struct{}, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-synced:
			}
			if err := c.Ready(ctx); err != nil {
				log.Warn("telling PID 1 of a sync failed", "err", err)
				continue
			}
			if testPanic != "" {
				go func() { panic(testPanic) }()
			}
		}
	}()
	return func() {
		select {
		case synced <- struct{}{}:
		default: // one is on its way
		}
	}
}

// reportLoop reports the daemon's health and liveness to PID 1 every ctl.ReportInterval,
// until ctx ends, and keeps PID 1's answer for the metrics. At the first answer it shows the
// runs on the dashboard (show, when set) and, in a run after the first, logs how the
// previous run ended, with that run's last output, so the dashboard's log says why.
func (fw *Firmware) reportLoop(ctx context.Context, log *slog.Logger, show func(dashboard.DaemonRuns)) {
	tick := time.NewTicker(ctl.ReportInterval)
	defer tick.Stop()
	failing := false
	for {
		child, err := fw.reports.Report(ctx, fw.health.report())
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			log.Warn("reporting to PID 1 failed", "err", err)
		case err == nil:
			if failing {
				log.Info("reporting to PID 1 again")
			}
			// What PID 1 says of earlier runs does not change during this one.
			if fw.child.Swap(&child) != nil {
				break
			}
			if child.Run > 1 {
				log.Warn("PID 1 restarted the daemon", "run", child.Run, "restarts", fmt.Sprint(child.Restarts),
					"previous", child.LastExit, "output", strings.Join(child.LastOutput, "\n"))
			}
			if show != nil {
				show(dashboard.DaemonRuns{Run: child.Run, Restarts: fw.runs().Restarts, LastExit: child.LastExit})
			}
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runs is what PID 1 last said of the daemon's runs, for the metrics.
func (fw *Firmware) runs() metrics.DaemonRuns {
	c := fw.child.Load()
	if c == nil {
		return metrics.DaemonRuns{}
	}
	r := metrics.DaemonRuns{Run: c.Run, Restarts: map[string]int{}}
	for k, v := range c.Restarts {
		r.Restarts[string(k)] = v
	}
	return r
}

// reasons are ctl's restart reasons as metric labels.
func reasons() []string {
	out := make([]string, len(ctl.Reasons))
	for i, r := range ctl.Reasons {
		out[i] = string(r)
	}
	return out
}

// childLogger is the daemon's logger on its standard error, at level ("info" when it does
// not parse), in the format of PID 1's console: slog's text with a short time.
func childLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		Level: l,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			}
			return a
		},
	}))
}
