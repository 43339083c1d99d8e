package member

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openMarks(t *testing.T, file string, now time.Time) *Marks {
	t.Helper()
	m, err := OpenMarks(file, now)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func admit(t *testing.T, m *Marks, h Heartbeat, want string) {
	t.Helper()
	got, err := m.Admit(h)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("Admit(%s inc %d seq %d) = %q, want %q", h.Name, h.Incarnation, h.Seq, got, want)
	}
}

func TestMarksRefuseReplayedAndStale(t *testing.T) {
	m := openMarks(t, "", t0)
	hb := func(inc int64, seq uint64) Heartbeat { return Heartbeat{Name: "gw-b", Incarnation: inc, Seq: seq} }
	admit(t, m, hb(5, 10), "")
	admit(t, m, hb(5, 11), "")
	admit(t, m, hb(5, 11), RejectReplayed)
	admit(t, m, hb(5, 3), RejectReplayed)
	admit(t, m, hb(4, 99), RejectStale)
	admit(t, m, hb(6, 1), "") // the peer restarted
	admit(t, m, hb(5, 12), RejectStale)
	admit(t, m, Heartbeat{Name: "gw-c", Incarnation: 1, Seq: 1}, "")
}

// TestMarksAcrossTheReceiversRestart: a gateway that restarts refuses every incarnation it
// had heard (sequence numbers are not written), asks those peers for a new one in its
// heartbeats, takes the new one, and keeps refusing the old after a second restart.
func TestMarksAcrossTheReceiversRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lb-marks.json")
	m := openMarks(t, file, t0)
	admit(t, m, Heartbeat{Name: "gw-b", Incarnation: 5, Seq: 10}, "")
	admit(t, m, Heartbeat{Name: "gw-c", Incarnation: 7, Seq: 1}, "")

	m = openMarks(t, file, t0)                                                 // restarted
	admit(t, m, Heartbeat{Name: "gw-b", Incarnation: 5, Seq: 10}, RejectStale) // a replay
	admit(t, m, Heartbeat{Name: "gw-b", Incarnation: 5, Seq: 11}, RejectStale) // gw-b's next, or a replay of it: the same to us
	if got := m.Renewing(); len(got) != 1 || got["gw-b"] != 5 {
		t.Fatalf("Renewing() = %v, want gw-b asked to leave incarnation 5", got)
	}
	admit(t, m, Heartbeat{Name: "gw-b", Incarnation: 6, Seq: 12}, "")
	if got := m.Renewing(); len(got) != 0 {
		t.Errorf("Renewing() = %v after gw-b's new incarnation, want none", got)
	}
	admit(t, m, Heartbeat{Name: "gw-c", Incarnation: 7, Seq: 2}, RejectStale)

	m = openMarks(t, file, t0)
	admit(t, m, Heartbeat{Name: "gw-b", Incarnation: 6, Seq: 13}, RejectStale)
	admit(t, m, Heartbeat{Name: "gw-b", Incarnation: 5, Seq: 99}, RejectStale)
}

// TestMarksOwnIncarnationAcrossRestarts: the sender's incarnation strictly increases
// across restarts whatever the clock says (here it goes back a day), so that what was
// captured from it before is stale to a peer that heard it since.
func TestMarksOwnIncarnationAcrossRestarts(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lb-marks.json")
	receiver := openMarks(t, "", t0)
	var last int64
	for i := range 5 {
		sender := openMarks(t, file, t0.Add(-time.Duration(i)*24*time.Hour))
		inc := sender.Incarnation()
		if inc <= last {
			t.Fatalf("restart %d: incarnation %d, not above %d", i, inc, last)
		}
		admit(t, receiver, Heartbeat{Name: "gw-a", Incarnation: inc, Seq: 1}, "")
		if last != 0 {
			admit(t, receiver, Heartbeat{Name: "gw-a", Incarnation: last, Seq: 100}, RejectStale)
		}
		last = inc
	}
	b, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(b), `"incarnation"`) {
		t.Fatalf("marks file: %q %v", b, err)
	}
}

// TestMarksBounded: the file never holds more than MaxMarks peers; the one heard least
// recently goes first.
func TestMarksBounded(t *testing.T) {
	m := openMarks(t, "", t0)
	admit(t, m, Heartbeat{Name: "gw-first", Incarnation: 1, Seq: 1}, "")
	admit(t, m, Heartbeat{Name: "gw-kept", Incarnation: 1, Seq: 1}, "")
	admit(t, m, Heartbeat{Name: "gw-first", Incarnation: 1, Seq: 2}, "")
	for i := range MaxMarks - 1 {
		admit(t, m, Heartbeat{Name: fmt.Sprintf("gw-%04d", i), Incarnation: 1, Seq: 1}, "")
	}
	if len(m.peers) != MaxMarks {
		t.Fatalf("%d marks, want %d", len(m.peers), MaxMarks)
	}
	if m.peers["gw-kept"] != nil || m.peers["gw-first"] == nil {
		t.Errorf("dropped the wrong peer: gw-kept %v, gw-first %v", m.peers["gw-kept"], m.peers["gw-first"])
	}
}

func TestMarksCorruptFileRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lb-marks.json")
	if err := os.WriteFile(file, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMarks(file, t0); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("OpenMarks of a corrupt file: %v, want an error naming it", err)
	}
}
