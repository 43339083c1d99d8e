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
