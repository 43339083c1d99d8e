package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgegate/edgegate/daemon/pid1"
	"github.com/edgegate/edgegate/daemon/pid1/ctl"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/firmware/efivar"
	"github.com/edgegate/edgegate/firmware/layout"
)

// Firmware is what the daemon gets from PID 1 when it runs as the gateway's firmware (as
// PID 1's child process, see Child).
type Firmware struct {
	// ready tells PID 1 a sync succeeded (its first prints EDGEGATE-READY).
	ready func()
	// updates is PID 1's A/B updater, reached over the control socket; its Status says when
	// updates are unavailable.
	updates update.Updater
	// health is the daemon's part of a trial boot's health check and of its liveness, which
	// the daemon reports to PID 1 every second.
	health *daemonHealth
	// reports reach PID 1; child is what PID 1 last answered about the daemon's runs.
	reports interface {
		Report(ctx context.Context, r ctl.Report) (ctl.Child, error)
	}
	child atomic.Pointer[ctl.Child]
}

var _ update.Updater = (*ctl.Client)(nil)

// daemonHealth is what the running daemon says of its health: the daemon installs a check
// while it runs (source loaded, rules programmed, cluster joined) and removes it when it
// stops, and the liveness of its long-running parts (the sync loop).
type daemonHealth struct {
	// stuckAfter is how long one sync may run before the sync loop counts as stuck.
	stuckAfter time.Duration
	check      atomic.Pointer[func() error]
	liveness   atomic.Pointer[func() []ctl.Component]
}

var errDaemonNotRunning = errors.New("the daemon is not running")

func (h *daemonHealth) set(check func() error, liveness func() []ctl.Component) {
	if check == nil {
		h.check.Store(nil)
		h.liveness.Store(nil)
		return
	}
	h.check.Store(&check)
	h.liveness.Store(&liveness)
}

func (h *daemonHealth) err() error {
	c := h.check.Load()
	if c == nil {
		return errDaemonNotRunning
	}
	return (*c)()
}

// report is the report the daemon sends PID 1 now.
func (h *daemonHealth) report() ctl.Report {
	var r ctl.Report
	if err := h.err(); err != nil {
		r.Problem = err.Error()
	}
	if l := h.liveness.Load(); l != nil {
		r.Components = (*l)()
	}
	return r
}

// boardFile is where the initramfs names its board (initramfs/build.go).
const boardFile = "/etc/edgegate/board"

// Updater is the firmware's A/B updater, which PID 1 runs and serves to the daemon: set up
// once per boot, before the daemon's configuration is known to be good (cfgErr), since a
// new firmware whose daemon cannot even start must still reboot at its trial deadline.
// cfg is used when it parsed; version is the daemon's, the firmware's own.
func Updater(m *pid1.Machine, cfg Config, cfgErr error, version string) update.Updater {
	log := m.Log().With("component", "update")
	uc, stateDir := defaults().Update, defaults().StateDir
	if cfgErr == nil {
		uc, stateDir = cfg.Update, cfg.StateDir
	}
	keys, err := update.LoadKeys(layout.KeysDir)
	if err != nil {
		log.Error("trusted update keys unreadable", "err", err)
	}
	board, err := os.ReadFile(boardFile)
	if err != nil {
		log.Error("the firmware's board is unknown", "file", boardFile, "err", err)
	}
	var esp update.ESP
	if root, ok := m.ESP(); ok {
		esp = machineESP{m: m, root: root}
	}
	mgr := update.New(update.Options{
		ESP: esp, Loader: efivar.Store{}, StateDir: filepath.Join(stateDir, "update"), Slot: m.Slot(),
		Board: strings.TrimSpace(string(board)), Version: version, Keys: keys,
		Tries: uc.Tries, TrialTimeout: uc.TrialTimeout.Duration,
		Health: func() error {
			if err := m.NetworkProblem(); err != nil {
				return err
			}
			return m.DaemonProblem()
		},
		Reboot: m.Reboot, Marker: m.Marker, Log: log,
	})
	// The updater runs in PID 1's process: its trial check runs supervised, so a panic in it
	// is logged and the check starts again instead of taking PID 1 down; its actions run on
	// the control server's request goroutines, whose panics net/http recovers.
	go pid1.Supervise(context.Background(), "update", func(ctx context.Context) error {
		mgr.Start(ctx)
		<-ctx.Done()
		return nil
	}, log)
	return mgr
}

// machineESP is the EFI system partition PID 1 mounted.
type machineESP struct {
	m    *pid1.Machine
	root string
}

func (e machineESP) Root() string                   { return e.root }
func (e machineESP) Writable(fn func() error) error { return e.m.ESPWritable(fn) }
