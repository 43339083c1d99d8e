package update

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/edgegate/edgegate/firmware/layout"
)

// Phase is where an update attempt is, or how it ended.
type Phase string

// The phases. An attempt in one of the first three is pending; the others end it.
const (
	// PhaseReceiving: the bundle is being verified and written to the inactive slot.
	PhaseReceiving Phase = "receiving"
	// PhaseStaged: the inactive slot is written and verified; nothing boots it yet.
	PhaseStaged Phase = "staged"
	// PhaseTrial: the inactive slot's entry has a try counter and boots first.
	PhaseTrial Phase = "trial"

	// PhaseCommitted: the new firmware proved healthy and made its slot the committed one.
	PhaseCommitted Phase = "committed"
	// PhaseRolledBack: the new firmware did not prove healthy; the old slot booted again.
	PhaseRolledBack Phase = "rolled-back"
	// PhaseRefused: the bundle was refused before anything was written.
	PhaseRefused Phase = "refused"
	// PhaseFailed: writing or verifying the slot failed; the slot is left unbootable.
	PhaseFailed Phase = "failed"
	// PhaseInterrupted: the machine went down while the slot was written.
	PhaseInterrupted Phase = "interrupted"
	// PhaseCancelled: a staged update was discarded by an operator.
	PhaseCancelled Phase = "cancelled"
)

// Pending reports whether the phase is one an attempt is still in.
func (p Phase) Pending() bool {
	return p == PhaseReceiving || p == PhaseStaged || p == PhaseTrial
}

// Firmware is a slot with the firmware it holds.
type Firmware struct {
	Slot    layout.Slot `json:"slot"`
	Version string      `json:"version,omitempty"`
}

// Event is one step of an attempt, for the history an operator reads.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Attempt is one update, from the first byte of its bundle to its end.
type Attempt struct {
	// ID names the attempt: its start time, to the millisecond.
	ID string `json:"id"`
	// Source says who asked: "upload from 10.0.0.7:51234", "rollout edge-v1.4".
	Source string   `json:"source"`
	From   Firmware `json:"from"`
	To     Firmware `json:"to"`
	Phase  Phase    `json:"phase"`
	// Reason says why it ended so, when not committed.
	Reason string `json:"reason,omitempty"`
	// Bundle is the bundle's manifest digest (sha256 of manifest.json), set once verified.
	Bundle string `json:"bundle,omitempty"`
	// Bytes is how much of the bundle was read.
	Bytes int64 `json:"bytes"`
	// Tries is the new slot's boot tries; TrialBoots how many of them started.
	Tries      int       `json:"tries,omitempty"`
	TrialBoots int       `json:"trialBoots,omitempty"`
	Started    time.Time `json:"started"`
	Ended      time.Time `json:"ended,omitzero"`
	Events     []Event   `json:"events"`
}

// Duration is how long the attempt took, or has taken until now.
func (a Attempt) Duration(now time.Time) time.Duration {
	if !a.Ended.IsZero() {
		return a.Ended.Sub(a.Started)
	}
	return now.Sub(a.Started)
}

// State is the updater's record on the data partition.
type State struct {
	Format int `json:"format"`
	// Pending is the attempt in progress, nil when none.
	Pending *Attempt `json:"pending,omitempty"`
	// History holds the ended attempts, newest first, at most maxHistory.
	History []Attempt `json:"history"`
}

const (
	stateFormat = 1
	stateFile   = "state.json"
	maxHistory  = 20
	maxEvents   = 40
)

// loadState reads the state file; a missing one is an empty state. One that does not
// parse is returned as an error and the caller starts afresh (the ESP's entries, not this
// file, decide what boots).
func loadState(dir string) (State, error) {
	st := State{Format: stateFormat}
	if dir == "" {
		return st, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return State{Format: stateFormat}, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	if st.Format != stateFormat {
		return State{Format: stateFormat}, fmt.Errorf("%s: format %d, this firmware reads %d", filepath.Join(dir, stateFile), st.Format, stateFormat)
	}
	return st, nil
}

// save writes the state file atomically.
func (s State) save(dir string) error {
	if dir == "" {
		return nil
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dir, stateFile), append(b, '\n'), 0o600)
}

// event appends a step to the attempt.
func (a *Attempt) event(at time.Time, format string, args ...any) {
	a.Events = append(a.Events, Event{At: at, What: fmt.Sprintf(format, args...)})
	if len(a.Events) > maxEvents {
		a.Events = append(a.Events[:1], a.Events[len(a.Events)-maxEvents+1:]...)
	}
}

// end closes the pending attempt with phase and moves it to the history.
func (s *State) end(at time.Time, phase Phase, reason string) {
	a := s.Pending
	if a == nil {
		return
	}
	a.Phase, a.Reason, a.Ended = phase, reason, at
	if reason != "" {
		a.event(at, "%s: %s", phase, reason)
	} else {
		a.event(at, "%s", phase)
	}
	s.History = append([]Attempt{*a}, s.History...)
	if len(s.History) > maxHistory {
		s.History = s.History[:maxHistory]
	}
	s.Pending = nil
}
