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
	// dirs and stderr are Dir, DataDir and os.Stderr; the package's tests replace them
	// before the first Point.
	dirs             = []string{Dir, DataDir}
	stderr io.Writer = os.Stderr

	// armed is the point -> fault map the watcher read last; nil until the first Point
	// starts the watcher. Point reads it without a lock: the watcher replaces it whole.
	armed     atomic.Pointer[map[string]armedFault]
	startOnce sync.Once

	// hoard keeps what Alloc allocated reachable, so that no collection frees it.
	hoardMu sync.Mutex
	hoard   [][]byte
)

// armedFault is an armed point's kind and the file that armed it.
type armedFault struct {
	kind Kind
	file string
}

// Point injects the fault armed for name, if any, into the calling goroutine, once: the
// first caller to remove the point's file injects, the others carry on. It costs an atomic
// load and a map read when nothing is armed.
func Point(name string) {
	m := armed.Load()
	if m == nil {
		start()
		m = armed.Load()
	}
	if f, ok := (*m)[name]; ok {
		inject(name, f)
	}
}

// start reads the dirs once, so that a fault armed before the first Point is injected by
// it, and then keeps reading them every pollEvery.
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
	m := map[string]armedFault{}
	for _, dir := range dirs {
		entries, _ := os.ReadDir(dir) // a missing dir arms nothing
		for _, e := range entries {
			if _, ok := m[e.Name()]; ok || !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
				continue
			}
			file := filepath.Join(dir, e.Name())
			b, err := os.ReadFile(file)
			if err != nil {
				continue // taken by a Point meanwhile
			}
			switch k := Kind(strings.TrimSpace(string(b))); k {
			case "":
			case Panic, Block, Alloc:
				m[e.Name()] = armedFault{k, file}
			default:
				if os.Remove(file) == nil {
					say("egfault: ignoring " + file + ": unknown kind " + string(k) + " (panic, block or alloc)")
				}
			}
		}
	}
	armed.Store(&m)
}

// inject removes f's file and injects its kind; when the removal fails, another caller
// took the fault and inject returns. The removal is synced first, so that a fault armed on
// the data partition does not come back with the reboot that may follow.
func inject(name string, f armedFault) {
	if os.Remove(f.file) != nil {
		return
	}
	if d, err := os.Open(filepath.Dir(f.file)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	say("egfault: injecting " + string(f.kind) + " at " + name)
	switch f.kind {
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
