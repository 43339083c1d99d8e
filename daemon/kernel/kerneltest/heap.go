package kerneltest

import (
	"runtime/metrics"
	"sync"
	"syscall"
	"testing"
	"time"
)

// watchHeap samples the heap's objects (live and not yet swept) every millisecond into
// *peak, the largest seen, until stop is called: a benchmark's peak-heap-MB, what drives a
// sync's peak RSS.
func watchHeap(peak *uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			*peak = max(*peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// SyncLoop is a sync benchmark's loop: apply once per iteration, after reset (outside the
// timer) when reset is not nil. It reports the CPU per sync (cpu-ms/op: on a shared machine
// the wall time says little) and the largest heap seen during a sync (peak-heap-MB).
func SyncLoop(b *testing.B, reset func() error, apply func() error) {
	var cpu time.Duration
	var peak uint64
	n := 0
	for b.Loop() {
		n++
		b.StopTimer()
		if reset != nil {
			if err := reset(); err != nil {
				b.Fatal(err)
			}
		}
		stop := watchHeap(&peak)
		b.StartTimer()
		before := CPUTime(b)
		if err := apply(); err != nil {
			b.Fatal(err)
		}
		cpu += CPUTime(b) - before
		b.StopTimer()
		stop()
		b.StartTimer()
	}
	if n > 0 {
		b.ReportMetric(float64(cpu)/float64(n)/1e6, "cpu-ms/op")
		b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
	}
}

// CPUTime is the process's user and system CPU time so far.
func CPUTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
