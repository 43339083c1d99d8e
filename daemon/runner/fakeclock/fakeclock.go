// Package fakeclock is a runner.Clock whose time moves only when a test says so, with a way to
// wait until the code under test has armed the timer the test expects.
package fakeclock

import (
	"slices"
	"sync"
	"time"

	"github.com/edgegate/edgegate/daemon/runner"
)

// Clock is a manually advanced runner.Clock. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	changed chan struct{} // closed and replaced whenever the set of timers changes
}

var _ runner.Clock = (*Clock)(nil)

// New returns a Clock that reads start until it is advanced.
func New(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimerAt returns a timer that fires when the clock reaches at; a deadline not after now
// fires at once.
func (c *Clock) NewTimerAt(at time.Time) runner.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{clk: c, at: at, ch: make(chan time.Time, 1)}
	if !at.After(c.now) {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.notifyLocked()
	return t
}

// Advance moves the clock forward by d and fires every timer that has come due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.notifyLocked()
}

// AwaitTimers waits, for at most within of real time, until the pending timers are exactly
// want (in any order), and reports whether they were. Tests use it to know the code under test
// has settled before they advance the clock.
func (c *Clock) AwaitTimers(within time.Duration, want ...time.Time) bool {
	want = slices.Clone(want)
	slices.SortFunc(want, time.Time.Compare)
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		got, changed := c.deadlinesLocked(), c.changed
		c.mu.Unlock()
		if slices.EqualFunc(got, want, time.Time.Equal) {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// Timers returns the deadlines of the pending timers, earliest first, for failure messages.
func (c *Clock) Timers() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadlinesLocked()
}

func (c *Clock) deadlinesLocked() []time.Time {
	out := make([]time.Time, 0, len(c.timers))
	for _, t := range c.timers {
		out = append(out, t.at)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func (c *Clock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type timer struct {
	clk *Clock
	at  time.Time
	ch  chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	c := t.clk
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	c.notifyLocked()
	return true
}
