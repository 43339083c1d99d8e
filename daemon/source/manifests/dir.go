package manifests

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

const (
	// settleDelay lets an editor finish a save (write a temporary file, rename it over the
	// old one) before the directory is read.
	settleDelay = 100 * time.Millisecond
	// maxSettle bounds the wait for a file that is rewritten without pause.
	maxSettle = time.Second
	// pollInterval is how often the directory is read while it cannot be watched (inotify
	// limits reached, or the directory was removed and may come back).
	pollInterval = 2 * time.Second
)

// Dir is a manifests directory followed for changes.
type Dir struct {
	path   string
	log    *slog.Logger
	loader *Loader
	// watch starts following the directory; tests replace it to exercise polling.
	watch func(path string) (*fsnotify.Watcher, error)
	// poll is the polling interval while no watch is held.
	poll time.Duration

	mu       sync.Mutex
	problems []error
}

// NewDir returns a Dir for the manifests at path. A nil log discards.
func NewDir(path string, log *slog.Logger) *Dir {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path = filepath.Clean(path)
	return &Dir{path: path, log: log, loader: NewLoader(os.DirFS(path)), watch: watchDir, poll: pollInterval}
}

// Problems returns the problems of the most recent load.
func (d *Dir) Problems() []error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]error(nil), d.problems...)
}

// Run loads the directory, hands the result to sink, calls changed (when not nil), and
// does so again after every change to the directory until ctx ends. Problems are logged,
// one line each. It returns an error only if the directory cannot be read at start. Run
// must not be called again before it has returned.
func (d *Dir) Run(ctx context.Context, sink Sink, changed func()) error {
	// Watch before the first read so that no change between the two goes unseen.
	w, err := d.watch(d.path)
	if err != nil {
		d.log.Warn("cannot watch manifests directory, polling it", "dir", d.path, "interval", d.poll, "error", err)
	}
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	var last loaded
	if last, err = d.loader.load(); err != nil {
		return fmt.Errorf("read manifests directory %s: %w", d.path, err)
	}
	d.publish(sink, changed, last)

	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	var deadline time.Time // when a pending reload must happen at the latest; zero if none
	schedule := func() {
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(maxSettle)
		}
		settle.Reset(min(settleDelay, deadline.Sub(now)))
	}
	// reload publishes a new load; onlyIfNew keeps polling from repeating an unchanged
	// state, and its problems, every few seconds.
	reload := func(onlyIfNew bool) {
		deadline = time.Time{}
		next, _ := d.loader.load()
		if onlyIfNew && next.equal(last) {
			return
		}
		last = next
		d.publish(sink, changed, last)
	}
	for {
		var events <-chan fsnotify.Event
		var watchErrs <-chan error
		var poll <-chan time.Time
		if w != nil {
			events, watchErrs = w.Events, w.Errors
		} else {
			poll = time.After(d.poll)
		}
		select {
		case <-ctx.Done():
			return nil
		case ev := <-events:
			if filepath.Clean(ev.Name) == d.path && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				// The directory itself was removed or renamed, and the watch with it.
				d.log.Warn("manifests directory went away, polling it", "dir", d.path, "event", ev.Op.String())
				w.Close()
				w = nil
				schedule()
			} else if filepath.Clean(ev.Name) == d.path || relevant(ev.Name) {
				schedule()
			}
		case err := <-watchErrs:
			// Overflow means events were lost; a reload catches up with whatever they were.
			d.log.Warn("watching manifests directory", "dir", d.path, "error", err)
			schedule()
		case <-poll:
			if w, _ = d.watch(d.path); w != nil {
				d.log.Info("watching manifests directory again", "dir", d.path)
			}
			reload(true)
		case <-settle.C:
			reload(false)
		}
	}
}

// loaded is the result of one load.
type loaded struct {
	svcs     []*v1.Service
	refused  []*v1.Service // failed validation with no good version: see Sink
	eps      []*discovery.EndpointSlice
	problems []*ObjectError
}

func (l loaded) equal(o loaded) bool {
	if !reflect.DeepEqual(l.svcs, o.svcs) || !reflect.DeepEqual(l.refused, o.refused) || !reflect.DeepEqual(l.eps, o.eps) ||
		len(l.problems) != len(o.problems) {
		return false
	}
	for i := range l.problems {
		if l.problems[i].Error() != o.problems[i].Error() {
			return false
		}
	}
	return true
}

func watchDir(path string) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(path); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// relevant reports whether an event can change what Load reads. Names starting with ".."
// are the data link Kubernetes swaps when it updates a ConfigMap volume.
func relevant(name string) bool {
	base := filepath.Base(name)
	return isManifestName(base) || strings.HasPrefix(base, "..")
}

func (d *Dir) publish(sink Sink, changed func(), l loaded) {
	sink.ReplaceAll(l.svcs, l.refused, l.eps)
	stored := make([]error, len(l.problems))
	for i, p := range l.problems {
		stored[i] = p
	}
	d.mu.Lock()
	d.problems = stored
	d.mu.Unlock()
	d.log.Info("manifests loaded", "dir", d.path, "services", len(l.svcs), "refused", len(l.refused), "endpointslices", len(l.eps), "problems", len(l.problems))
	for _, p := range l.problems {
		d.log.Warn("manifest problem", "file", p.File, "line", p.Line, "kind", p.Kind, "object", p.Object(),
			"field", p.Field, "error", p.Err.Error())
	}
	if changed != nil {
		changed()
	}
}
