// Package update installs signed firmware bundles into the inactive A/B slot, lets the boot
// loader try the new slot once at a time, commits it once the new firmware is healthy, and
// records what happened (DESIGN.md §7, firmware/layout).
//
// What boots by default is decided by the entries on the EFI system partition alone, so
// that no state file can make the gateway boot a slot that is not ready: an update streams
// the bundle into temporary files, verifies them as they arrive and again from the disk,
// then removes the inactive slot's entry before it replaces the slot's files, and only then
// writes the slot's entry as a trial (never booted by default) and arms systemd-boot's
// one-shot variable for it. The new firmware commits by renaming its entry to drop the
// counter after it proved healthy; when it does not (a panic before or after PID 1 starts,
// a hang, a failed health check that reboots it), the next boot is the committed slot's,
// whose firmware arms the next try or, with the tries spent, records the rollback. The
// state file on the data partition is the report (each attempt's phases with their times)
// and counts the tries.
package update

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgegate/edgegate/firmware/bundle"
	"github.com/edgegate/edgegate/firmware/layout"
)

// Defaults of Options.
const (
	// DefaultTries is how many boots the new firmware gets to prove itself: one more than
	// needed, so that a power cut during the trial boot does not throw a good update away.
	// Between two tries the committed firmware boots and arms the next.
	DefaultTries = 2
	// DefaultTrialTimeout bounds a trial boot from the updater's start to healthy.
	DefaultTrialTimeout = 5 * time.Minute
	// rebootDelay lets the answer to the request that switched the slot reach its client.
	rebootDelay = time.Second
	// healthPoll is how often a trial boot looks at the health.
	healthPoll = 250 * time.Millisecond
)

// Errors callers branch on.
var (
	// ErrUnavailable: this gateway cannot update itself (not booted from an A/B disk, no
	// trusted keys, an unreadable ESP); the error says which.
	ErrUnavailable = errors.New("updates unavailable")
	// ErrBusy: another update step is running, or the gateway is rebooting or on trial.
	ErrBusy = errors.New("update in progress")
	// ErrRefused: the bundle was refused before anything was written.
	ErrRefused = errors.New("bundle refused")
	// ErrNothingStaged: Activate or Cancel without a staged update.
	ErrNothingStaged = errors.New("no staged update")
)

