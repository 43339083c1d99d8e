package rollout

import (
	"fmt"

	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/firmware/bundle"
)

// action is what this gateway does next for one rollout.
type action int

const (
	// actNone: the rollout does not select this gateway, or its part is done.
	actNone action = iota
	// actInvalid: the spec is malformed; the reason goes on the rollout's message.
	actInvalid
	// actNoNode: this gateway's Node is not registered (yet), so selection is unknown.
	actNoNode
	// actUpdated: the gateway runs the version (or a newer one): report Updated, undrain
	// and release the slot.
	actUpdated
	// actTrial: the gateway runs the version on its trial boot: wait for the commit.
	actTrial
	// actRebooting: the switch is done and the reboot is coming.
	actRebooting
	// actFail: this rollout's attempt ended without the version committed: report
	// Failed and halt the rollout.
	actFail
	// actUnavailable: this gateway cannot update itself: report Failed, without a halt
	// (nothing was touched).
	actUnavailable
	// actBusy: another update occupies the updater: wait.
	actBusy
	// actHalted: the rollout halted before this gateway started: do not start.
	actHalted
	// actUpdate: take a slot and update (resuming at the switch when the attempt is
	// already staged).
	actUpdate
)

var actionNames = [...]string{"none", "invalid", "no node", "updated", "trial", "rebooting", "fail", "unavailable", "busy", "halted", "update"}

func (a action) String() string { return actionNames[a] }

// decision is decide's answer.
type decision struct {
	act action
	// reason explains invalid, fail, unavailable, busy and updated.
	reason string
	// attempt is this rollout's attempt in the updater, when the gateway's entry names
	// one the updater still knows.
	attempt *update.Attempt
}

// decide is what this gateway does for rollout r, from what the API server says (the
// rollout, whether the own Node exists and its labels) and what the updater says. It is
// pure, and works from the state alone, so that the firmware that comes up after a reboot
// carries on where the previous one stopped.
func decide(r *FirmwareRollout, node string, nodeLabels map[string]string, nodeKnown bool, st update.Status) decision {
	if err := r.Validate(); err != nil {
		return decision{act: actInvalid, reason: err.Error()}
	}
	if !nodeKnown {
		return decision{act: actNoNode}
	}
	if !r.selects(nodeLabels) {
		return decision{act: actNone}
	}
	target := r.Spec.Version
	e, ok := r.Status.Nodes[node]
	// An entry written for an earlier spec.version says nothing about this one.
	current := ok && e.To == target
	var a *update.Attempt
	if current && e.Attempt != "" {
		a = findAttempt(st, e.Attempt)
	}
	if p := st.Pending; a == nil && p != nil && p.Source == source(r.Name) && p.To.Version == target {
		// This rollout's own, though the entry does not name it: the entry's write failed,
		// or was cleared before a cancel that did not happen.
		c := *p
		a = &c
	}
	switch {
	case current && e.Phase == NodeFailed:
		// Reported; the rollout is halted (or this gateway cannot update): stays so until
		// the rollout is created again.
		return decision{act: actNone}
	case current && e.Phase == NodeUpdated:
		// Done once, done for this rollout: a gateway that moved on since (a newer
		// rollout, an upload) is not taken back.
		return decision{act: actNone}
	case a != nil && !a.Phase.Pending() && a.Phase != update.PhaseCommitted:
		return decision{act: actFail, attempt: a, reason: endedReason(a)}
	}
	if st.Version == target {
		if st.Trial != nil || (a != nil && a.Phase == update.PhaseTrial) {
			return decision{act: actTrial, attempt: a}
		}
		reason := "runs " + target
		if a != nil {
			reason = fmt.Sprintf("update %s committed: runs %s", a.ID, target)
		}
		return decision{act: actUpdated, attempt: a, reason: reason}
	}
	if a != nil {
		switch a.Phase {
		case update.PhaseCommitted:
			return decision{act: actFail, attempt: a, reason: fmt.Sprintf("update %s committed %s, but the gateway runs %s (the other slot was booted)", a.ID, a.To.Version, st.Version)}
		case update.PhaseTrial:
			return decision{act: actRebooting, attempt: a}
		case update.PhaseStaged:
			if r.Status.Phase == PhaseHalted {
				return decision{act: actHalted, attempt: a}
			}
			return decision{act: actUpdate, attempt: a}
		default:
			return decision{act: actBusy, attempt: a, reason: fmt.Sprintf("update %s is %s", a.ID, a.Phase)}
		}
	}
	if current && e.Attempt != "" {
		// The firmware that switched wrote the attempt down; the one running now has no
		// record of it (a new data partition?) and is not the version: it did not stay.
		return decision{act: actFail, reason: fmt.Sprintf("the updater's history has no update %s and the gateway runs %s, not %s", e.Attempt, st.Version, target)}
	}
	if !r.Spec.Force && newer(st.Version, target) {
		return decision{act: actUpdated, reason: fmt.Sprintf("runs %s, newer than %s", st.Version, target)}
	}
	if r.Status.Phase == PhaseHalted {
		return decision{act: actHalted}
	}
	if !st.Available {
		return decision{act: actUnavailable, reason: "firmware updates are unavailable on this gateway: " + st.Problem}
	}
	if why := busy(st); why != "" {
		return decision{act: actBusy, reason: why}
	}
	return decision{act: actUpdate}
}

// findAttempt looks an attempt up in the updater's pending attempt and history.
func findAttempt(st update.Status, id string) *update.Attempt {
	if st.Pending != nil && st.Pending.ID == id {
		a := *st.Pending
		return &a
	}
	for i := range st.History {
		if st.History[i].ID == id {
			a := st.History[i]
			return &a
		}
	}
	return nil
}

// endedReason says how an attempt that did not commit ended.
func endedReason(a *update.Attempt) string {
	s := fmt.Sprintf("update %s to %s %s", a.ID, a.To.Version, a.Phase)
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return s
}

// busy says why the updater cannot take this rollout's update now, or "".
func busy(st update.Status) string {
	switch {
	case st.Rebooting:
		return "the gateway is rebooting"
	case st.Trial != nil:
		return fmt.Sprintf("this boot is the trial of %s; waiting for its commit", st.Version)
	case st.Pending != nil:
		return fmt.Sprintf("update %s from %s is %s on this gateway (activate or cancel it on the dashboard)", st.Pending.ID, st.Pending.Source, st.Pending.Phase)
	}
	return ""
}

// newer reports whether running is a strictly newer version than target; versions that
// do not parse are not ordered.
func newer(running, target string) bool {
	r, err := bundle.ParseVersion(running)
	if err != nil {
		return false
	}
	t, err := bundle.ParseVersion(target)
	if err != nil {
		return false
	}
	return r.Compare(t) > 0
}
