package pid1

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// recordedWaits is a Supervisor.Wait that records the backoff and does not sleep.
type recordedWaits struct {
	mu    sync.Mutex
	waits []time.Duration
	// stopAfter cancels the supervisor's context at that many waits.
	stopAfter int
	cancel    context.CancelFunc
}

func (r *recordedWaits) wait(ctx context.Context, d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
	if r.stopAfter > 0 && len(r.waits) >= r.stopAfter {
		r.cancel()
		return false
	}
	return ctx.Err() == nil
}

func (r *recordedWaits) got() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.waits...)
}

// TestSupervisorRestartsAPanickingComponent: a component that panics twice, then runs, is
// restarted twice, keeps running, and stops when the context ends.
func TestSupervisorRestartsAPanickingComponent(t *testing.T) {
	var logs bytes.Buffer
	rw := &recordedWaits{}
	s := &Supervisor{Log: slog.New(slog.NewTextHandler(&logs, nil)), Wait: rw.wait}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	running := make(chan struct{})
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		s.Run(ctx, Component{Name: "flaky", Run: func(ctx context.Context) error {
			calls++
			if calls <= 2 {
				var none []int
				_ = none[calls] // a real runtime panic: index out of range
			}
			close(running)
			<-ctx.Done()
			return ctx.Err()
		}})
	}()
	<-running
	want := []ComponentStats{{Name: "flaky", Running: true, Restarts: 2, Panics: 2, LastErr: "panic: runtime error: index out of range [2] with length 0"}}
	if diff := cmp.Diff(want, s.Stats()); diff != "" {
		t.Errorf("stats while running (-want +got):\n%s", diff)
	}
	select {
	case <-returned:
		t.Fatal("the supervisor returned while the component runs")
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	<-returned
	if calls != 3 {
		t.Errorf("component started %d times, want 3", calls)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second}, rw.got()); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
	if s.Stats()[0].Running {
		t.Error("stats say running after the supervisor returned")
	}
	out := logs.String()
	for _, want := range []string{`msg="component panicked; restarting" component=flaky panic="runtime error: index out of range [2] with length 0" panics=2`, "supervise_test.go"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q (the panic and its stack):\n%s", want, out)
		}
	}
}

// TestSupervisorBackoffIsBounded: a component that always fails is retried with doubling
// backoff up to the cap, for errors and early returns alike.
func TestSupervisorBackoffIsBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rw := &recordedWaits{stopAfter: 9, cancel: cancel}
	s := &Supervisor{Log: slog.New(slog.DiscardHandler), MinBackoff: time.Second, MaxBackoff: 30 * time.Second, Wait: rw.wait}
	n := 0
	s.Run(ctx, Component{Name: "broken", Run: func(context.Context) error {
		n++
		if n%2 == 0 {
			return nil // returning early is a failure too
		}
		return errors.New("listen: address in use")
	}})
	sec := time.Second
	want := []time.Duration{sec, 2 * sec, 4 * sec, 8 * sec, 16 * sec, 30 * sec, 30 * sec, 30 * sec, 30 * sec}
	if diff := cmp.Diff(want, rw.got()); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
	st := s.Stats()[0]
	if st.Restarts != 9 || st.Panics != 0 || st.Running {
		t.Errorf("stats = %+v, want 9 restarts, no panics, not running", st)
	}
}

// TestSupervisorStopsOnCancel: a context that ends during the backoff ends the supervisor
// without another start; a component that fails because it was stopped is not restarted.
func TestSupervisorStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Supervisor{Log: slog.New(slog.DiscardHandler), MinBackoff: time.Hour}
	done := make(chan struct{})
	starts := 0
	go func() {
		defer close(done)
		s.Run(ctx, Component{Name: "failing", Run: func(context.Context) error {
			starts++
			return errors.New("no")
		}})
	}()
	waitFor(t, "the first failure", func() bool { st := s.Stats(); return len(st) == 1 && st[0].Restarts == 1 })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the supervisor did not stop during its backoff")
	}
	if starts != 1 {
		t.Errorf("started %d times, want 1", starts)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	s.Run(ctx2, Component{Name: "stops", Run: func(context.Context) error {
		cancel2()
		panic("while stopping")
	}})
	if st := s.Stats()[1]; st.Name != "stops" || st.Restarts != 0 {
		t.Errorf("stats = %+v, want no restart after the context ended", st)
	}
}

func TestSupervise(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		<-ran
		cancel()
	}()
	Supervise(ctx, "once", func(ctx context.Context) error {
		close(ran)
		<-ctx.Done()
		return nil
	}, slog.New(slog.DiscardHandler))
}

func TestProtect(t *testing.T) {
	if err := Protect(func() error { return errors.New("plain") }); err == nil || err.Error() != "plain" {
		t.Errorf("Protect passed %v, want the error", err)
	}
	err := Protect(func() error { panic("in a goroutine of the daemon") })
	var pe *PanicError
	if !errors.As(err, &pe) || pe.Value != "in a goroutine of the daemon" || !bytes.Contains(pe.Stack, []byte("TestProtect")) {
		t.Errorf("Protect = %v, want a PanicError with the stack", err)
	}
}
