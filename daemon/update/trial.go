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
// passes first. It returns at once when this is no trial boot.
func (m *Manager) Start(ctx context.Context) {
	m.mu.Lock()
	t := m.trial
	m.mu.Unlock()
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
	err := m.opts.ESP.Writable(func() error { return renameSync(dir, t.entry.file, committed) })
	if err != nil {
		m.mu.Unlock()
		// Nothing else to do: the boot loader falls back once the tries are spent.
		m.opts.Log.Error("committing the new firmware failed; the old slot comes back after the remaining tries",
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

// giveUp ends a trial boot that did not become healthy: the reason is recorded and the
// machine reboots, so that the boot loader tries again or falls back.
func (m *Manager) giveUp(now time.Time, err error) {
	m.mu.Lock()
	t := m.trial
	reason := fmt.Sprintf("not healthy %s after boot %d: %v", m.opts.TrialTimeout, t.entry.entry.Tries.Done, err)
	if p := m.state.Pending; p != nil {
		p.Reason = reason
		p.event(now, "%s; rebooting", reason)
	}
	m.saveLocked()
	m.rebooting = true
	m.mu.Unlock()
	m.opts.Marker("EDGEGATE-UPDATE unhealthy slot=%s boot=%d", m.opts.Slot, t.entry.entry.Tries.Done)
	m.opts.Log.Error("new firmware did not become healthy; rebooting", "slot", m.opts.Slot, "reason", reason)
	m.changed()
	if m.opts.Reboot != nil {
		m.opts.Reboot()
	}
}
