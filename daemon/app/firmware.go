package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/edgegate/edgegate/daemon/pid1"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/firmware/layout"
)

// Firmware is what the daemon gets from PID 1 when it runs as the gateway's firmware.
type Firmware struct {
	// ready tells PID 1 a sync succeeded (its first prints EDGEGATE-READY).
	ready func()
	// updates is the A/B updater of this boot; its Status says when updates are unavailable.
	updates *update.Manager
	// health is the daemon's part of a trial boot's health check.
	health *daemonHealth
}

// daemonHealth is what the running daemon says of its health: the daemon installs a check
// while it runs (source loaded, rules programmed, cluster joined) and removes it when it
// stops, so that a daemon that panics in a loop is not healthy.
type daemonHealth struct {
	check atomic.Pointer[func() error]
}

var errDaemonNotRunning = errors.New("the daemon is not running")

func (h *daemonHealth) set(check func() error) {
	if check == nil {
		h.check.Store(nil)
		return
	}
	h.check.Store(&check)
}

func (h *daemonHealth) err() error {
	c := h.check.Load()
	if c == nil {
		return errDaemonNotRunning
	}
	return (*c)()
}

// boardFile is where the initramfs names its board (initramfs/build.go).
const boardFile = "/etc/edgegate/board"

var (
	firmwareOnce   sync.Once
	firmwareOfPID1 *Firmware
)

// FirmwareFor sets up the updater once per boot, before the daemon's configuration is
// known to be good: a new firmware whose daemon cannot even start must still reboot at its
// trial deadline, so that the old slot comes back. cfg is used when it parsed; version is
// the daemon's, the firmware's own.
func FirmwareFor(m *pid1.Machine, cfg Config, cfgErr error, version string) *Firmware {
	firmwareOnce.Do(func() {
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
		h := &daemonHealth{}
		mgr := update.New(update.Options{
			ESP: esp, StateDir: filepath.Join(stateDir, "update"), Slot: m.Slot(),
			Board: strings.TrimSpace(string(board)), Version: version, Keys: keys,
			Tries: uc.Tries, TrialTimeout: uc.TrialTimeout.Duration,
			Health: func() error {
				if err := m.NetworkProblem(); err != nil {
					return err
				}
				return h.err()
			},
			Reboot: m.Reboot, Marker: m.Marker, Log: log,
		})
		go mgr.Start(context.Background())
		firmwareOfPID1 = &Firmware{ready: m.Ready, updates: mgr, health: h}
	})
	return firmwareOfPID1
}

// machineESP is the EFI system partition PID 1 mounted.
type machineESP struct {
	m    *pid1.Machine
	root string
}

func (e machineESP) Root() string                   { return e.root }
func (e machineESP) Writable(fn func() error) error { return e.m.ESPWritable(fn) }
