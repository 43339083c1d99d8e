package proxy

import (
	"runtime/debug"
	"sync/atomic"
)

// releaseAbove is the size of a sync (chains written, elements changed, objects deleted)
// from which its memory is handed back to the kernel as soon as it ends. A full sync of
// 10000 Services x 10 endpoints builds a transaction of several hundred MiB that is garbage
// once the kernel has it; the Go runtime would keep most of it mapped for minutes, and an
// edge gateway's RAM is better left to conntrack and the page cache. Small syncs are left
// to the runtime: they cost more to collect than they hold.
const releaseAbove = 5000

// releaser returns the heap of large syncs to the kernel, one at a time, off the sync path.
type releaser struct {
	busy atomic.Bool
	free func() // debug.FreeOSMemory unless a test replaces it
	done func() // tests: told when a release ended
}

// after starts a release when res was a large sync and none is running. It never blocks:
// the collection runs in its own goroutine, so the next sync is not delayed by it.
func (r *releaser) after(res Result) {
	if res.Written+res.Elements+res.Deleted < releaseAbove || !r.busy.CompareAndSwap(false, true) {
		return
	}
	free := r.free
	if free == nil {
		free = debug.FreeOSMemory
	}
	go func() {
		free()
		r.busy.Store(false)
		if r.done != nil {
			r.done()
		}
	}()
}
