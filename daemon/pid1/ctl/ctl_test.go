package ctl

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/update"
)

// wait bounds what a test waits for; it is never slept.
const wait = 10 * time.Second

type fakeMachine struct {
	mu      sync.Mutex
	ready   int
	reports []Report
	pids    []int
}

func (m *fakeMachine) Ready() { m.mu.Lock(); m.ready++; m.mu.Unlock() }

func (m *fakeMachine) Report(pid int, r Report) Child {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reports = append(m.reports, r)
	m.pids = append(m.pids, pid)
	return Child{Run: 2, Restarts: map[Reason]int{ReasonPanic: 1}, LastExit: "panic"}
}

// fakeUpdater refuses bundles that start with "bad", is busy while busy is set, and
// otherwise stages what it reads.
type fakeUpdater struct {
	mu       sync.Mutex
	staged   string
	busy     bool
	onChange []func()
}

func (u *fakeUpdater) Status() update.Status {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := update.Status{Available: true, Version: "v1"}
	if u.staged != "" {
		s.Pending = &update.Attempt{Source: u.staged}
	}
	return s
}

func (u *fakeUpdater) Install(_ context.Context, r io.Reader, req update.Request) (update.Attempt, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return update.Attempt{Source: req.Source}, err
	}
	u.mu.Lock()
	if u.busy {
		u.mu.Unlock()
		return update.Attempt{}, update.ErrBusy
	}
	if strings.HasPrefix(string(b), "bad") {
		u.mu.Unlock()
		return update.Attempt{Source: req.Source, Reason: "bad signature"}, errors.Join(update.ErrRefused, errors.New("bad signature"))
	}
	u.staged = req.Source
	fns := u.onChange
	u.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	return update.Attempt{Source: req.Source, Bytes: int64(len(b))}, nil
}

func (u *fakeUpdater) Activate() (update.Attempt, error) {
	return update.Attempt{}, update.ErrNothingStaged
}

func (u *fakeUpdater) Cancel(source string) (update.Attempt, error) {
	return update.Attempt{Source: source}, nil
}

func (u *fakeUpdater) OnChange(fn func()) {
	u.mu.Lock()
	u.onChange = append(u.onChange, fn)
	u.mu.Unlock()
}

// serve runs a server on a socket in a temporary directory; child says which process
// IDs it answers.
func serve(t *testing.T, m Machine, u update.Updater, child func(int) bool) *Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pid1.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode: %v, %v; want 0600", fi.Mode(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- NewServer(m, u, child, slog.New(slog.DiscardHandler)).Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return Dial(path, slog.New(slog.DiscardHandler))
}

func ownProcess(pid int) bool { return pid == os.Getpid() }

func TestReadyAndReport(t *testing.T) {
	m := &fakeMachine{}
	c := serve(t, m, nil, ownProcess)
	ctx := context.Background()
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	rep := Report{Components: []Component{{Name: "sync", Live: true}, {Name: "lb", Live: false, Detail: "no heartbeat for 1m"}}, Problem: "rules not programmed"}
	ch, err := c.Report(ctx, rep)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Run != 2 || ch.Restarts[ReasonPanic] != 1 || ch.LastExit != "panic" {
		t.Errorf("child = %+v", ch)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ready != 1 || len(m.reports) != 1 || m.pids[0] != os.Getpid() {
		t.Fatalf("machine saw ready=%d reports=%v pids=%v", m.ready, m.reports, m.pids)
	}
	if got := m.reports[0].Stuck(); len(got) != 1 || got[0] != "lb (no heartbeat for 1m)" {
		t.Errorf("Stuck() = %q", got)
	}
	if got := (Report{Components: []Component{{Name: "routes"}}}).Stuck(); len(got) != 1 || got[0] != "routes" {
		t.Errorf("Stuck() without a detail = %q, want [routes]", got)
	}
	if m.reports[0].Problem != rep.Problem {
		t.Errorf("problem = %q", m.reports[0].Problem)
	}
}

// TestOnlyTheChildIsAnswered: a process that is not PID 1's current child gets nothing
// done.
func TestOnlyTheChildIsAnswered(t *testing.T) {
	m := &fakeMachine{}
	c := serve(t, m, &fakeUpdater{}, func(int) bool { return false })
	err := c.Ready(context.Background())
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("Ready from a stranger: %v, want 403", err)
	}
	if _, err := c.Install(context.Background(), strings.NewReader("bundle"), update.Request{Source: "x"}); err == nil {
		t.Fatal("Install from a stranger succeeded")
	}
	if m.ready != 0 {
		t.Fatal("a stranger's ready was counted")
	}
}

