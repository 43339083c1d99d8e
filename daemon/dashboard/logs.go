package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// LogLimit is how many log records the dashboard keeps: the tail an operator scrolls back
// through without a shell.
const LogLimit = 500

// LogEntry is one log record as the dashboard shows it.
type LogEntry struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"msg"`
	// Attrs are the record's attributes as key=value text, in order.
	Attrs string `json:"attrs,omitempty"`
}

func (e LogEntry) String() string {
	s := e.Time.UTC().Format(time.RFC3339Nano) + " " + e.Level + " " + e.Message
	if e.Attrs != "" {
		s += " " + e.Attrs
	}
	return s
}

// logTee is a slog.Handler that passes every record to the daemon's own handler and also
// appends it to the hub's "logs" list, so the dashboard shows the same lines as the console.
type logTee struct {
	next  slog.Handler
	hub   *Hub
	attrs string // pre-rendered attributes from WithAttrs
	group string
}

// Tee returns a handler that writes to next and to the hub's log tail.
func Tee(next slog.Handler, hub *Hub) slog.Handler { return &logTee{next: next, hub: hub} }

func (t *logTee) Enabled(ctx context.Context, l slog.Level) bool { return t.next.Enabled(ctx, l) }

func (t *logTee) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(t.attrs)
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, t.group, a)
		return true
	})
	_ = t.hub.Append("logs", LogLimit, LogEntry{Time: r.Time, Level: r.Level.String(), Message: r.Message, Attrs: strings.TrimSpace(b.String())})
	return t.next.Handle(ctx, r)
}

func (t *logTee) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(t.attrs)
	for _, a := range as {
		writeAttr(&b, t.group, a)
	}
	return &logTee{next: t.next.WithAttrs(as), hub: t.hub, attrs: b.String(), group: t.group}
}

func (t *logTee) WithGroup(name string) slog.Handler {
	if name == "" {
		return t
	}
	g := name
	if t.group != "" {
		g = t.group + "." + name
	}
	return &logTee{next: t.next.WithGroup(name), hub: t.hub, attrs: t.attrs, group: g}
}

func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	key := a.Key
	if group != "" {
		key = group + "." + key
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, ga := range a.Value.Group() {
			writeAttr(b, key, ga)
		}
		return
	}
	v := a.Value.String()
	if strings.ContainsAny(v, " \"=") {
		v = fmt.Sprintf("%q", v)
	}
	fmt.Fprintf(b, " %s=%s", key, v)
}

// logLines renders the newest n log entries as text, oldest first.
func logLines(entries []LogEntry, n int) string {
	if n > 0 && len(entries) > n {
		entries = entries[len(entries)-n:]
	}
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.String())
		b.WriteByte('\n')
	}
	return b.String()
}