// Options configure a Manager.
type Options struct {
	// ESP is the EFI system partition the slots are on.
	ESP ESP
	// Loader is the boot loader's one-shot choice; updates are unavailable without it.
	Loader BootLoader
	// StateDir holds the update state and history (on the data partition); "" keeps them in
	// memory.
	StateDir string
	// Slot is the slot that booted (edgegate.slot= on the kernel command line); "" when the
	// firmware did not boot from an A/B disk.
	Slot layout.Slot
	// Board and Version are the running firmware's.
	Board, Version string
	// Keys are the signing keys baked into the running firmware (layout.KeysDir): trusted
	// until a committed firmware rotated them (the trust record).
	Keys []bundle.PublicKey
	// Tries is the new slot's boot tries; 0 means DefaultTries.
	Tries int
	// TrialTimeout bounds a trial boot; 0 means DefaultTrialTimeout.
	TrialTimeout time.Duration
	// Health reports whether the gateway is healthy: nil when it is, else what it waits for.
	Health func() error
	// Reboot asks the machine to reboot (PID 1: components stop, LoadBalancer IPs are
	// handed over, file systems are unmounted).
	Reboot func()
	// Marker prints a console marker line (EDGEGATE-UPDATE ...), for the boot tests.
	Marker func(format string, args ...any)
	Log    *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Request is one installation.
type Request struct {
	// Source says who asked, for the history.
	Source string
	// Force installs a bundle that is not newer than the running firmware; never one below
	// the security epoch floor.
	Force bool
	// Activate switches to the new slot and reboots once it is written; without it the
	// update stays staged until Activate.
	Activate bool
}

// BootLoader is what the updater needs of the boot loader: systemd-boot's EFI variables
// (firmware/efivar's Store).
type BootLoader interface {
	// Loader names the boot loader that booted; an error when none says (no systemd-boot,
	// no EFI variables).
	Loader() (string, error)
	// BootOnce makes the next boot, that one only, boot the entry the pattern names
	// (layout.OneShotPattern).
	BootOnce(pattern string) error
	// OneShot is the pattern armed now, "" when none.
	OneShot() (string, error)
}

// Updater is what the dashboard and PID 1's control socket use of a Manager: its status and
// its actions. The daemon under PID 1 reaches the Manager in PID 1 through one
// (daemon/pid1/ctl's Client).
type Updater interface {
	Status() Status
	Install(ctx context.Context, r io.Reader, req Request) (Attempt, error)
	Activate() (Attempt, error)
	Cancel(source string) (Attempt, error)
	// OnChange calls fn after every change of the status.
	OnChange(fn func())
}

var _ Updater = (*Manager)(nil)

// Manager is the updater of one boot.
type Manager struct {
	opts Options

	mu        sync.Mutex
	state     State
	trust     trustRecord        // the security epoch floor and the rotated keys
	keys      []bundle.PublicKey // the keys trusted now: trust's, else opts.Keys
	problem   string             // why updates are unavailable; "" when they are
	trial     *trialRun          // set on a trial boot until it ends
	retry     bool               // the committed slot armed the next try: reboot into it
	busy      bool               // Install or Activate running
	rebooting bool
	onChange  func()
}

// trialRun is a trial boot in progress.
type trialRun struct {
	entry    slotEntry
	boot     int // which try this is, of tries
	tries    int
	started  time.Time
	deadline time.Time
	waiting  string
}

// New reads the ESP and the state file and settles what the last boot left: a trial boot
// of this slot starts its wait for health (Start), an update that did not stay is recorded
// as rolled back, one cut short while writing as interrupted. A Manager is returned even
// when updates are unavailable; Status says why.
func New(opts Options) *Manager {
	if opts.Tries <= 0 {
		opts.Tries = DefaultTries
	}
	if opts.TrialTimeout <= 0 {
		opts.TrialTimeout = DefaultTrialTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Marker == nil {
		opts.Marker = func(string, ...any) {}
	}
	m := &Manager{opts: opts, trust: trustRecord{Format: trustFormat}, keys: opts.Keys}
	st, err := loadState(opts.StateDir)
	if err != nil {
		opts.Log.Error("update state unreadable; starting a new history", "err", err)
	}
	m.state = st
	abDisk := opts.ESP != nil && opts.Slot != ""
	if abDisk {
		m.problem = m.loadTrust()
	} else {
		m.problem = "the firmware did not boot from an A/B disk image (no " + layout.SlotParam + " on the kernel command line, or no EFI system partition)"
	}
	if m.problem == "" && len(m.keys) == 0 {
		m.problem = "the firmware trusts no signing keys (none in " + layout.KeysDir + ")"
	}
	if m.problem == "" && abDisk {
		m.problem = m.checkLoader()
	}
	if abDisk {
		if err := m.settle(); err != nil {
			m.problem = err.Error()
		}
	}
	if m.problem != "" {
		opts.Log.Warn("firmware updates unavailable", "reason", m.problem)
	}
	return m
}

// checkLoader says why the boot loader cannot try a slot once, "" when it can.
func (m *Manager) checkLoader() string {
	if m.opts.Loader == nil {
		return "the boot loader's EFI variables are unavailable (no efivarfs): a new slot cannot be tried once"
	}
	name, err := m.opts.Loader.Loader()
	if err != nil {
		return fmt.Sprintf("the boot loader did not identify itself (%v): a new slot cannot be tried once", err)
	}
	m.opts.Log.Debug("boot loader", "name", name)
	return ""
}

// OnChange sets a function called after every change of Status (the dashboard's push).
func (m *Manager) OnChange(fn func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onChange = fn
}

func (m *Manager) changed() {
	m.mu.Lock()
	fn := m.onChange
	m.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// saveLocked writes the state; a failure is logged (the ESP, not the file, decides what
// boots, so the update goes on).
func (m *Manager) saveLocked() {
	if err := m.state.save(m.opts.StateDir); err != nil {
		m.opts.Log.Error("writing the update state failed", "dir", m.opts.StateDir, "err", err)
	}
}

// settle is New's look at what the previous boot left.
func (m *Manager) settle() error {
	now := m.opts.Now()
	root := m.opts.ESP.Root()
	entries, problems, err := readEntries(root)
	if err != nil {
		return fmt.Errorf("EFI system partition: %w", err)
	}
	for _, p := range problems {
		m.opts.Log.Warn("boot entry ignored", "problem", p)
	}
	slot, other := m.opts.Slot, m.opts.Slot.Other()
	own, ok := entryFor(entries, slot)
	if !ok {
		return fmt.Errorf("the running slot %s has no boot entry in %s", slot, layout.EntriesDir)
	}
	otherEntry, otherOK := entryFor(entries, other)
	if own.entry.Tries == nil {
		m.raiseTrust()
	}
	p := m.state.Pending
	switch {
	case own.entry.Tries != nil:
		// A trial boot of this slot: the committed slot armed it, or someone picked it in
		// the boot menu.
		if p == nil || p.Phase != PhaseTrial || p.To.Slot != slot {
			if p != nil {
				m.state.end(now, PhaseFailed, fmt.Sprintf("slot %s booted on trial instead", slot))
			}
			// The state file does not know of it (a new data partition): the ESP does.
			p = &Attempt{ID: attemptID(now), Source: "unknown (no update state on this gateway)", Phase: PhaseTrial,
				From: Firmware{Slot: other}, To: Firmware{Slot: slot, Version: m.opts.Version}, Started: now,
				Tries: m.opts.Tries, TrialBoots: 1}
			if otherOK {
				p.From.Version = otherEntry.entry.Firmware
			}
			m.state.Pending = p
		}
		boot, tries := max(p.TrialBoots, 1), max(p.Tries, p.TrialBoots, 1)
		p.event(now, "trial boot %d of %d started (%s)", boot, tries, m.opts.Version)
		m.trial = &trialRun{entry: own, boot: boot, tries: tries, started: now, deadline: now.Add(m.opts.TrialTimeout)}
		m.opts.Marker("EDGEGATE-UPDATE trial slot=%s boot=%d/%d", slot, boot, tries)
		m.opts.Log.Info("trial boot of new firmware: committing once healthy", "slot", slot, "version", m.opts.Version,
			"boot", boot, "of", tries, "deadline", m.opts.TrialTimeout)
	case p == nil:
		h := m.state.History
		if otherOK && otherEntry.entry.Tries != nil && otherEntry.entry.Tries.Bad() &&
			len(h) > 0 && h[0].Phase == PhaseRolledBack && h[0].To.Slot == other {
			// The rollback is recorded, and the power went before its spent entry was
			// removed. (A spent entry no attempt of ours made, say an image built with a
			// trial slot, stays for the operator to see.)
			m.opts.Log.Info("removing the spent entry of a rolled back update", "entry", otherEntry.file)
			m.removeSpent(otherEntry)
		}
	case p.Phase == PhaseTrial && p.To.Slot == slot:
		// Committed on the ESP, but the state file was not written before the power went.
		m.state.end(now, PhaseCommitted, "")
		m.opts.Marker("EDGEGATE-UPDATE committed slot=%s version=%s", slot, m.opts.Version)
	case p.Phase == PhaseTrial:
		m.rolledBack(now, otherEntry, otherOK)
	case p.Phase == PhaseReceiving:
		reason := fmt.Sprintf("the gateway restarted while slot %s was written", other)
		if err := m.opts.ESP.Writable(func() error { return removeTemps(root, other) }); err != nil {
			m.opts.Log.Warn("removing a partial slot's files failed", "slot", other, "err", err)
		}
		m.state.end(now, PhaseInterrupted, reason)
		m.opts.Marker("EDGEGATE-UPDATE interrupted slot=%s", other)
	case p.Phase == PhaseStaged:
		// Still staged: Activate verifies the slot again before it switches.
	}
	m.saveLocked()
	return nil
}

// attemptID names an attempt by its start.
func attemptID(t time.Time) string { return t.UTC().Format("20060102T150405.000Z") }

// begin reserves the updater for one step.
func (m *Manager) begin() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.problem != "":
		return fmt.Errorf("%w: %s", ErrUnavailable, m.problem)
	case m.rebooting:
		return fmt.Errorf("%w: the gateway is rebooting", ErrBusy)
	case m.trial != nil:
		return fmt.Errorf("%w: this boot is the trial of slot %s; it must commit first", ErrBusy, m.opts.Slot)
	case m.busy:
		return fmt.Errorf("%w: another update step is running", ErrBusy)
	}
	m.busy = true
	return nil
}

func (m *Manager) done() {
	m.mu.Lock()
	m.busy = false
	m.mu.Unlock()
	m.changed()
}

// Install reads a bundle from r, verifies it while it streams into the inactive slot,
// verifies the slot by reading it back, and stages it; with req.Activate it then switches
// to it and reboots. A refused bundle (ErrRefused) writes nothing.
func (m *Manager) Install(ctx context.Context, r io.Reader, req Request) (Attempt, error) {
	if err := m.begin(); err != nil {
		return Attempt{}, err
	}
	defer m.done()
	now := m.opts.Now()
	other := m.opts.Slot.Other()
	a := &Attempt{ID: attemptID(now), Source: req.Source, Phase: PhaseReceiving, Started: now,
		From: Firmware{Slot: m.opts.Slot, Version: m.opts.Version}, To: Firmware{Slot: other}}
	src := &progressReader{ctx: ctx, r: r, m: m, a: a}
	m.mu.Lock()
	policy := bundle.Policy{Board: m.opts.Board, Keys: m.keys, Running: m.opts.Version, Force: req.Force, MinEpoch: m.trust.SecurityEpochFloor}
	m.mu.Unlock()
	br, err := bundle.Open(src, policy)
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrRefused, err)
		m.mu.Lock()
		a.Bytes = src.n
		a.Phase, a.Reason, a.Ended = PhaseRefused, err.Error(), m.opts.Now()
		a.event(a.Ended, "refused: %v", err)
		m.state.History = append([]Attempt{*a}, m.state.History...)[:min(len(m.state.History)+1, maxHistory)]
		m.saveLocked()
		m.mu.Unlock()
		m.opts.Marker("EDGEGATE-UPDATE refused")
		m.opts.Log.Error("update refused", "source", req.Source, "err", err)
		return *a, err
	}
	man := br.Manifest()
	sum := sha256.Sum256(br.RawManifest())
	m.mu.Lock()
	a.To.Version, a.Bundle = man.Version, hex.EncodeToString(sum[:])
	a.event(m.opts.Now(), "bundle %s for %s verified (key %s, security epoch %d); writing slot %s", man.Version, man.Board, man.KeyID, man.SecurityEpoch, other)
	if p := m.state.Pending; p != nil {
		m.state.end(m.opts.Now(), PhaseCancelled, "superseded by update "+a.ID)
	}
	m.state.Pending = a
	m.saveLocked()
	m.mu.Unlock()
	m.changed()
	m.opts.Marker("EDGEGATE-UPDATE receiving slot=%s version=%s", other, man.Version)
	m.opts.Log.Info("installing firmware update", "source", req.Source, "version", man.Version, "slot", other)

	root := m.opts.ESP.Root()
	err = m.opts.ESP.Writable(func() error { return writeSlot(root, other, br, man) })
	if err != nil {
		if cerr := m.opts.ESP.Writable(func() error { return removeTemps(root, other) }); cerr != nil {
			m.opts.Log.Warn("removing a partial slot's files failed", "slot", other, "err", cerr)
		}
		// A part that does not match its signed digest is the bundle's fault: refused, and
		// the slot is as it was. Anything else (a disk error) failed the write.
		phase := PhaseFailed
		if errors.Is(err, bundle.ErrBadDigest) || errors.Is(err, bundle.ErrMalformed) {
			phase, err = PhaseRefused, fmt.Errorf("%w: %w", ErrRefused, err)
		}
		m.mu.Lock()
		a.Bytes = src.n
		m.state.end(m.opts.Now(), phase, fmt.Sprintf("writing slot %s: %v", other, err))
		m.saveLocked()
		ended := m.state.History[0]
		m.mu.Unlock()
		m.opts.Marker("EDGEGATE-UPDATE %s slot=%s", phase, other)
		m.opts.Log.Error("update not installed", "slot", other, "phase", phase, "err", err)
		return ended, err
	}
	m.mu.Lock()
	a.Bytes = src.n
	a.Phase = PhaseStaged
	a.event(m.opts.Now(), "slot %s written and read back (%d bytes received)", other, src.n)
	m.saveLocked()
	staged := *a
	m.mu.Unlock()
	m.opts.Marker("EDGEGATE-UPDATE staged slot=%s version=%s", other, man.Version)
	if !req.Activate {
		return staged, nil
	}
	return m.activateReserved()
}

