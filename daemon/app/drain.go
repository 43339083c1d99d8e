package app

import (
	"maps"
	"slices"
	"sync"
)

// Drain reasons.
const (
	drainNodeRemoval = "node removal"    // the gateway's Node is being deleted or autoscaled away
	drainOperator    = "operator"        // the dashboard's drain action
	drainShutdown    = "shutdown"        // the daemon is stopping
	drainUpdate      = "firmware update" // a fleet rollout updates this gateway
)

// drains joins the reasons a gateway drains into one state: while any holds, /healthz fails
// (external load balancers steer away) and, joined to a cluster, the Node is not ready.
// Rules stay programmed: connections in flight finish.
type drains struct {
	mu      sync.Mutex
	reasons map[string]bool
	apply   []func(draining bool)
	changed func(draining bool, reasons []string) // the dashboard's view; may be nil
}

func newDrains(apply ...func(bool)) *drains {
	return &drains{reasons: map[string]bool{}, apply: apply}
}

// follow adds what else follows the drain state from now on (the Node's readiness).
func (d *drains) follow(apply func(bool)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.apply = append(d.apply, apply)
	apply(len(d.reasons) > 0)
}

// set turns one reason on or off and reports whether the gateway is draining afterwards.
func (d *drains) set(reason string, on bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	was := len(d.reasons) > 0
	if on {
		d.reasons[reason] = true
	} else {
		delete(d.reasons, reason)
	}
	now := len(d.reasons) > 0
	if now != was {
		for _, f := range d.apply {
			f(now)
		}
	}
	if d.changed != nil {
		d.changed(now, slices.Sorted(maps.Keys(d.reasons)))
	}
	return now
}

// state reports whether the gateway drains, and why.
func (d *drains) state() (bool, []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.reasons) > 0, slices.Sorted(maps.Keys(d.reasons))
}