func TestUpdaterErrorsKeepTheirKind(t *testing.T) {
	u := &fakeUpdater{}
	c := serve(t, &fakeMachine{}, u, ownProcess)
	ctx := context.Background()

	a, err := c.Install(ctx, strings.NewReader("bad bundle"), update.Request{Source: "upload"})
	if !errors.Is(err, update.ErrRefused) || errors.Is(err, update.ErrBusy) || a.Reason != "bad signature" {
		t.Fatalf("bad bundle: %+v, %v; want refused with its attempt", a, err)
	}
	if !strings.Contains(err.Error(), "bad signature") {
		t.Errorf("message lost: %v", err)
	}
	if _, err := c.Activate(); !errors.Is(err, update.ErrNothingStaged) {
		t.Errorf("Activate: %v", err)
	}
	u.busy = true
	if _, err := c.Install(ctx, strings.NewReader("good"), update.Request{Source: "upload"}); !errors.Is(err, update.ErrBusy) {
		t.Errorf("busy: %v", err)
	}
	u.busy = false
	a, err = c.Install(ctx, strings.NewReader("good bundle"), update.Request{Source: "rollout r1", Force: true})
	if err != nil || a.Bytes != int64(len("good bundle")) || a.Source != "rollout r1" {
		t.Fatalf("good bundle: %+v, %v", a, err)
	}
	if s := c.Status(); !s.Available || s.Pending == nil || s.Pending.Source != "rollout r1" {
		t.Errorf("status: %+v", s)
	}
	if a, err := c.Cancel("operator"); err != nil || a.Source != "operator" {
		t.Errorf("Cancel: %+v, %v", a, err)
	}
}

// TestUploadErrorsStayTheReaders: an upload cut off on the daemon's side is reported with the
// reader's own error, not as the updater's.
func TestUploadErrorsStayTheReaders(t *testing.T) {
	c := serve(t, &fakeMachine{}, &fakeUpdater{}, ownProcess)
	tooSlow := errors.New("upload too slow")
	_, err := c.Install(context.Background(), io.MultiReader(strings.NewReader("part"), errReader{tooSlow}), update.Request{})
	if !errors.Is(err, tooSlow) {
		t.Fatalf("Install = %v, want the reader's error", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestOnChangeFollowsTheUpdater(t *testing.T) {
	u := &fakeUpdater{}
	c := serve(t, &fakeMachine{}, u, ownProcess)
	changes := make(chan struct{}, 10)
	c.OnChange(func() { changes <- struct{}{} })
	for i := range 3 {
		if _, err := c.Install(context.Background(), strings.NewReader("good"), update.Request{Source: "s"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changes:
		case <-time.After(wait):
			t.Fatalf("change %d not seen", i+1)
		}
	}
}

func TestNoUpdaterSaysUnavailable(t *testing.T) {
	c := serve(t, &fakeMachine{}, nil, ownProcess)
	if _, err := c.Install(context.Background(), strings.NewReader("b"), update.Request{}); !errors.Is(err, update.ErrUnavailable) {
		t.Fatalf("Install = %v", err)
	}
	if s := c.Status(); s.Available {
		t.Fatalf("status = %+v", s)
	}
}

func TestDeadPID1(t *testing.T) {
	c := Dial(filepath.Join(t.TempDir(), "nobody.sock"), slog.New(slog.DiscardHandler))
	if err := c.Ready(context.Background()); err == nil {
		t.Fatal("Ready without PID 1 succeeded")
	}
	if s := c.Status(); s.Available || !strings.Contains(s.Problem, "does not answer") {
		t.Fatalf("status = %+v", s)
	}
}
