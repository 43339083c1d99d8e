package app

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/pid1"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// failure waits for the run-ending error of us; a hang guard, not a timing assumption.
func failure(t *testing.T, us *units) error {
	t.Helper()
	select {
	case err := <-us.failed():
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no unit ended the run")
		return nil
	}
}

// untilStopped is a well-behaved unit's body: it runs until the run ends.
func untilStopped(stopped chan<- struct{}) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return nil
	}
}

// TestEndRunUnitEndsTheRun: an error or a panic of a unit of policy EndRun is the run's
// error, named after the unit; the other units keep running until the run stops them.
func TestEndRunUnitEndsTheRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		run      func(context.Context) error
		want     string
		panicked bool
	}{
		{"error", func(context.Context) error { return errors.New("watch closed") }, "cluster: watch closed", false},
		{"panic", func(context.Context) error { panic("nil map") }, "cluster: panic: nil map", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			us := newUnits(discard())
			ctx, stop := context.WithCancel(context.Background())
			other := make(chan struct{})
			us.start(ctx, Unit{Name: "metrics", Policy: Restart, Run: untilStopped(other)})
			us.start(ctx, Unit{Name: "cluster", Policy: EndRun, Run: tc.run})
			err := failure(t, us)
			if err.Error() != tc.want {
				t.Errorf("run ended with %q, want %q", err, tc.want)
			}
			var pe *pid1.PanicError
			if errors.As(err, &pe) != tc.panicked {
				t.Errorf("error %v: a *pid1.PanicError %v, want %v", err, !tc.panicked, tc.panicked)
			}
			select {
			case <-other:
				t.Error("another unit stopped before the run did")
			default:
			}
			stop()
			us.wait()
			<-other
		})
	}
}

// TestRestartUnitRestartsAlone: a unit of policy Restart that fails, panics or returns
// early is restarted after a doubling backoff, logged by its name, and never ends the run.
func TestRestartUnitRestartsAlone(t *testing.T) {
	// Written by the unit's supervisor goroutine only, read once us.wait returned.
	var logs bytes.Buffer
	us := newUnits(slog.New(slog.NewTextHandler(&logs, nil)))
	var waits []time.Duration
	us.restarts.Wait = func(ctx context.Context, d time.Duration) bool {
		waits = append(waits, d)
		return ctx.Err() == nil
	}
	ctx, stop := context.WithCancel(context.Background())
	steady, stopped := make(chan struct{}), make(chan struct{})
	runs := 0
	us.start(ctx, Unit{Name: "healthz", Policy: Restart, Run: func(ctx context.Context) error {
		runs++
		switch runs {
		case 1:
			return errors.New("listen tcp 0.0.0.0:10256: address already in use")
		case 2:
			panic("handler bug")
		case 3:
			return nil // returned before the run ended
		}
		close(steady)
		return untilStopped(stopped)(ctx)
	}})
	<-steady
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}; !slices.Equal(waits, want) {
		t.Errorf("backoff %v, want %v", waits, want)
	}
	select {
	case err := <-us.failed():
		t.Errorf("a restarting unit ended the run: %v", err)
	default:
	}
	stop()
	us.wait()
	<-stopped
	if runs != 4 {
		t.Errorf("%d runs, want 4", runs)
	}
	out := logs.String()
	for _, want := range []string{"component=healthz", "address already in use", "component panicked; restarting", "handler bug"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestEndRunUnitStopping: a unit of policy EndRun that returns early without an error
// just ends (as the cluster's sync loop does when the run stops before the source is
// ready), and an error on the way out of a stopping run ends nothing.
func TestEndRunUnitStopping(t *testing.T) {
	us := newUnits(discard())
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	us.start(ctx, Unit{Name: "routes", Run: func(context.Context) error { close(done); return nil }})
	us.start(ctx, Unit{Name: "lb-members", Run: func(ctx context.Context) error {
		<-ctx.Done()
		return errors.New("use of closed network connection")
	}})
	<-done
	stop()
	us.wait()
	select {
	case err := <-us.failed():
		t.Errorf("the run's end reported as a failure: %v", err)
	default:
	}
}
