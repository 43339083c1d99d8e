// Package dashboard is the gateway's local operator interface: an HTTP server on the
// management address that serves the embedded web UI, a websocket hub that pushes the
// daemon's state as it changes, and read-only plain-text/JSON views (rules, conntrack,
// addresses and routes, logs) that replace the shell a gateway does not have.
package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sync"
)

// Message is one websocket frame. A client gets one "snapshot" first (every key's current
// value), then "set" (a key's new value) and "append" (one more entry of a list key, such as a
// log line or a sync) messages in the order the hub accepted them.
type Message struct {
	Type  string                     `json:"type"`
	Seq   uint64                     `json:"seq"`
	State map[string]json.RawMessage `json:"state,omitempty"`
	Key   string                     `json:"key,omitempty"`
	Value json.RawMessage            `json:"value,omitempty"`
}

// Hub keeps the dashboard's state as JSON values by key and fans every change out to the
// connected clients. Publishing never blocks: a client whose bounded buffer is full is
// dropped (its channel closed) and reconnects to a fresh snapshot.
type Hub struct {
	mu      sync.Mutex
	values  map[string]json.RawMessage
	lists   map[string][]json.RawMessage
	caps    map[string]int
	clients map[*Client]struct{}
	seq     uint64
	buffer  int
	dropped uint64
}

// Client is one subscriber. Its messages arrive on C, which the hub closes when the
// client is dropped or unsubscribed.
type Client struct {
	C    <-chan []byte
	send chan []byte
}

// NewHub returns a hub whose clients buffer up to buffer messages each.
func NewHub(buffer int) *Hub {
	return &Hub{
		values: map[string]json.RawMessage{}, lists: map[string][]json.RawMessage{},
		caps: map[string]int{}, clients: map[*Client]struct{}{}, buffer: max(buffer, 1),
	}
}

// Set stores v under key and sends it to every client, unless it equals the stored value.
func (h *Hub) Set(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("dashboard state %q: %w", key, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.values[key]; ok && bytes.Equal(old, b) {
		return nil
	}
	h.values[key] = b
	h.broadcast(Message{Type: "set", Key: key, Value: b})
	return nil
}

// Append adds v to the list under key, which keeps its newest limit entries, and sends the
// entry to every client.
func (h *Hub) Append(key string, limit int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("dashboard list %q: %w", key, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	l := append(h.lists[key], b)
	if len(l) > limit {
		l = append(l[:0:0], l[len(l)-limit:]...)
	}
	h.lists[key] = l
	h.broadcast(Message{Type: "append", Key: key, Value: b})
	return nil
}

// broadcast encodes m once and offers it to every client without waiting. Called with mu held.
func (h *Hub) broadcast(m Message) {
	h.seq++
	m.Seq = h.seq
	b, err := json.Marshal(m)
	if err != nil {
		return // every part is already valid JSON
	}
	for c := range h.clients {
		select {
		case c.send <- b:
		default:
			h.drop(c)
		}
	}
}

func (h *Hub) drop(c *Client) {
	delete(h.clients, c)
	close(c.send)
	h.dropped++
}

// snapshot is the full state as one message. Called with mu held.
func (h *Hub) snapshot() Message {
	st := make(map[string]json.RawMessage, len(h.values)+len(h.lists))
	for k, v := range h.values {
		st[k] = v
	}
	for k, l := range h.lists {
		st[k], _ = json.Marshal(l) // cannot fail: every entry is already valid JSON
	}
	return Message{Type: "snapshot", Seq: h.seq, State: st}
}

// Snapshot returns the full state as JSON, what /api/state serves.
func (h *Hub) Snapshot() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, _ := json.Marshal(h.snapshot().State)
	return b
}

// Subscribe adds a client whose first message is the full snapshot.
func (h *Hub) Subscribe() *Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	send := make(chan []byte, h.buffer)
	c := &Client{C: send, send: send}
	b, _ := json.Marshal(h.snapshot())
	send <- b
	h.clients[c] = struct{}{}
	return c
}

// Unsubscribe removes a client; its channel is closed. Safe after the hub dropped it.
func (h *Hub) Unsubscribe(c *Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.clients[c]; ok {
		delete(h.clients, c)
		close(c.send)
	}
}

// Stats reports the connected clients and how many were dropped for falling behind.
func (h *Hub) Stats() (clients int, dropped uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients), h.dropped
}

// List returns a copy of the list under key, oldest first.
func (h *Hub) List(key string) []json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]json.RawMessage(nil), h.lists[key]...)
}
