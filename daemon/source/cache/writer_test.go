package cache

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// source is a snapshot function whose state a test changes.
type source struct {
	mu    sync.Mutex
	st    State
	ready bool
	calls atomic.Int32
}

func (s *source) snapshot() (State, bool) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st, s.ready
}

func (s *source) set(st State, ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st, s.ready = st, ready
}

func startWriter(t *testing.T, src *source, settle, minInterval time.Duration, firstSettle ...time.Duration) (*Writer, *File, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	f := NewFile(t.TempDir())
	w := NewWriter(f, src.snapshot, nil)
	w.Settle, w.MinInterval, w.FirstSettle = settle, minInterval, settle
	if len(firstSettle) > 0 {
		w.FirstSettle = firstSettle[0]
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, f, cancel, done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, 5*time.Second, 5*time.Millisecond, cond)
}

func services(f *File) int {
	st, err := f.Load()
	if err != nil {
		return -1
	}
	return len(st.Services)
}

func TestWriterCoalescesAndSkipsUnchanged(t *testing.T) {
	src := &source{}
	src.set(sampleState(), true)
	w, f, _, _ := startWriter(t, src, 20*time.Millisecond, 0)
	for range 5 {
		w.Trigger()
	}
	var first time.Time
	waitFor(t, "first save", func() bool { first, _ = w.LastSave(); return !first.IsZero() })
	if n := services(f); n != 1 {
		t.Fatalf("the file has %d services, want 1", n)
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("5 triggers within the settle time took %d snapshots, want 1", n)
	}
	fi, _ := os.Stat(f.Path())

	// The same state again: read, compared, not written.
	w.Trigger()
	waitFor(t, "second snapshot", func() bool { return src.calls.Load() == 2 })
	time.Sleep(10 * time.Millisecond)
	if again, _ := w.LastSave(); !again.Equal(first) {
		t.Errorf("an unchanged state was written again at %v", again)
	}
	if fi2, _ := os.Stat(f.Path()); !fi2.ModTime().Equal(fi.ModTime()) {
		t.Errorf("the file was rewritten for an unchanged state")
	}

	st := sampleState()
	st.Services = append(st.Services, mt.Service("default", "api", "10.96.0.11", mt.Port("", v1.ProtocolTCP, 443, 8443, 0)))
	src.set(st, true)
	w.Trigger()
	waitFor(t, "changed state saved", func() bool { return services(f) == 2 })
}

func TestWriterWaitsForSources(t *testing.T) {
	src := &source{}
	w, f, _, _ := startWriter(t, src, time.Millisecond, 0)
	w.Trigger()
	waitFor(t, "snapshot", func() bool { return src.calls.Load() == 1 })
	time.Sleep(10 * time.Millisecond)
	if _, err := os.Stat(f.Path()); !os.IsNotExist(err) {
		t.Errorf("a state that was not ready was written (stat: %v)", err)
	}
}

func TestWriterSpacesWrites(t *testing.T) {
	src := &source{}
	src.set(sampleState(), true)
	w, f, _, _ := startWriter(t, src, time.Millisecond, 300*time.Millisecond)
	w.Trigger()
	var first, second time.Time
	waitFor(t, "first save", func() bool { first, _ = w.LastSave(); return !first.IsZero() })
	st := sampleState()
	st.Services = nil
	src.set(st, true)
	w.Trigger()
	waitFor(t, "second save", func() bool { second, _ = w.LastSave(); return second.After(first) })
	if n := services(f); n != 0 {
		t.Errorf("after the second save the file has %d services, want 0", n)
	}
	if gap := second.Sub(first); gap < 300*time.Millisecond {
		t.Errorf("writes %v apart, want at least the minimum interval of 300ms", gap)
	}
}

// TestWriterWaitsLongerFirst: the first write waits FirstSettle after its trigger, later
// ones Settle.
func TestWriterWaitsLongerFirst(t *testing.T) {
	src := &source{}
	src.set(sampleState(), true)
	start := time.Now()
	w, _, _, _ := startWriter(t, src, time.Millisecond, 0, 300*time.Millisecond)
	w.Trigger()
	var first, second time.Time
	waitFor(t, "first save", func() bool { first, _ = w.LastSave(); return !first.IsZero() })
	if waited := first.Sub(start); waited < 300*time.Millisecond {
		t.Errorf("first save after %v, want the first settle time of 300ms at least", waited)
	}
	st := sampleState()
	st.Services = nil
	src.set(st, true)
	w.Trigger()
	waitFor(t, "second save", func() bool { second, _ = w.LastSave(); return second.After(first) })
	if gap := second.Sub(first); gap > 250*time.Millisecond {
		t.Errorf("second save %v after the first, want about the settle time (1ms)", gap)
	}
}

func TestWriterFlushesOnStop(t *testing.T) {
	src := &source{}
	src.set(sampleState(), true)
	w, f, cancel, done := startWriter(t, src, time.Hour, 0)
	w.Trigger()
	// Let Run take the trigger before it is told to stop.
	waitFor(t, "trigger taken", func() bool { return len(w.trigger) == 0 })
	cancel()
	<-done
	if n := services(f); n != 1 {
		t.Errorf("after stop the file has %d services, want the pending state (1)", n)
	}
}

func TestWriterRetriesFailedWrites(t *testing.T) {
	src := &source{}
	src.set(sampleState(), true)
	// A regular file where the state directory should be fails the write, even for root.
	blocker := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w := NewWriter(NewFile(blocker), src.snapshot, nil)
	w.Settle, w.MinInterval, w.FirstSettle = time.Millisecond, 20*time.Millisecond, time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	w.Trigger()
	waitFor(t, "failed save", func() bool { _, err := w.LastSave(); return err != nil })
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "retried save", func() bool { at, err := w.LastSave(); return err == nil && !at.IsZero() })
	if n := services(NewFile(blocker)); n != 1 {
		t.Errorf("after the retry the file has %d services, want 1", n)
	}
}

// TestWriterKnowsStoredObjectsByVersion: a state whose Services and EndpointSlices carry the
// versions last written is not encoded again, whatever else a trigger says; a new version
// is written.
func TestWriterKnowsStoredObjectsByVersion(t *testing.T) {
	versioned := func(rv string) State {
		st := sampleState()
		st.Services[0].ResourceVersion, st.EndpointSlices[0].ResourceVersion = "10", rv
		return st
	}
	src := &source{}
	src.set(versioned("11"), true)
	w, f, _, _ := startWriter(t, src, time.Millisecond, 0)
	w.Trigger()
	var first time.Time
	waitFor(t, "first save", func() bool { first, _ = w.LastSave(); return !first.IsZero() })

	w.Trigger()
	waitFor(t, "second snapshot", func() bool { return src.calls.Load() == 2 })
	time.Sleep(10 * time.Millisecond)
	if again, _ := w.LastSave(); !again.Equal(first) {
		t.Errorf("a state of the same versions was written again at %v", again)
	}

	st := versioned("12")
	st.EndpointSlices[0].Endpoints[0].Addresses = []string{"10.244.1.9"}
	src.set(st, true)
	w.Trigger()
	waitFor(t, "new version saved", func() bool {
		got, err := f.Load()
		return err == nil && got.EndpointSlices[0].Endpoints[0].Addresses[0] == "10.244.1.9"
	})
}
