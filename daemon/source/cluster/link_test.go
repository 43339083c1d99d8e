package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestLinkState(t *testing.T) {
	// Every reading of the clock is one second later than the last.
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	clock := func() time.Time { now = now.Add(time.Second); return now }
	var logs strings.Builder
	l := newLinkState(clock, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	names := []string{"services", "nodes"}
	steps := []struct {
		name string
		do   func()
		want Link
	}{
		{"nothing yet", func() {}, Link{}},
		{"lists ok", func() { l.listed("services", nil); l.listed("nodes", nil) },
			Link{Reachable: true, LastSuccess: t0.Add(2 * time.Second)}},
		{"one watch", func() { l.watchStarted("services", nil) },
			Link{Reachable: true, LastSuccess: t0.Add(3 * time.Second)}},
		{"both watches", func() { l.watchStarted("nodes", nil) },
			Link{Reachable: true, WatchesHealthy: true, LastSuccess: t0.Add(4 * time.Second)}},
		{"connection lost", func() { l.watchEnded("nodes", io.ErrUnexpectedEOF) },
			Link{LastSuccess: t0.Add(4 * time.Second), LastError: "unexpected EOF", LastErrorAt: t0.Add(5 * time.Second)}},
		{"refused relist", func() { l.listed("nodes", errRefused) },
			Link{LastSuccess: t0.Add(4 * time.Second), LastError: errRefused.Error(), LastErrorAt: t0.Add(6 * time.Second)}},
		// A refusal by RBAC is an answer: the server is there, the watch is not.
		{"forbidden", func() {
			l.listed("nodes", apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no")))
		}, Link{Reachable: true, LastSuccess: t0.Add(4 * time.Second),
			LastError: `nodes is forbidden: no`, LastErrorAt: t0.Add(7 * time.Second)}},
		{"watching again", func() { l.listed("nodes", nil); l.watchStarted("nodes", nil) },
			Link{Reachable: true, WatchesHealthy: true, LastSuccess: t0.Add(9 * time.Second),
				LastError: `nodes is forbidden: no`, LastErrorAt: t0.Add(7 * time.Second)}},
		{"shutdown is not a failure", func() { l.watchEnded("nodes", context.Canceled) },
			Link{Reachable: true, WatchesHealthy: true, LastSuccess: t0.Add(9 * time.Second),
				LastError: `nodes is forbidden: no`, LastErrorAt: t0.Add(7 * time.Second)}},
	}
	for _, s := range steps {
		s.do()
		if got := l.state(names); got != s.want {
			t.Errorf("%s:\n got %+v\nwant %+v", s.name, got, s.want)
		}
	}
	for _, want := range []string{"the API server answers", "lost the API server", "list/watch failed"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}

func TestLinkWatchFailure(t *testing.T) {
	client := fake.NewClientset(web())
	// Services list fine but cannot be watched: synced, yet not following changes.
	client.PrependWatchReactor("services", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, errRefused
	})
	s := start(t, client, Options{}, nil)
	waitReady(t, s.src)
	waitFor(t, "a failed watch", func() bool { return s.src.Link().LastError != "" })
	lk := s.src.Link()
	if lk.WatchesHealthy || !lk.Synced || !strings.Contains(lk.LastError, "connection refused") {
		t.Errorf("link with a refused services watch: %+v", lk)
	}
	if got := s.sink.keys(); len(got) != 1 {
		t.Errorf("the listed service is served anyway: sink %v", got)
	}
}