// Activate switches to the staged update and reboots.
func (m *Manager) Activate() (Attempt, error) {
	if err := m.begin(); err != nil {
		return Attempt{}, err
	}
	defer m.done()
	return m.activateReserved()
}

// activateReserved runs with the updater reserved (begin).
func (m *Manager) activateReserved() (Attempt, error) {
	m.mu.Lock()
	p := m.state.Pending
	if p == nil || p.Phase != PhaseStaged {
		m.mu.Unlock()
		return Attempt{}, ErrNothingStaged
	}
	keys, floor := m.keys, m.trust.SecurityEpochFloor
	m.mu.Unlock()
	root := m.opts.ESP.Root()
	slot, other := m.opts.Slot, m.opts.Slot.Other()
	fail := func(err error) (Attempt, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.state.end(m.opts.Now(), PhaseFailed, err.Error())
		m.saveLocked()
		m.opts.Marker("EDGEGATE-UPDATE failed slot=%s", other)
		return m.state.History[0], err
	}
	man, err := verifySlot(root, other, keys)
	if err == nil {
		err = bundle.CheckEpoch(man, floor)
	}
	if err != nil {
		return fail(fmt.Errorf("slot %s no longer verifies: %w", other, err))
	}
	if man.Version != p.To.Version || man.Board != m.opts.Board {
		return fail(fmt.Errorf("slot %s holds %s for %s, the staged update was %s", other, man.Version, man.Board, p.To.Version))
	}
	entries, _, err := readEntries(root)
	if err != nil {
		return fail(err)
	}
	own, ok := entryFor(entries, slot)
	if !ok {
		return fail(fmt.Errorf("the running slot %s has no boot entry", slot))
	}
	var gen uint64
	var stale []string
	for _, e := range entries {
		gen = max(gen, e.entry.Generation)
		if e.entry.Slot == other {
			stale = append(stale, e.file)
		}
	}
	trial := layout.Trial
	entry := layout.Entry{Slot: other, Tries: &trial, Generation: gen + 1,
		Firmware: man.Version, Options: layout.WithSlot(own.entry.Options, other)}
	if m.opts.Loader == nil {
		return fail(errors.New("the boot loader's EFI variables are unavailable"))
	}
	// The state first: a power cut before the entry is written is then recorded as
	// interrupted by the next boot, one after it arms the try again (the tries are counted
	// here, not by the boot loader).
	m.mu.Lock()
	p.Phase, p.Tries, p.TrialBoots = PhaseTrial, m.opts.Tries, 1
	p.event(m.opts.Now(), "switched: slot %s boots once (%s, generation %d, try 1 of %d); rebooting", other, entry.FileName(), entry.Generation, m.opts.Tries)
	m.saveLocked()
	m.mu.Unlock()
	dir := filepath.Join(root, layout.EntriesDir)
	if err := m.opts.ESP.Writable(func() error {
		if err := removeSync(dir, stale...); err != nil {
			return err
		}
		return writeFileSync(filepath.Join(dir, entry.FileName()), entry.Render(), 0o644)
	}); err != nil {
		return fail(fmt.Errorf("writing slot %s's boot entry: %w", other, err))
	}
	if err := m.opts.Loader.BootOnce(layout.OneShotPattern(other)); err != nil {
		// The trial entry is never booted by default; it goes so that the slot shows as
		// without entry, like before the switch.
		if rerr := m.opts.ESP.Writable(func() error { return removeSync(dir, entry.FileName()) }); rerr != nil {
			m.opts.Log.Warn("removing the trial entry failed", "entry", entry.FileName(), "err", rerr)
		}
		return fail(fmt.Errorf("arming slot %s's trial boot: %w", other, err))
	}
	m.mu.Lock()
	m.rebooting = true
	switched := *p
	m.mu.Unlock()
	m.opts.Marker("EDGEGATE-UPDATE switched slot=%s version=%s", other, man.Version)
	m.opts.Log.Info("switched to the new firmware; rebooting", "slot", other, "version", man.Version, "entry", entry.FileName())
	if m.opts.Reboot != nil {
		time.AfterFunc(rebootDelay, m.opts.Reboot)
	}
	return switched, nil
}

// Cancel discards a staged update.
func (m *Manager) Cancel(source string) (Attempt, error) {
	if err := m.begin(); err != nil {
		return Attempt{}, err
	}
	defer m.done()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.state.Pending
	if p == nil || p.Phase != PhaseStaged {
		return Attempt{}, ErrNothingStaged
	}
	m.state.end(m.opts.Now(), PhaseCancelled, "cancelled by "+source)
	m.saveLocked()
	return m.state.History[0], nil
}
