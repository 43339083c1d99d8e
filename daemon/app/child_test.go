package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/internal/testkit"
	"github.com/edgegate/edgegate/daemon/pid1"
	"github.com/edgegate/edgegate/daemon/pid1/ctl"
)

// TestExitCode: a unit's recovered panic ends the child as a panic would, for PID 1 to
// count it so; other errors exit 1, a stop 0.
func TestExitCode(t *testing.T) {
	var out strings.Builder
	panicked := pid1.Protect(func() error { panic("boom") })
	if code := exitCode(fmt.Errorf("sync: %w", panicked), &out); code != 2 {
		t.Errorf("after a panic: exit %d, want 2", code)
	}
	if got := out.String(); !strings.HasPrefix(got, "panic: sync: panic: boom\n\n") || !strings.Contains(got, "goroutine ") {
		t.Errorf("stderr after a panic:\n%s", got)
	}
	out.Reset()
	if code := exitCode(errors.New("cluster: forbidden"), &out); code != 1 || out.Len() != 0 {
		t.Errorf("after an error: exit %d, stderr %q; want 1 and nothing", code, out.String())
	}
	if code := exitCode(nil, &out); code != 0 {
		t.Errorf("after a stop: exit %d", code)
	}
}

type fakeReports struct {
	child   ctl.Child
	reports chan ctl.Report
}

func (f *fakeReports) Report(_ context.Context, r ctl.Report) (ctl.Child, error) {
	f.reports <- r
	return f.child, nil
}

// TestReportLoop: the daemon reports its health and liveness; at PID 1's first answer it
// shows its runs on the dashboard and logs, once, how the previous run ended.
func TestReportLoop(t *testing.T) {
	f := &fakeReports{reports: make(chan ctl.Report, 10), child: ctl.Child{
		Run: 3, Restarts: map[ctl.Reason]int{ctl.ReasonPanic: 1, ctl.ReasonHang: 1},
		LastExit: "killed for hanging: no report for 31s", LastOutput: []string{"SIGQUIT: quit"},
	}}
	fw := &Firmware{reports: f, health: &daemonHealth{stuckAfter: time.Minute}}
	fw.health.set(func() error { return errors.New("rules not programmed yet") },
		func() []ctl.Component { return []ctl.Component{{Name: "sync", Live: true}} })
	var logs testkit.Buffer
	shown := make(chan dashboard.DaemonRuns, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fw.reportLoop(ctx, slog.New(slog.NewTextHandler(&logs, nil)), func(r dashboard.DaemonRuns) { shown <- r })
	}()
	for range 2 {
		select {
		case r := <-f.reports:
			if r.Problem != "rules not programmed yet" || len(r.Components) != 1 || !r.Components[0].Live {
				t.Errorf("report %+v", r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no report")
		}
	}
	cancel()
	<-done
	if got := strings.Count(logs.String(), `msg="PID 1 restarted the daemon" run=3`); got != 1 {
		t.Errorf("restart logged %d times:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), `output="SIGQUIT: quit"`) {
		t.Errorf("the previous run's output is not logged:\n%s", logs.String())
	}
	if len(shown) != 1 {
		t.Fatalf("shown on the dashboard %d times, want once", len(shown))
	}
	if r := <-shown; r.Run != 3 || r.Restarts["panic"] != 1 || r.Restarts["hang"] != 1 || r.LastExit == "" {
		t.Errorf("dashboard shows %+v", r)
	}
	if m := fw.runs(); m.Run != 3 || m.Restarts["hang"] != 1 {
		t.Errorf("metrics read %+v", m)
	}
}
