package update

import (
	"fmt"
	"slices"
	"time"

	"github.com/edgegate/edgegate/firmware/layout"
)

// Status is what the dashboard and the API show of the updater.
type Status struct {
	// Available says this gateway can update itself; Problem says why not.
	Available bool   `json:"available"`
	Problem   string `json:"problem,omitempty"`
	Board     string `json:"board"`
	// Version and Slot are the running firmware's.
	Version string      `json:"version"`
	Slot    layout.Slot `json:"slot,omitempty"`
	// Slots describe both slots as the boot loader sees them, the one that boots next first.
	Slots []SlotStatus `json:"slots"`
	// Trust is the security epoch floor and the trusted keys.
	Trust TrustStatus `json:"trust"`
	// Trial is set while this boot is the new firmware's trial.
	Trial *Trial `json:"trial,omitempty"`
	// Rebooting says a switch or a failed trial is about to reboot the gateway.
	Rebooting bool      `json:"rebooting,omitempty"`
	Pending   *Attempt  `json:"pending,omitempty"`
	History   []Attempt `json:"history"`
	// Problems are boot entries that were ignored, by file.
	Problems []string `json:"problems,omitempty"`
}

// TrustStatus is what this gateway trusts: the trust record that committed firmware raised.
type TrustStatus struct {
	// SecurityEpochFloor is the lowest security epoch a bundle may carry.
	SecurityEpochFloor uint64 `json:"securityEpochFloor"`
	// KeyGeneration is the generation of Keys: 0 for the firmware's baked-in keys.
	KeyGeneration uint64 `json:"keyGeneration"`
	// Keys are the IDs of the trusted signing keys.
	Keys []string `json:"keys"`
}

// SlotStatus is one slot.
type SlotStatus struct {
	Slot layout.Slot `json:"slot"`
	// Firmware is the version its entry names; empty without an entry.
	Firmware   string `json:"firmware,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	Entry      string `json:"entry,omitempty"`
	// State: "committed", "trial, try N of M armed", "trial, try N of M", "not committed"
	// (a trial entry no attempt is trying: booted only when picked in the boot menu) or
	// "no boot entry".
	State   string `json:"state"`
	Running bool   `json:"running"`
	// BootsNext says the boot loader picks this slot at the next boot: by default, or
	// because its trial is armed.
	BootsNext bool `json:"bootsNext"`
}

// Trial is a trial boot in progress.
type Trial struct {
	Boot     int       `json:"boot"`
	Tries    int       `json:"tries"`
	Started  time.Time `json:"started"`
	Deadline time.Time `json:"deadline"`
	// Waiting says what health still lacks.
	Waiting string `json:"waiting,omitempty"`
}

// Status returns the updater's state, with the slots as they are on the ESP now.
func (m *Manager) Status() Status {
	m.mu.Lock()
	s := Status{Available: m.problem == "", Problem: m.problem, Board: m.opts.Board, Version: m.opts.Version,
		Slot: m.opts.Slot, Rebooting: m.rebooting, History: slices.Clone(m.state.History), Trust: m.trustStatus()}
	if p := m.state.Pending; p != nil {
		c := *p
		c.Events = slices.Clone(p.Events)
		s.Pending = &c
	}
	if t := m.trial; t != nil {
		s.Trial = &Trial{Boot: t.boot, Tries: t.tries,
			Started: t.started, Deadline: t.deadline, Waiting: t.waiting}
	}
	m.mu.Unlock()
	if s.History == nil {
		s.History = []Attempt{}
	}
	if m.opts.ESP == nil {
		return s
	}
	entries, problems, err := readEntries(m.opts.ESP.Root())
	if err != nil {
		s.Problems = append(s.Problems, err.Error())
		return s
	}
	s.Problems = append(s.Problems, problems...)
	var all []layout.Entry
	for _, e := range entries {
		all = append(all, e.entry)
	}
	ordered := layout.Order(all)
	next := layout.Slot("")
	if len(ordered) > 0 {
		next = ordered[0].Slot
	}
	armed := false
	if m.opts.Loader != nil {
		pattern, err := m.opts.Loader.OneShot()
		if err != nil {
			s.Problems = append(s.Problems, err.Error())
		}
		for _, e := range ordered {
			if pattern != "" && layout.OneShotMatches(pattern, e.FileName()) {
				next, armed = e.Slot, true
				break
			}
		}
	}
	for _, slot := range layout.Slots {
		ss := SlotStatus{Slot: slot, Running: slot == m.opts.Slot, State: "no boot entry"}
		if e, ok := entryFor(entries, slot); ok {
			ss.Firmware, ss.Generation, ss.Entry = e.entry.Firmware, e.entry.Generation, e.file
			ss.BootsNext = slot == next
			switch p := s.Pending; {
			case e.entry.Tries == nil:
				ss.State = "committed"
			case p != nil && p.Phase == PhaseTrial && p.To.Slot == slot && ss.BootsNext && armed:
				ss.State = fmt.Sprintf("trial, try %d of %d armed", p.TrialBoots, p.Tries)
			case p != nil && p.Phase == PhaseTrial && p.To.Slot == slot:
				ss.State = fmt.Sprintf("trial, try %d of %d", p.TrialBoots, p.Tries)
			default:
				ss.State = "not committed"
			}
		}
		s.Slots = append(s.Slots, ss)
	}
	slices.SortStableFunc(s.Slots, func(a, b SlotStatus) int {
		if a.BootsNext != b.BootsNext {
			if a.BootsNext {
				return -1
			}
			return 1
		}
		return 0
	})
	return s
}
