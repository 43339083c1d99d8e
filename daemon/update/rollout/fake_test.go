package rollout_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/daemon/update/rollout"
	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
)

// fakeBundle is what the fake updater reads: a header line "FAKEBUNDLE <board> <version>
// <n>", n payload bytes, and trailing bytes that it never reads (a real bundle's padding
// after the archive's end), so that a digest over only what the updater read would differ
// from the file's.
func fakeBundle(board, version string) []byte {
	payload := strings.Repeat("kernel+initramfs of "+version+"\n", 2000)
	return []byte(fmt.Sprintf("FAKEBUNDLE %s %s %d\n%s%s", board, version, len(payload), payload, strings.Repeat("\x00", 1024)))
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fakeUpdater stands in for update.Manager, with the same rules where the rollout relies
// on them: one step at a time, a bundle for another board or not newer is refused, Activate
// switches and reboots, a reboot into new firmware is a trial until it commits, and one
// into firmware that does not prove healthy comes back on the old slot, rolled back.
type fakeUpdater struct {
	mu        sync.Mutex
	board     string
	version   string
	slot      layout.Slot
	problem   string // updates unavailable
	pending   *update.Attempt
	history   []update.Attempt
	trial     *update.Trial
	rebooting bool
	seq       int

	// healthy says whether a version proves healthy after the reboot.
	healthy func(version string) bool
	// onReboot is the machine's reboot (the harness restarts the gateway's controller).
	onReboot func()

	installs    []update.Request
	activations int
	cancels     []string
}

var _ rollout.Updater = (*fakeUpdater)(nil)

func newFakeUpdater(board, version string) *fakeUpdater {
	return &fakeUpdater{board: board, version: version, slot: layout.SlotA, healthy: func(string) bool { return true }}
}

func (f *fakeUpdater) Status() update.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := update.Status{Available: f.problem == "", Problem: f.problem, Board: f.board, Version: f.version, Slot: f.slot,
		Rebooting: f.rebooting, History: append([]update.Attempt(nil), f.history...)}
	if f.pending != nil {
		p := *f.pending
		st.Pending = &p
	}
	if f.trial != nil {
		t := *f.trial
		st.Trial = &t
	}
	return st
}

func (f *fakeUpdater) busyLocked() error {
	switch {
	case f.problem != "":
		return fmt.Errorf("%w: %s", update.ErrUnavailable, f.problem)
	case f.rebooting, f.trial != nil:
		return fmt.Errorf("%w: rebooting or on trial", update.ErrBusy)
	case f.pending != nil && f.pending.Phase != update.PhaseStaged:
		return fmt.Errorf("%w: another update step is running", update.ErrBusy)
	}
	return nil
}

func (f *fakeUpdater) endLocked(phase update.Phase, reason string) update.Attempt {
	a := *f.pending
	a.Phase, a.Reason, a.Ended = phase, reason, time.Now()
	f.history = append([]update.Attempt{a}, f.history...)
	f.pending = nil
	return a
}

