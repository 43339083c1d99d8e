package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
)

// The connection tracking table is the gateway's one shared limit: once it is full the
// kernel evicts entries it may (early drop) and drops new connections it cannot track,
// whatever their Service. The watch says so in the log when it starts, while it lasts
// (once a minute) and when it ends; the metrics count it (metrics.KernelSources).

// conntrackWatchInterval is how often the watch reads the table's state.
const conntrackWatchInterval = 5 * time.Second

// nearlyFull is the share of nf_conntrack_max at which the table is reported as filling.
const nearlyFull = 0.9

// conntrackWatch follows the table's state from one read to the next.
type conntrackWatch struct {
	log *slog.Logger
	// repeat is how often a lasting pressure is logged again.
	repeat time.Duration
	// show, if set, gets every read and whether the table is under pressure.
	show func(s conntrack.Stats, pressed bool)

	last, said conntrack.Stats // the last read, and the one last logged
	seen       bool
	pressed    bool // full, nearly full or dropping at the last read
	saidAt     time.Time
}

// observe takes one read and logs what changed.
func (w *conntrackWatch) observe(s conntrack.Stats, now time.Time) {
	if !w.seen || s.Drop < w.last.Drop || s.EarlyDrop < w.last.EarlyDrop {
		// The first read, or counters that went back (another namespace): a baseline.
		w.last, w.said, w.seen = s, s, true
		w.shown(s)
		return
	}
	filling := s.Max > 0 && float64(s.Entries) >= nearlyFull*float64(s.Max)
	pressed := filling || s.Drop > w.last.Drop || s.EarlyDrop > w.last.EarlyDrop
	switch {
	case pressed && (!w.pressed || now.Sub(w.saidAt) >= w.repeat):
		w.log.Warn("connection tracking table full: new connections are refused or evict others",
			"entries", s.Entries, "max", s.Max, "dropped", s.Drop-w.said.Drop, "evicted", s.EarlyDrop-w.said.EarlyDrop,
			"fix", "raise --conntrack-max-per-core or --conntrack-min, shorten the conntrack timeouts, or cap sources with the edgegate.dev/protection annotation")
		w.said, w.saidAt = s, now
	case !pressed && w.pressed:
		w.log.Info("connection tracking table no longer full", "entries", s.Entries, "max", s.Max,
			"dropped", s.Drop-w.said.Drop, "evicted", s.EarlyDrop-w.said.EarlyDrop)
		w.said, w.saidAt = s, now
	}
	w.last, w.pressed = s, pressed
	w.shown(s)
}

func (w *conntrackWatch) shown(s conntrack.Stats) {
	if w.show != nil {
		w.show(s, w.pressed)
	}
}

// run reads the table every interval until ctx ends. A read that fails (no conntrack
// loaded yet) is tried again at the next tick.
func (w *conntrackWatch) run(ctx context.Context, read func() (conntrack.Stats, error)) error {
	t := time.NewTicker(conntrackWatchInterval)
	defer t.Stop()
	for {
		if s, err := read(); err == nil {
			w.observe(s, time.Now())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
