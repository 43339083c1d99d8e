// Package testkit holds the small helpers the daemon's tests share: polling for a condition,
// logging into a test's output or into a buffer. It is imported by _test.go files only.
package testkit

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// WaitFor polls cond every poll until it holds, and fails the test if it still does not
// after within.
func WaitFor(t testing.TB, what string, within, poll time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(poll)
	}
}

// Go runs run in a goroutine until the test ends; then it cancels run's context and waits
// for run to return.
func Go(t testing.TB, run func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// GoErr is Go for a run that returns an error: the error fails the test, named by what.
func GoErr(t testing.TB, what string, run func(context.Context) error) {
	Go(t, func(ctx context.Context) {
		if err := run(ctx); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// Logger logs into the test's output (shown with -v or on failure) until the test's
// cleanup ends; what is logged after that (client-go and controllers may still log from a
// goroutine) is dropped. opts may be nil.
func Logger(t testing.TB, opts *slog.HandlerOptions) *slog.Logger {
	l := &testLog{w: t.Output()}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.done = true
	})
	return slog.New(slog.NewTextHandler(l, opts))
}

type testLog struct {
	mu   sync.Mutex
	w    io.Writer
	done bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return len(p), nil
	}
	return l.w.Write(p)
}

// Buffer is a bytes.Buffer that goroutines may write while the test reads it, for log output
// written from a component's goroutines. The zero value is ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
