//go:build egfault

package fault

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Enabled says whether this build injects faults: only a test image's, built with the tag
// egfault.
const Enabled = true

// pollEvery is how often the watcher reads Dir.
const pollEvery = 100 * time.Millisecond

// chunk is what Alloc allocates at a time.
const chunk = 16 << 20

var (
	// dir and stderr are Dir and os.Stderr; the package's tests replace them before the
	// first Point.
	dir              = Dir
	stderr io.Writer = os.Stderr

	// armed is the point -> kind map the watcher read last; nil until the first Point
	// starts the watcher. Point reads it without a lock: the watcher replaces it whole.
	armed     atomic.Pointer[map[string]Kind]
	startOnce sync.Once

	// hoard keeps what Alloc allocated reachable, so that no collection frees it.
	hoardMu sync.Mutex
	hoard   [][]byte
)

// Point injects the fault armed for name, if any, into the calling goroutine, once: the
// first caller to remove the point's file from Dir injects, the others carry on. It costs
// an atomic load and a map read when nothing is armed.
func Point(name string) {
	m := armed.Load()
	if m == nil {
		start()
		m = armed.Load()
	}
	if kind, ok := (*m)[name]; ok {
		inject(name, kind)
	}
}

// start reads Dir once, so that a fault armed before the first Point is injected by it,
// and then keeps reading it every pollEvery.
func start() {
	startOnce.Do(func() {
		scan()
		go func() {
			for {
				time.Sleep(pollEvery)
				scan()
			}
		}()
	})
}

// scan publishes the faults armed in dir. An empty file is being written and a dot file
// is one that will be renamed into place: both wait for the next scan. A file whose
// content is no Kind is removed, and said on stderr, so that a test's typo does not go
// unnoticed.
func scan() {
	m := map[string]Kind{}
	entries, _ := os.ReadDir(dir) // a missing dir arms nothing
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // taken by a Point meanwhile
		}
		switch k := Kind(strings.TrimSpace(string(b))); k {
		case "":
		case Panic, Block, Alloc:
			m[e.Name()] = k
		default:
			if os.Remove(filepath.Join(dir, e.Name())) == nil {
				say("egfault: ignoring " + e.Name() + ": unknown kind " + string(k) + " (panic, block or alloc)")
			}
		}
	}
	armed.Store(&m)
}

// inject removes name's file and injects kind; when the removal fails, another caller
// took the fault and inject returns.
func inject(name string, kind Kind) {
	if os.Remove(filepath.Join(dir, name)) != nil {
		return
	}
	say("egfault: injecting " + string(kind) + " at " + name)
	switch kind {
	case Panic:
		panic("egfault: " + name)
	case Block:
		select {}
	case Alloc:
		for {
			b := make([]byte, chunk)
			// Fresh pages from the kernel are zero and the runtime leaves them untouched:
			// writing one byte a page makes them resident.
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			hoardMu.Lock()
			hoard = append(hoard, b)
			hoardMu.Unlock()
		}
	}
}

// say writes one line to stderr in one write, so that lines from concurrent points do not
// interleave.
func say(line string) {
	_, _ = io.WriteString(stderr, line+"\n")
}
