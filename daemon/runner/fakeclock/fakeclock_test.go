package fakeclock

import (
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/runner"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// fired reports whether tm has fired, and with what time, without waiting.
func fired(tm runner.Timer) (time.Time, bool) {
	select {
	case got := <-tm.C():
		return got, true
	default:
		return time.Time{}, false
	}
}

func TestTimerFiresOnlyWhenDue(t *testing.T) {
	c := New(t0)
	tm := c.NewTimerAt(t0.Add(2 * time.Second))
	if !c.AwaitTimers(time.Second, t0.Add(2*time.Second)) {
		t.Fatal("timer not registered")
	}
	c.Advance(time.Second)
	if _, ok := fired(tm); ok {
		t.Fatal("timer fired 1s early")
	}
	c.Advance(time.Second)
	if got, ok := fired(tm); !ok {
		t.Fatal("timer did not fire when due")
	} else if !got.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("fired with %v", got)
	}
	if tm.Stop() {
		t.Fatal("Stop reported a fired timer as pending")
	}
	if !c.AwaitTimers(time.Second) {
		t.Fatal("fired timer still listed")
	}
}

func TestStopRemovesTimer(t *testing.T) {
	c := New(t0)
	a := c.NewTimerAt(t0.Add(time.Second))
	c.NewTimerAt(t0.Add(3 * time.Second))
	if !a.Stop() {
		t.Fatal("Stop reported a pending timer as fired")
	}
	if !c.AwaitTimers(time.Second, t0.Add(3*time.Second)) {
		t.Fatal("stopped timer still listed")
	}
	c.Advance(time.Hour)
	if _, ok := fired(a); ok {
		t.Fatal("stopped timer fired")
	}
}

func TestPastDeadlineFiresAtOnce(t *testing.T) {
	c := New(t0)
	for _, at := range []time.Time{t0, t0.Add(-time.Second)} {
		if _, ok := fired(c.NewTimerAt(at)); !ok {
			t.Fatalf("timer for t0%+v did not fire at t0", at.Sub(t0))
		}
	}
}

func TestAwaitTimersTimesOut(t *testing.T) {
	c := New(t0)
	if c.AwaitTimers(time.Millisecond, t0.Add(time.Second)) {
		t.Fatal("AwaitTimers reported a timer that does not exist")
	}
}
