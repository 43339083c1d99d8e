package runner_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/runner"
	"github.com/edgegate/edgegate/daemon/runner/fakeclock"
)

// wait bounds how long a test waits for the runner goroutine to react; it is never slept.
const wait = 5 * time.Second

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

type harness struct {
	t     *testing.T
	clk   *fakeclock.Clock
	r     *runner.Runner
	calls chan time.Time // the fake time at which each run started
	stop  context.CancelFunc
	done  chan struct{}
}

// newHarness builds a runner on a fake clock at t0 whose function records its start time and
// then calls hook (if any) with the number of the run, counting from 1.
func newHarness(t *testing.T, minI, retryI, maxI time.Duration, hook func(h *harness, n int)) *harness {
	t.Helper()
	h := &harness{t: t, clk: fakeclock.New(t0), calls: make(chan time.Time, 100), done: make(chan struct{})}
	n := 0
	h.r = runner.New("test", func() {
		n++
		h.calls <- h.clk.Now()
		if hook != nil {
			hook(h, n)
		}
	}, minI, retryI, maxI, h.clk)
	return h
}

// taking is a run hook for runs that take d of the fake clock.
func taking(d time.Duration) func(*harness, int) {
	return func(h *harness, _ int) { h.clk.Advance(d) }
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	go func() {
		defer close(h.done)
		h.r.Run(ctx)
	}()
	h.t.Cleanup(func() {
		cancel()
		<-h.done
	})
}

func (h *harness) expectCall(at time.Time) {
	h.t.Helper()
	select {
	case got := <-h.calls:
		if !got.Equal(at) {
			h.t.Fatalf("run started at t0+%v, want t0+%v", got.Sub(t0), at.Sub(t0))
		}
	case <-time.After(wait):
		h.t.Fatalf("no run, want one at t0+%v", at.Sub(t0))
	}
}

// expectIdle waits until the runner sleeps on exactly the given timers, then checks that it
// has not run meanwhile.
func (h *harness) expectIdle(timers ...time.Time) {
	h.t.Helper()
	if !h.clk.AwaitTimers(wait, timers...) {
		h.t.Fatalf("runner did not settle on timers %v at %v; it has %v", timers, h.clk.Now(), h.clk.Timers())
	}
	select {
	case got := <-h.calls:
		h.t.Fatalf("unexpected run at t0+%v", got.Sub(t0))
	default:
	}
}

// expectRunAt checks that the runner, idle until at, has not run a millisecond before at,
// and runs at at.
func (h *harness) expectRunAt(at time.Time) {
	h.t.Helper()
	h.expectIdle(at)
	h.clk.Advance(at.Sub(h.clk.Now()) - time.Millisecond)
	h.expectIdle(at)
	h.clk.Advance(time.Millisecond)
	h.expectCall(at)
}

// Triggers coalesce into one run; two runs may follow each other at once (the burst), a
// third waits for the bucket. Every burst of triggers arrives while the runner may not run
// yet, so none of them can land after the run they are meant to join has started.
func TestTriggersCoalesceIntoOneRun(t *testing.T) {
	// The first run takes 100ms, so the runner rests until t0+200ms.
	h := newHarness(t, time.Second, 5*time.Second, time.Minute, func(h *harness, n int) {
		if n == 1 {
			h.clk.Advance(100 * time.Millisecond)
		}
	})
	h.start()
	h.expectIdle(t0.Add(time.Minute))

	h.r.Trigger()
	h.expectCall(t0)
	h.expectIdle(t0.Add(100*time.Millisecond + time.Minute))

	for range 5 {
		h.r.Trigger()
	}
	h.expectRunAt(t0.Add(200 * time.Millisecond)) // the burst's second token
	h.expectIdle(t0.Add(200*time.Millisecond + time.Minute))

	h.clk.Advance(100 * time.Millisecond)
	for range 5 {
		h.r.Trigger()
	}
	h.expectRunAt(t0.Add(time.Second)) // the bucket refills one token per second
	h.expectIdle(t0.Add(time.Second + time.Minute))
}

func TestSlowRunIsFollowedByRestOfMinInterval(t *testing.T) {
	h := newHarness(t, time.Second, 5*time.Second, time.Minute, func(h *harness, n int) {
		if n == 1 {
			// A slow sync during which another change arrives.
			h.clk.Advance(3 * time.Second)
			h.r.Trigger()
		}
	})
	h.start()
	h.r.Trigger()
	h.expectCall(t0)
	h.expectRunAt(t0.Add(4 * time.Second))
}

// A change a second with a one-second minimum interval, arriving up to 30ms early or late:
// each runs when it arrives. Counted from the end of the last run, as kube-proxy counts,
// each would wait 100ms longer than the one before, and counted from its start, each would
// wait for the latest arrival so far.
func TestChangesASecondRunOnArrival(t *testing.T) {
	h := newHarness(t, time.Second, 5*time.Second, time.Minute, taking(100*time.Millisecond))
	h.start()
	h.r.Trigger()
	h.expectCall(t0)
	at := t0
	for i, jitter := range []time.Duration{30, -30, 10, 30, -20, 0, 30, -30} {
		next := t0.Add(time.Duration(i+1)*time.Second + jitter*time.Millisecond)
		h.expectIdle(at.Add(100*time.Millisecond + time.Minute))
		h.clk.Advance(next.Sub(h.clk.Now()))
		h.r.Trigger()
		h.expectCall(next)
		at = next
	}
}

