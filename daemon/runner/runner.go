// Package runner runs the proxy's sync function at a bounded frequency: bursts of change
// events are coalesced into one sync, syncs are limited to one per minimum interval on average, a failed
// sync is retried, and a periodic sync repairs drift even when nothing changes. It follows the
// idea of kube-proxy's BoundedFrequencyRunner with an injected Clock; how it limits the rate
// differs (see New).
package runner

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Runner calls one function, never concurrently with itself, when triggered, when a retry is
// due, and at least once every maxInterval.
type Runner struct {
	fn            func()
	minInterval   time.Duration
	retryInterval time.Duration
	maxInterval   time.Duration
	clk           Clock

	// running is held by Run for its whole life, so a second Run waits instead of calling fn
	// concurrently.
	running sync.Mutex

	mu      sync.Mutex
	pending bool      // a Trigger arrived since the last run started
	retryAt time.Time // earliest requested retry; zero when none
	inRun   time.Time // when the running call of fn started; zero between runs
	wake    chan struct{}
}

// New returns a Runner for fn; name only labels panics. Runs are limited to one per
// minInterval on average, with a burst of two: a token bucket of two tokens, refilled one per
// minInterval, each run taking one. And after each run the runner rests as long as that run
// took, up to minInterval, so that runs shorter than minInterval take at most half the time.
// kube-proxy 1.36's runner instead waits minInterval from the end of each run, never two runs
// closer: a change that comes one interval after the last one then waits that run's length,
// a steady stream of such changes drifts by it at every run until each waits up to a whole
// interval, and any jitter in their arrival adds to the drift. Older kube-proxy runners had
// the same burst of two. retryInterval is what Retry waits; maxInterval bounds the time
// between runs when nothing triggers them. It panics when the intervals make no sense, as
// that is a programming error.
func New(name string, fn func(), minInterval, retryInterval, maxInterval time.Duration, clk Clock) *Runner {
	switch {
	case fn == nil || clk == nil:
		panic(fmt.Sprintf("runner %s: fn and clock must be set", name))
	case minInterval < 0 || retryInterval <= 0:
		panic(fmt.Sprintf("runner %s: minInterval must be >= 0 and retryInterval > 0", name))
	case maxInterval <= 0 || maxInterval < minInterval:
		panic(fmt.Sprintf("runner %s: maxInterval (%v) must be > 0 and >= minInterval (%v)", name, maxInterval, minInterval))
	}
	return &Runner{
		fn:            fn,
		minInterval:   minInterval,
		retryInterval: retryInterval,
		maxInterval:   maxInterval,
		clk:           clk,
		wake:          make(chan struct{}, 1),
	}
}

// Trigger asks for a run as soon as the minimum interval allows. Triggers that arrive before
// that run starts are coalesced into it. A Trigger before Run starts is kept for the first run.
func (r *Runner) Trigger() {
	r.mu.Lock()
	r.pending = true
	r.mu.Unlock()
	r.poke()
}

// Retry schedules a run no later than retryInterval from now; fn calls it when its sync failed.
func (r *Runner) Retry() { r.RetryAfter(r.retryInterval) }

// RetryAfter schedules a run after d, or at the end of the minimum interval if that is later.
// When several retries are pending the earliest wins. The retry is forgotten once any run
// starts, so fn must ask again if that run fails too.
func (r *Runner) RetryAfter(d time.Duration) {
	at := r.clk.Now().Add(d)
	r.mu.Lock()
	if r.retryAt.IsZero() || at.Before(r.retryAt) {
		r.retryAt = at
	}
	r.mu.Unlock()
	r.poke()
}

// Running returns when the run in progress started; ok is false between runs. A run that
// never ends (a deadlocked sync) shows here as one that started long ago.
func (r *Runner) Running() (since time.Time, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inRun, !r.inRun.IsZero()
}

func (r *Runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default: // a wake-up is already queued; the loop re-reads all state when it takes it
	}
}

// Run calls fn as scheduled until ctx ends. The first periodic run is maxInterval after Run
// starts; a Trigger runs sooner.
func (r *Runner) Run(ctx context.Context) {
	r.running.Lock()
	defer r.running.Unlock()

	var earliest time.Time // zero until the first run, so nothing delays it
	// full is when the token bucket would hold both tokens again; a run may start once it
	// holds one, minInterval before that.
	var full time.Time
	periodicFrom := r.clk.Now()
	for {
		if ctx.Err() != nil {
			return
		}
		now := r.clk.Now()
		due := r.nextRun(earliest, periodicFrom)
		if now.Before(due) {
			t := r.clk.NewTimerAt(due)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-r.wake:
				t.Stop()
			case <-t.C():
			}
			// Re-read the clock and the requests: a wake-up may only have moved due earlier.
			continue
		}

		start := r.clk.Now()
		r.mu.Lock()
		r.pending = false
		r.retryAt = time.Time{}
		r.inRun = start
		r.mu.Unlock()
		if full.Before(start) {
			full = start
		}
		full = full.Add(r.minInterval) // the token this run takes
		r.fn()
		end := r.clk.Now()
		r.mu.Lock()
		r.inRun = time.Time{}
		r.mu.Unlock()
		earliest = r.nextStart(full, start, end)
		periodicFrom = end
	}
}

// nextStart is the earliest a triggered run may start after one that ran from start to end,
// full being when the bucket holds both tokens again: once it holds one, and not before a
// rest as long as the run took, capped at minInterval.
func (r *Runner) nextStart(full, start, end time.Time) time.Time {
	next := full.Add(-r.minInterval)
	if rested := end.Add(min(end.Sub(start), r.minInterval)); rested.After(next) {
		next = rested
	}
	return next
}

// nextRun is the time the next run is due, given the earliest a triggered run may start and
// when the periodic interval started counting.
func (r *Runner) nextRun(earliest, periodicFrom time.Time) time.Time {
	r.mu.Lock()
	pending, retryAt := r.pending, r.retryAt
	r.mu.Unlock()

	due := periodicFrom.Add(r.maxInterval)
	if pending && earliest.Before(due) {
		due = earliest
	}
	if !retryAt.IsZero() {
		if retryAt.Before(earliest) {
			retryAt = earliest
		}
		if retryAt.Before(due) {
			due = retryAt
		}
	}
	return due
}