func (f *fakeUpdater) Install(ctx context.Context, r io.Reader, req update.Request) (update.Attempt, error) {
	f.mu.Lock()
	if err := f.busyLocked(); err != nil {
		f.mu.Unlock()
		return update.Attempt{}, err
	}
	f.installs = append(f.installs, req)
	f.seq++
	a := update.Attempt{ID: fmt.Sprintf("attempt-%d", f.seq), Source: req.Source, Phase: update.PhaseReceiving, Started: time.Now(),
		From: update.Firmware{Slot: f.slot, Version: f.version}, To: update.Firmware{Slot: f.slot.Other()}}
	running := f.version
	f.mu.Unlock()

	refuse := func(err error) (update.Attempt, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		a.Phase, a.Reason, a.Ended = update.PhaseRefused, err.Error(), time.Now()
		f.history = append([]update.Attempt{a}, f.history...)
		return a, fmt.Errorf("%w: %w", update.ErrRefused, err)
	}
	br := bufio.NewReader(r)
	line, err := br.ReadString('\n')
	if err != nil {
		return refuse(fmt.Errorf("reading the header: %w", err))
	}
	var board, version string
	var n int64
	if _, err := fmt.Sscanf(line, "FAKEBUNDLE %s %s %d\n", &board, &version, &n); err != nil {
		return refuse(fmt.Errorf("not a fake bundle: %w", err))
	}
	if board != f.board {
		return refuse(fmt.Errorf("bundle is for board %s, this gateway is %s", board, f.board))
	}
	if !req.Force {
		v, err1 := bundle.ParseVersion(version)
		w, err2 := bundle.ParseVersion(running)
		if err1 != nil || err2 != nil || v.Compare(w) <= 0 {
			return refuse(fmt.Errorf("bundle %s is not newer than the running %s", version, running))
		}
	}
	got, err := io.Copy(io.Discard, io.LimitReader(br, n))
	if err == nil && got < n {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return refuse(fmt.Errorf("reading the parts: %w", err))
	}
	if err := ctx.Err(); err != nil {
		return refuse(err)
	}
	f.mu.Lock()
	a.Phase, a.To.Version, a.Bytes = update.PhaseStaged, version, int64(len(line))+n
	if f.pending != nil {
		f.endLocked(update.PhaseCancelled, "superseded by update "+a.ID)
	}
	p := a
	f.pending = &p
	f.mu.Unlock()
	if req.Activate {
		return f.Activate()
	}
	return a, nil
}

func (f *fakeUpdater) Activate() (update.Attempt, error) {
	f.mu.Lock()
	if err := f.busyLocked(); err != nil {
		f.mu.Unlock()
		return update.Attempt{}, err
	}
	if f.pending == nil || f.pending.Phase != update.PhaseStaged {
		f.mu.Unlock()
		return update.Attempt{}, update.ErrNothingStaged
	}
	f.pending.Phase, f.pending.Tries = update.PhaseTrial, 2
	f.rebooting = true
	f.activations++
	a := *f.pending
	reboot := f.onReboot
	f.mu.Unlock()
	if reboot != nil {
		// As the real updater does, a moment later: the caller gets its answer first.
		go reboot()
	}
	return a, nil
}

func (f *fakeUpdater) Cancel(source string) (update.Attempt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.busyLocked(); err != nil {
		return update.Attempt{}, err
	}
	if f.pending == nil || f.pending.Phase != update.PhaseStaged {
		return update.Attempt{}, update.ErrNothingStaged
	}
	f.cancels = append(f.cancels, source)
	return f.endLocked(update.PhaseCancelled, "cancelled by "+source), nil
}

// boot is the machine coming up again after Activate's reboot: on the new slot on trial
// when the new firmware proves healthy (commit ends the trial), else on the old slot with
// the attempt rolled back. It reports whether the new firmware runs.
func (f *fakeUpdater) boot() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rebooting = false
	p := f.pending
	if p == nil || p.Phase != update.PhaseTrial {
		return false
	}
	if !f.healthy(p.To.Version) {
		f.endLocked(update.PhaseRolledBack, fmt.Sprintf("the new firmware did not prove healthy in 2 boot(s) of slot %s; slot %s booted again", f.slot.Other(), f.slot))
		return false
	}
	f.version, f.slot = p.To.Version, p.To.Slot
	p.TrialBoots = 1
	f.trial = &update.Trial{Boot: 1, Tries: 2, Started: time.Now(), Deadline: time.Now().Add(time.Minute), Waiting: "rules not programmed yet"}
	return true
}

// commit ends a trial: the new firmware proved healthy.
func (f *fakeUpdater) commit() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trial == nil || f.pending == nil {
		return
	}
	f.trial = nil
	f.endLocked(update.PhaseCommitted, "")
}

