package manifests

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
)

const waitLimit = 5 * time.Second

// recorder is a Sink that keeps the last state it was given.
type recorder struct {
	mu      sync.Mutex
	last    []string
	calls   int
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) ReplaceAll(svcs, refused []*v1.Service, eps []*discovery.EndpointSlice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.last = state(svcs, eps)
	for _, s := range refused {
		r.last = append(r.last, "refused "+s.Namespace+"/"+s.Name)
	}
	r.calls++
}

// notify is passed to Run as changed.
func (r *recorder) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds after a load, at most waitLimit.
func (r *recorder) waitFor(t *testing.T, what string, cond func(state []string) bool) {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		r.mu.Lock()
		ok := r.calls > 0 && cond(r.last)
		last := r.last
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("%s: not seen within %v; last state %v", what, waitLimit, last)
		}
	}
}

func (r *recorder) waitState(t *testing.T, what string, want ...string) {
	t.Helper()
	r.waitFor(t, what, func(got []string) bool { return cmp.Equal(want, got) })
}

// startDir runs d until the test ends and fails the test if Run fails or does not stop.
func startDir(t *testing.T, d *Dir, sink *recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, sink, sink.notify) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Run did not return after cancel")
		}
	})
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestDirFollowsChanges(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, service("web", "10.96.0.10", "80"))
	var logs testkit.Buffer
	d := NewDir(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	sink := newRecorder()
	startDir(t, d, sink)
	sink.waitState(t, "initial load", "svc default/web:80")

	writeFile(t, a, service("web", "10.96.0.10", "81"))
	sink.waitState(t, "write", "svc default/web:81")

	// What vim and most editors do on save: write a temporary file, rename it over.
	tmp := filepath.Join(dir, ".a.yaml.tmp")
	writeFile(t, tmp, service("web", "10.96.0.10", "82"))
	if err := os.Rename(tmp, a); err != nil {
		t.Fatal(err)
	}
	sink.waitState(t, "rename over", "svc default/web:82")

	writeFile(t, b, service("api", "10.96.0.11", "80"))
	sink.waitState(t, "new file", "svc default/api:80", "svc default/web:82")

	if err := os.Remove(a); err != nil {
		t.Fatal(err)
	}
	sink.waitState(t, "deletion", "svc default/api:80")

	writeFile(t, b, service("api", "10.96.0.11", "0"))
	waitProblem(t, d, "Invalid value")
	want := []string{"b.yaml: Service default/api: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535"}
	if diff := cmp.Diff(want, problemStrings(d.Problems())); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	sink.waitState(t, "invalid edit keeps the last good version", "svc default/api:80")
	wantLog := `msg="manifest problem" file=b.yaml line=1 kind=Service object=default/api field=spec.ports[0].port`
	if !strings.Contains(logs.String(), wantLog) {
		t.Errorf("log has no line with %s:\n%s", wantLog, logs.String())
	}
}

// waitProblem waits until a problem of the latest load contains text.
func waitProblem(t *testing.T, d *Dir, text string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !strings.Contains(strings.Join(problemStrings(d.Problems()), "\n"), text) {
		if time.Now().After(deadline) {
			t.Fatalf("no problem with %q within %v; problems: %v", text, waitLimit, d.Problems())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDirMissing(t *testing.T) {
	d := NewDir(filepath.Join(t.TempDir(), "absent"), nil)
	sink := newRecorder()
	err := d.Run(context.Background(), sink, sink.notify)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Run on a missing directory: %v, want a not-exist error", err)
	}
	if sink.calls != 0 {
		t.Errorf("sink called %d times for a missing directory", sink.calls)
	}
}

func TestDirPollsWithoutWatch(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	writeFile(t, a, service("web", "10.96.0.10", "80"))
	d := NewDir(dir, nil)
	d.watch = func(string) (*fsnotify.Watcher, error) { return nil, errors.New("inotify instances exhausted") }
	d.poll = 20 * time.Millisecond
	sink := newRecorder()
	startDir(t, d, sink)
	sink.waitState(t, "initial load", "svc default/web:80")
	writeFile(t, a, service("web", "10.96.0.10", "81"))
	sink.waitState(t, "write seen by polling", "svc default/web:81")

	sink.mu.Lock()
	before := sink.calls
	sink.mu.Unlock()
	time.Sleep(10 * d.poll)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.calls != before {
		t.Errorf("polling an unchanged directory published %d more times", sink.calls-before)
	}
}

func TestDirRemovedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), service("web", "10.96.0.10", "80"))
	var logs testkit.Buffer
	d := NewDir(dir, slog.New(slog.NewTextHandler(&logs, nil)))
	d.poll = 20 * time.Millisecond
	sink := newRecorder()
	startDir(t, d, sink)
	sink.waitState(t, "initial load", "svc default/web:80")

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	waitProblem(t, d, "read manifests directory")
	sink.waitState(t, "a vanished directory keeps everything", "svc default/web:80")

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), service("web", "10.96.0.10", "81"))
	sink.waitState(t, "recreated directory", "svc default/web:81")
	// Watching again: a later write is seen too.
	writeFile(t, filepath.Join(dir, "a.yaml"), service("web", "10.96.0.10", "82"))
	sink.waitState(t, "write after recreation", "svc default/web:82")
	for _, msg := range []string{"manifests directory went away", "watching manifests directory again"} {
		if !strings.Contains(logs.String(), msg) {
			t.Errorf("log has no %q:\n%s", msg, logs.String())
		}
	}
}
