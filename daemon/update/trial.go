package update

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/edgegate/edgegate/daemon/internal/fault"
	"github.com/edgegate/edgegate/firmware/layout"
)

// The trial boot: the new firmware waits for health, then commits or reboots.
// Start runs a trial boot's wait for health: commit when healthy, reboot when the deadline
// passes first. After a trial boot that did not commit, the committed firmware that
// armed the next try reboots into it. It returns at once otherwise.
func (m *Manager) Start(ctx context.Context) {
	m.mu.Lock()
	t, retry := m.trial, m.retry
	m.mu.Unlock()
	if retry {
		m.changed()
		if m.opts.Reboot != nil {
			m.opts.Reboot()
		}
		return
	}
	if t == nil {
		return
	}
	tick := time.NewTicker(healthPoll)
	defer tick.Stop()
	for {
		fault.Point(fault.Update)
		err := errors.New("no health check")
		if m.opts.Health != nil {
			err = m.opts.Health()
		}
		now := m.opts.Now()
		if err == nil {
			m.commit(now)
			return
		}
		m.mu.Lock()
		t.waiting = err.Error()
		m.mu.Unlock()
		if !now.Before(t.deadline) {
			m.giveUp(now, err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// commit makes the running slot the committed one.
func (m *Manager) commit(now time.Time) {
	m.mu.Lock()
	t := m.trial
	root := m.opts.ESP.Root()
	dir := filepath.Join(root, layout.EntriesDir)
	committed := layout.EntryFileName(m.opts.Slot, nil)
	err := m.opts.ESP.Writable(func() error {
		if err := renameSync(dir, t.entry.file, committed); err != nil {
			return err
		}
		// A power cut in systemd-boot's own rename of the entry may have left its old name
		// too: it goes, so that the slot has one entry. Committed already, a failure here
		// only leaves a name that never boots by default.
		if err := removeSync(dir, m.ownTrials(t.entry.file)...); err != nil {
			m.opts.Log.Warn("removing a second name of the committed slot's trial entry failed", "err", err)
		}
		return nil
	})
	if err != nil {
		m.mu.Unlock()
		// Nothing else to do: the committed slot boots next and arms the next try, if any.
		m.opts.Log.Error("committing the new firmware failed; the old slot boots next",
			"entry", t.entry.file, "err", err)
		m.giveUp(now, fmt.Errorf("committing failed: %w", err))
		return
	}
	// Only now, committed, does this firmware's epoch become the floor and its next keys
	// the trusted ones: a trial that fails leaves the record as it was.
	m.raiseTrust()
	if p := m.state.Pending; p != nil {
		p.event(now, "healthy %s after the trial boot started", now.Sub(t.started).Round(time.Millisecond))
	}
	m.state.end(now, PhaseCommitted, "")
	m.trial = nil
	m.saveLocked()
	var took time.Duration
	if len(m.state.History) > 0 {
		took = m.state.History[0].Duration(now)
	}
	m.mu.Unlock()
	m.opts.Marker("EDGEGATE-UPDATE committed slot=%s version=%s", m.opts.Slot, m.opts.Version)
	m.opts.Log.Info("new firmware healthy: committed", "slot", m.opts.Slot, "version", m.opts.Version, "update took", took.Round(time.Millisecond))
	m.changed()
}

// ownTrials are the running slot's trial entries on the ESP other than except.
func (m *Manager) ownTrials(except string) []string {
	entries, _, err := readEntries(m.opts.ESP.Root())
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.entry.Slot == m.opts.Slot && e.entry.Tries != nil && e.file != except {
			out = append(out, e.file)
		}
	}
	return out
}

// giveUp ends a trial boot that did not become healthy: the reason is recorded and the
// machine reboots into the committed slot, which tries again or records the rollback.
func (m *Manager) giveUp(now time.Time, err error) {
	m.mu.Lock()
	t := m.trial
	reason := fmt.Sprintf("not healthy %s after boot %d: %v", m.opts.TrialTimeout, t.boot, err)
	if p := m.state.Pending; p != nil {
		p.Reason = reason
		p.event(now, "%s; rebooting", reason)
	}
	m.saveLocked()
	m.rebooting = true
	m.mu.Unlock()
	m.opts.Marker("EDGEGATE-UPDATE unhealthy slot=%s boot=%d", m.opts.Slot, t.boot)
	m.opts.Log.Error("new firmware did not become healthy; rebooting", "slot", m.opts.Slot, "reason", reason)
	m.changed()
	if m.opts.Reboot != nil {
		m.opts.Reboot()
	}
}

// rolledBack settles a trial of the other slot that this slot's boot followed: the next
// try is armed while tries are left, else the rollback is recorded.
func (m *Manager) rolledBack(now time.Time, otherEntry slotEntry, otherOK bool) {
	p, other := m.state.Pending, m.opts.Slot.Other()
	var reason string
	phase := PhaseRolledBack
	switch t := otherEntry.entry.Tries; {
	case !otherOK:
		phase, reason = PhaseInterrupted, fmt.Sprintf("the gateway restarted before slot %s's boot entry was written", other)
	case t == nil:
		// The new firmware committed, and yet this slot booted: picked in the boot menu.
		m.state.end(now, PhaseCommitted, fmt.Sprintf("slot %s committed, but slot %s was booted afterwards (boot menu?)", other, m.opts.Slot))
		return
	case p.TrialBoots < p.Tries:
		err := m.armTry(now, other)
		if err == nil {
			return
		}
		reason = fmt.Sprintf("try %d of slot %s could not be armed: %v", p.TrialBoots, other, err)
	default:
		reason = fmt.Sprintf("the new firmware did not prove healthy in %d boot(s) of slot %s; slot %s booted again", p.TrialBoots, other, m.opts.Slot)
		if p.Reason != "" {
			reason += " (last: " + p.Reason + ")"
		}
	}
	// The history says what happened before the spent entry goes: a power cut in between
	// leaves the entry, which the next start removes (removeSpent), not a history that
	// cannot tell a rollback from an entry never written.
	m.state.end(now, phase, reason)
	m.saveLocked()
	if otherOK {
		m.removeSpent(otherEntry)
	}
	m.opts.Marker("EDGEGATE-UPDATE %s slot=%s", phase, other)
	m.opts.Log.Error("firmware update did not stay", "phase", phase, "reason", reason)
}

// armTry arms the next try of the pending trial of slot: counted in the state file first,
// so that a power cut cannot give the slot more tries than it has, then the one-shot
// variable; Start reboots into it.
func (m *Manager) armTry(now time.Time, slot layout.Slot) error {
	p := m.state.Pending
	if m.opts.Loader == nil {
		return errors.New("no EFI variables")
	}
	last := "it did not commit"
	if p.Reason != "" {
		last = p.Reason
	}
	p.TrialBoots++
	p.event(now, "slot %s booted after trial boot %d of %d (%s); arming try %d; rebooting", m.opts.Slot, p.TrialBoots-1, p.Tries, last, p.TrialBoots)
	m.saveLocked()
	if err := m.opts.Loader.BootOnce(layout.OneShotPattern(slot)); err != nil {
		return err
	}
	m.retry, m.rebooting = true, true
	m.opts.Marker("EDGEGATE-UPDATE retry slot=%s boot=%d/%d", slot, p.TrialBoots, p.Tries)
	m.opts.Log.Warn("the new firmware's trial boot did not commit; trying it again", "slot", slot, "version", p.To.Version,
		"boot", p.TrialBoots, "of", p.Tries, "last", last)
	return nil
}

// removeSpent removes the other slot's trial entries after its trial (e, and any other name
// a torn counter rename left): nothing boots that slot again until the next update.
func (m *Manager) removeSpent(e slotEntry) {
	root := m.opts.ESP.Root()
	names := []string{e.file}
	if entries, _, err := readEntries(root); err == nil {
		for _, o := range entries {
			if o.entry.Slot == e.entry.Slot && o.entry.Tries != nil && o.file != e.file {
				names = append(names, o.file)
			}
		}
	}
	if err := m.opts.ESP.Writable(func() error {
		return removeSync(filepath.Join(root, layout.EntriesDir), names...)
	}); err != nil {
		m.opts.Log.Warn("removing the rolled back slot's entry failed", "entries", names, "err", err)
	}
}
