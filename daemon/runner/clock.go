package runner

import "time"

// Clock is the time source a Runner schedules with. It is injected so tests can move time by
// hand instead of sleeping.
type Clock interface {
	Now() time.Time
	// NewTimerAt returns a timer that delivers the time on C once the clock reaches at. The
	// deadline is absolute so that time passing between reading the clock and arming the
	// timer cannot move it.
	NewTimerAt(at time.Time) Timer
}

// Timer is a one-shot timer made by a Clock.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was still pending.
	Stop() bool
}

// RealClock returns the Clock backed by package time.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimerAt(at time.Time) Timer { return realTimer{time.NewTimer(time.Until(at))} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }

func (t realTimer) Stop() bool { return t.t.Stop() }
