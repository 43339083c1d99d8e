package pid1

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// Component is one long-running part of the firmware. Run is expected to return only when
// ctx ends; a return before that, an error or a panic makes the supervisor restart it.
type Component struct {
	Name string
	Run  func(ctx context.Context) error
}

// PanicError is a panic turned into an error, with the stack where it happened.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Protect calls fn and turns a panic in it into a *PanicError. A recover only sees panics
// of its own goroutine, so a component's goroutines wrap their bodies in Protect and hand
// the error back, or a panic there still takes PID 1, and with it the kernel, down.
func Protect(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// Default restart backoff: doubling from a second up to half a minute. A component that
// ran for stableAfter before failing starts over at the minimum.
const (
	minBackoff  = time.Second
	maxBackoff  = 30 * time.Second
	stableAfter = time.Minute
)

// ComponentStats counts what happened to one supervised component.
type ComponentStats struct {
	Name     string
	Running  bool
	Restarts int
	Panics   int
	LastErr  string
}

// Supervisor restarts components that fail, with exponential backoff, and counts.
type Supervisor struct {
	Log        *slog.Logger
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Wait waits d or until ctx ends, and reports whether d passed; nil sleeps for real.
	// Tests record the backoff through it.
	Wait func(ctx context.Context, d time.Duration) bool

	mu    sync.Mutex
	stats map[string]*ComponentStats
}

// Supervise runs fn under a supervisor with the default backoff until ctx ends.
func Supervise(ctx context.Context, name string, fn func(ctx context.Context) error, log *slog.Logger) {
	(&Supervisor{Log: log}).Run(ctx, Component{Name: name, Run: fn})
}

// Run runs the component until ctx ends, restarting it whenever it returns early, fails
// or panics. A panic is logged with its stack and counted.
func (s *Supervisor) Run(ctx context.Context, c Component) {
	lo, hi := s.MinBackoff, s.MaxBackoff
	if lo <= 0 {
		lo = minBackoff
	}
	if hi <= 0 {
		hi = maxBackoff
	}
	hi = max(hi, lo)
	log := s.Log.With("component", c.Name)
	backoff := lo
	for {
		s.update(c.Name, func(st *ComponentStats) { st.Running = true })
		started := time.Now()
		err := Protect(func() error { return c.Run(ctx) })
		s.update(c.Name, func(st *ComponentStats) { st.Running = false })
		if ctx.Err() != nil {
			if err != nil {
				log.Debug("component stopped", "err", err)
			}
			return
		}
		if time.Since(started) >= stableAfter {
			backoff = lo
		}
		var pe *PanicError
		panicked := errors.As(err, &pe)
		st := s.update(c.Name, func(st *ComponentStats) {
			st.Restarts++
			if panicked {
				st.Panics++
			}
			if err != nil {
				st.LastErr = err.Error()
			} else {
				st.LastErr = "returned before it was stopped"
			}
		})
		if panicked {
			log.Error("component panicked; restarting", "panic", fmt.Sprint(pe.Value), "panics", st.Panics, "in", backoff, "stack", string(pe.Stack))
		} else {
			log.Error("component stopped; restarting", "err", st.LastErr, "restarts", st.Restarts, "in", backoff)
		}
		if !s.wait(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, hi)
	}
}

func (s *Supervisor) wait(ctx context.Context, d time.Duration) bool {
	if s.Wait != nil {
		return s.Wait(ctx, d)
	}
	return sleepUntil(ctx, time.Now().Add(d))
}

// update changes one component's counters under the lock and returns a copy.
func (s *Supervisor) update(name string, fn func(*ComponentStats)) ComponentStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stats == nil {
		s.stats = map[string]*ComponentStats{}
	}
	st, ok := s.stats[name]
	if !ok {
		st = &ComponentStats{Name: name}
		s.stats[name] = st
	}
	fn(st)
	return *st
}

// Stats returns the counters of every component started so far, by name.
func (s *Supervisor) Stats() []ComponentStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ComponentStats, 0, len(s.stats))
	for _, st := range s.stats {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b ComponentStats) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
