package app

import (
	"slices"
	"testing"
)

// TestDrainsJoinReasons: the gateway drains while any reason holds; what follows the state
// hears only of changes, and a follower added later starts from the current state.
func TestDrainsJoinReasons(t *testing.T) {
	var health []bool
	d := newDrains(func(on bool) { health = append(health, on) })
	var views []string
	d.changed = func(on bool, reasons []string) {
		views = append(views, slices.Concat([]string{map[bool]string{true: "on", false: "off"}[on]}, reasons)...)
	}
	if !d.set(drainOperator, true) {
		t.Fatal("operator drain: not draining")
	}
	var node []bool
	d.follow(func(on bool) { node = append(node, on) })
	d.set(drainNodeRemoval, true)
	if d.set(drainOperator, false) != true {
		t.Error("the Node's removal still drains after the operator's drain ends")
	}
	if d.set(drainNodeRemoval, false) {
		t.Error("no reason left, still draining")
	}
	if on, reasons := d.state(); on || len(reasons) != 0 {
		t.Errorf("state %v %v", on, reasons)
	}
	if !slices.Equal(health, []bool{true, false}) || !slices.Equal(node, []bool{true, false}) {
		t.Errorf("followers heard health %v, node %v; want only the two changes", health, node)
	}
	if len(views) == 0 || views[0] != "on" {
		t.Errorf("dashboard views %v", views)
	}
}