func (f *fakeUpdater) counts() (installs []update.Request, activations int, cancels []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]update.Request(nil), f.installs...), f.activations, append([]string(nil), f.cancels...)
}

// drainLog records every gateway's Drain calls in one order.
type drainLog struct {
	mu     sync.Mutex
	events []string // "gw1 on", "gw1 off"
}

func (d *drainLog) record(gw string) func(bool) {
	return func(on bool) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.events = append(d.events, fmt.Sprintf("%s %s", gw, map[bool]string{true: "on", false: "off"}[on]))
	}
}

func (d *drainLog) get() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.events...)
}

// overlaps returns the moments two gateways were drained at once; a gateway drained by the
// rollout stays out of service across its reboot until its firmware undrains it.
func (d *drainLog) overlaps() []string {
	drained := map[string]bool{}
	var bad []string
	for _, e := range d.get() {
		gw, state, _ := strings.Cut(e, " ")
		drained[gw] = state == "on"
		var on []string
		for g, ok := range drained {
			if ok {
				on = append(on, g)
			}
		}
		if len(on) > 1 {
			bad = append(bad, fmt.Sprintf("after %q: %v drained", e, on))
		}
	}
	return bad
}

// gateway runs one gateway's rollout controller, restarting it when the fake updater
// reboots the machine; the new firmware commits once release is closed (or at once when
// commitAt is nil).
type gateway struct {
	t       *testing.T
	name    string
	upd     *fakeUpdater
	newCtrl func() *rollout.Controller

	mu       sync.Mutex
	stopRun  context.CancelFunc
	done     chan struct{}
	boots    int
	commitAt chan struct{}
}

func newGateway(t *testing.T, name string, upd *fakeUpdater, commit chan struct{}, newCtrl func() *rollout.Controller) *gateway {
	g := &gateway{t: t, name: name, upd: upd, newCtrl: newCtrl, commitAt: commit}
	upd.mu.Lock()
	upd.onReboot = g.reboot
	upd.mu.Unlock()
	g.start()
	t.Cleanup(g.stop)
	return g
}

func (g *gateway) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c := g.newCtrl()
	g.mu.Lock()
	g.stopRun, g.done = cancel, done
	g.boots++
	g.mu.Unlock()
	go func() {
		defer close(done)
		if err := c.Run(ctx); err != nil {
			g.t.Errorf("gateway %s: %v", g.name, err)
		}
	}()
}

func (g *gateway) stop() {
	g.mu.Lock()
	cancel, done := g.stopRun, g.done
	g.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// reboot is what Activate sets off: the controller stops (the daemon goes down), the
// machine boots the new or the old slot, and a new controller starts; on the new slot the
// updater commits when the harness lets it.
func (g *gateway) reboot() {
	g.stop()
	trial := g.upd.boot()
	g.start()
	if trial {
		g.mu.Lock()
		wait := g.commitAt
		g.mu.Unlock()
		go func() {
			if wait != nil {
				<-wait
			}
			g.upd.commit()
		}()
	}
}

func (g *gateway) bootCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.boots
}

// bundleServer serves bundles by path and counts the requests.
type bundleServer struct {
	*httptest.Server
	mu       sync.Mutex
	files    map[string][]byte
	requests map[string]int
}

func newBundleServer(t *testing.T) *bundleServer {
	s := &bundleServer{files: map[string][]byte{}, requests: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests[r.URL.Path]++
		b, ok := s.files[r.URL.Path]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

// add serves b at path and returns its URL and digest.
func (s *bundleServer) add(path string, b []byte) (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = b
	return s.URL + path, digest(b)
}

func (s *bundleServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[path]
}

// testLogger logs into the test's output until the test ends; a controller still logging
// after that is dropped.
func testLogger(t *testing.T) *slog.Logger {
	return testkit.Logger(t, &slog.HandlerOptions{Level: slog.LevelDebug})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, within, 20*time.Millisecond, cond)
}
