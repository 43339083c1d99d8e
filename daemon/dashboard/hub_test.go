package dashboard

import (
	"encoding/json"
	"fmt"
	"testing"
)

func decode(t *testing.T, b []byte) Message {
	t.Helper()
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("message %s: %v", b, err)
	}
	return m
}

// next takes the client's next buffered message; the hub sends synchronously, so a
// message that is not buffered yet was never sent.
func next(t *testing.T, c *Client) (Message, bool) {
	t.Helper()
	select {
	case b, ok := <-c.C:
		if !ok {
			return Message{}, false
		}
		return decode(t, b), true
	default:
		t.Fatal("no message buffered")
		return Message{}, false
	}
}

func TestHubFanOut(t *testing.T) {
	h := NewHub(16)
	if err := h.Set("firmware", Firmware{Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	clients := []*Client{h.Subscribe(), h.Subscribe(), h.Subscribe()}
	for i, c := range clients {
		m, _ := next(t, c)
		if m.Type != "snapshot" || string(m.State["firmware"]) == "" {
			t.Fatalf("client %d: first message %+v, want the snapshot with firmware", i, m)
		}
	}
	_ = h.Set("services", []Service{{Name: "default/web"}})
	_ = h.Set("services", []Service{{Name: "default/web"}}) // unchanged: not sent again
	_ = h.Append("logs", 3, LogEntry{Message: "one"})
	for i, c := range clients {
		m, _ := next(t, c)
		if m.Type != "set" || m.Key != "services" || m.Seq != 2 {
			t.Errorf("client %d: %+v, want set services with seq 2", i, m)
		}
		m, _ = next(t, c)
		if m.Type != "append" || m.Key != "logs" || m.Seq != 3 {
			t.Errorf("client %d: %+v, want append logs with seq 3 (an unchanged value is not a change)", i, m)
		}
		if len(c.C) != 0 {
			t.Errorf("client %d: %d messages more than sent", i, len(c.C))
		}
	}
}

func TestHubDropsSlowClientOthersReceive(t *testing.T) {
	h := NewHub(4)
	slow, fast := h.Subscribe(), h.Subscribe()
	next(t, fast)
	const sent = 50
	for i := range sent {
		// Never blocks although slow reads nothing: the test would hang otherwise.
		_ = h.Set("traffic", map[string]int{"n": i})
		m, ok := next(t, fast)
		if !ok || m.Key != "traffic" {
			t.Fatalf("fast client, message %d: %+v (open %v)", i, m, ok)
		}
	}
	got := 0
	for range slow.C {
		got++
	}
	if got != 4 {
		t.Errorf("slow client got %d messages before its channel closed, want its buffer of 4", got)
	}
	clients, dropped := h.Stats()
	if clients != 1 || dropped != 1 {
		t.Errorf("stats: %d clients, %d dropped; want 1 and 1", clients, dropped)
	}
	h.Unsubscribe(slow) // after a drop: no double close
}

func TestHubReconnectGetsSnapshotFirst(t *testing.T) {
	h := NewHub(2)
	c := h.Subscribe()
	for i := range 5 {
		_ = h.Set("services", []Service{{Name: fmt.Sprint("svc-", i)}})
		_ = h.Append("syncs", 3, Sync{Chains: i})
	}
	for range c.C {
	}
	again := h.Subscribe()
	m, _ := next(t, again)
	if m.Type != "snapshot" || m.Seq != 10 {
		t.Fatalf("first message after reconnect: type %q seq %d, want the snapshot at seq 10", m.Type, m.Seq)
	}
	var svcs []Service
	var syncs []Sync
	if err := json.Unmarshal(m.State["services"], &svcs); err != nil || len(svcs) != 1 || svcs[0].Name != "svc-4" {
		t.Errorf("snapshot services %s (%v), want the newest", m.State["services"], err)
	}
	if err := json.Unmarshal(m.State["syncs"], &syncs); err != nil || len(syncs) != 3 || syncs[0].Chains != 2 || syncs[2].Chains != 4 {
		t.Errorf("snapshot syncs %s (%v), want the newest 3 in order", m.State["syncs"], err)
	}
	_ = h.Set("services", []Service{})
	if m, _ := next(t, again); m.Type != "set" || m.Seq != 11 {
		t.Errorf("after the snapshot: %+v, want the next change", m)
	}
}