// A run that takes more than half the interval is followed by a rest as long as itself.
func TestRestAsLongAsTheRun(t *testing.T) {
	h := newHarness(t, time.Second, 5*time.Second, time.Minute, taking(600*time.Millisecond))
	h.start()
	h.r.Trigger()
	h.expectCall(t0)
	h.r.Trigger()
	h.expectRunAt(t0.Add(1200 * time.Millisecond))
}

func TestPeriodicRunWithoutTriggers(t *testing.T) {
	h := newHarness(t, time.Second, 5*time.Second, 10*time.Second, nil)
	h.start()
	for i := 1; i <= 3; i++ {
		h.expectIdle(t0.Add(time.Duration(i) * 10 * time.Second))
		h.clk.Advance(10 * time.Second)
		h.expectCall(t0.Add(time.Duration(i) * 10 * time.Second))
	}
}

func TestRetryAfterFailedRun(t *testing.T) {
	h := newHarness(t, time.Second, 5*time.Second, time.Minute, func(h *harness, n int) {
		if n == 1 {
			h.r.Retry()
		}
	})
	h.start()
	h.r.Trigger()
	h.expectCall(t0)
	h.expectIdle(t0.Add(5 * time.Second))
	h.clk.Advance(5 * time.Second)
	h.expectCall(t0.Add(5 * time.Second))
	// The second run succeeded, so only the periodic run is left.
	h.expectIdle(t0.Add(5*time.Second + time.Minute))
}

func TestEarliestRetryWinsButMinIntervalHolds(t *testing.T) {
	h := newHarness(t, 2*time.Second, 5*time.Second, time.Minute, nil)
	h.start()
	h.r.Trigger()
	h.expectCall(t0)
	h.r.Trigger()
	h.expectCall(t0) // the burst's second run

	h.r.RetryAfter(10 * time.Second)
	h.expectIdle(t0.Add(10 * time.Second))
	h.r.RetryAfter(500 * time.Millisecond)
	h.expectIdle(t0.Add(2 * time.Second))
	h.clk.Advance(2 * time.Second)
	h.expectCall(t0.Add(2 * time.Second))
	h.expectIdle(t0.Add(2*time.Second + time.Minute))
}

func TestTriggerBeforeRunIsKept(t *testing.T) {
	h := newHarness(t, time.Second, 5*time.Second, time.Minute, nil)
	h.r.Trigger()
	h.start()
	h.expectCall(t0)
}

func TestRunStopsOnCancel(t *testing.T) {
	h := newHarness(t, time.Second, 5*time.Second, time.Minute, nil)
	h.start()
	h.expectIdle(t0.Add(time.Minute))
	h.stop()
	select {
	case <-h.done:
	case <-time.After(wait):
		t.Fatal("Run did not return after cancel")
	}
	if !h.clk.AwaitTimers(wait) {
		t.Fatal("Run left its timer armed")
	}
	h.r.Trigger()
	h.clk.Advance(time.Hour)
	select {
	case got := <-h.calls:
		t.Fatalf("run at t0+%v after cancel", got.Sub(t0))
	default:
	}
}

// TestNeverConcurrent hammers a runner on the real clock, with two Run loops racing for it, and
// checks that the function never overlaps itself.
func TestNeverConcurrent(t *testing.T) {
	var inFlight, overlaps, runs atomic.Int32
	r := runner.New("hammer", func() {
		if inFlight.Add(1) > 1 {
			overlaps.Add(1)
		}
		runs.Add(1)
		time.Sleep(50 * time.Microsecond)
		inFlight.Add(-1)
	}, 0, time.Millisecond, time.Second, runner.RealClock())

	ctx, cancel := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	for range 2 {
		loops.Go(func() { r.Run(ctx) })
	}
	var triggers sync.WaitGroup
	for range 4 {
		triggers.Go(func() {
			for range 200 {
				r.Trigger()
			}
		})
	}
	triggers.Wait()
	deadline := time.Now().Add(wait)
	for runs.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	loops.Wait()
	if runs.Load() == 0 {
		t.Fatal("no run on the real clock")
	}
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("fn overlapped itself %d times", n)
	}
	t.Logf("800 triggers, %d runs", runs.Load())
}

func TestNewRejectsBadIntervals(t *testing.T) {
	clk := fakeclock.New(t0)
	for name, iv := range map[string][3]time.Duration{
		"max below min": {time.Minute, time.Second, time.Second},
		"zero max":      {0, time.Second, 0},
		"negative min":  {-time.Second, time.Second, time.Minute},
		"zero retry":    {time.Second, 0, time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("New accepted bad intervals")
				}
			}()
			runner.New(name, func() {}, iv[0], iv[1], iv[2], clk)
		})
	}
}

// TestRunningShowsARunInProgress: Running says when the run in progress started, and
// nothing between runs.
func TestRunningShowsARunInProgress(t *testing.T) {
	inRun := make(chan struct{})
	release := make(chan struct{})
	h := newHarness(t, time.Second, 5*time.Second, time.Minute, func(h *harness, _ int) {
		close(inRun)
		<-release
	})
	if _, ok := h.r.Running(); ok {
		t.Fatal("running before Run")
	}
	h.start()
	h.clk.Advance(time.Second)
	h.r.Trigger()
	<-inRun
	if since, ok := h.r.Running(); !ok || !since.Equal(t0.Add(time.Second)) {
		t.Fatalf("Running() = %v, %v during the run started at t0+1s", since, ok)
	}
	close(release)
	h.expectCall(t0.Add(time.Second))
	h.expectIdle(t0.Add(time.Second + time.Minute))
	if since, ok := h.r.Running(); ok {
		t.Fatalf("Running() = %v after the run", since)
	}
}
