package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
)

func TestConntrackWatchSaysWhenTheTableFills(t *testing.T) {
	var buf bytes.Buffer
	w := &conntrackWatch{log: slog.New(slog.NewTextHandler(&buf, nil)), repeat: time.Minute}
	t0 := time.Unix(1000, 0)
	step := func(at time.Duration, s conntrack.Stats) string {
		buf.Reset()
		w.observe(s, t0.Add(at))
		return buf.String()
	}
	if out := step(0, conntrack.Stats{Entries: 10, Max: 100, Drop: 7}); out != "" {
		t.Errorf("first read logged: %s", out)
	}
	if out := step(5*time.Second, conntrack.Stats{Entries: 50, Max: 100, Drop: 7}); out != "" {
		t.Errorf("half full logged: %s", out)
	}
	out := step(10*time.Second, conntrack.Stats{Entries: 100, Max: 100, Drop: 19, EarlyDrop: 3})
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "dropped=12") || !strings.Contains(out, "evicted=3") {
		t.Errorf("full table: %q", out)
	}
	if out := step(15*time.Second, conntrack.Stats{Entries: 100, Max: 100, Drop: 40, EarlyDrop: 3}); out != "" {
		t.Errorf("still full 5 s later logged again: %s", out)
	}
	out = step(75*time.Second, conntrack.Stats{Entries: 100, Max: 100, Drop: 90, EarlyDrop: 3})
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "dropped=71") {
		t.Errorf("still full a minute later: %q", out)
	}
	out = step(80*time.Second, conntrack.Stats{Entries: 40, Max: 100, Drop: 90, EarlyDrop: 3})
	if !strings.Contains(out, "level=INFO") || !strings.Contains(out, "no longer full") {
		t.Errorf("recovered: %q", out)
	}
	// Drops alone, the table below 90%, are pressure too.
	if out := step(85*time.Second, conntrack.Stats{Entries: 40, Max: 100, Drop: 91, EarlyDrop: 3}); !strings.Contains(out, "dropped=1") {
		t.Errorf("a drop: %q", out)
	}
}
