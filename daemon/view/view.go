// Package view holds what a proxy mode shows its operator: the rules as the kernel holds
// them and the traffic of each Service and endpoint. The kernel adapters produce these
// values, each mode's dataplane answers with them, and the dashboard only renders them. It
// imports only the model and the standard library.
package view

import (
	"fmt"
	"strings"
	"sync"

	"github.com/edgegate/edgegate/daemon/model"
)

// Source is what a proxy mode's dataplane shows.
type Source interface {
	// Rules prints the mode's rules as the kernel holds them, in the form of the mode's
	// stock tool (nft list ruleset, iptables-save, ipvsadm -Ln).
	Rules() (string, error)
	// Traffic reads the kernel's counters for the service ports of a snapshot, by
	// "namespace/name:port".
	Traffic(snap *model.Snapshot) (map[string]ServiceTraffic, error)
}

// Protected is implemented by a Source whose mode protects exposed addresses (nftables).
type Protected interface {
	// Refusals reads, by "namespace/name:port", the cumulative refusals of the service
	// ports of snap that have per-source limits.
	Refusals(snap *model.Snapshot) (map[string]Refusals, error)
}

// ServiceTraffic is the cumulative count of one service port and of each of its backends
// (keyed by endpoint address:port).
type ServiceTraffic struct {
	BackendTraffic
	Backends map[string]BackendTraffic `json:"backends"`
	// Refused counts the new connections the port's protection refused (nil for a port
	// without per-source limits).
	Refused *Refusals `json:"refused,omitempty"`
}

// Refusals are the new connections a protected service port refused, by the limit that
// refused them.
type Refusals struct {
	// Rate: the source opened connections faster than newConnsPerSecond allows.
	Rate uint64 `json:"rate"`
	// Conns: the source already held maxConnsPerSource connections.
	Conns uint64 `json:"conns"`
}

// BackendTraffic is a cumulative count. Connections is new connections. The nftables
// counters sit in NAT chains, which only a connection's first packet passes: there Packets
// and Bytes are those first packets, and equal Connections. IPVS counts every packet and
// byte of a connection, both ways.
type BackendTraffic struct {
	Connections uint64 `json:"connections"`
	Packets     uint64 `json:"packets"`
	Bytes       uint64 `json:"bytes"`
}

// Network is the node's interfaces with their addresses, and its routes.
type Network struct {
	Links  []Link   `json:"links"`
	Routes []string `json:"routes"`
}

// Link is one interface.
type Link struct {
	Name  string   `json:"name"`
	Up    bool     `json:"up"`
	Addrs []string `json:"addrs"`
}

// DefaultLimit is the size a rendering of the rules is cut at: 10,000 Services with 10
// endpoints each print some 50 MB, more than a browser tab shows usefully.
const DefaultLimit = 8 << 20

// Text is a rendering capped at a size: what is written past it is dropped, and Full
// tells a renderer that it can stop reading the kernel.
type Text struct {
	b     strings.Builder
	limit int
	cut   bool
}

// NewText returns a text capped at limit bytes (DefaultLimit when 0).
func NewText(limit int) *Text {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Text{limit: limit}
}

// Printf appends to the text while it has room; the line that crosses the cap is dropped
// whole.
func (t *Text) Printf(format string, args ...any) {
	if t.cut {
		return
	}
	s := fmt.Sprintf(format, args...)
	if t.b.Len()+len(s) > t.limit {
		t.cut = true
		return
	}
	t.b.WriteString(s)
}

// Full reports whether the text was cut: nothing more will be kept.
func (t *Text) Full() bool { return t.cut }

// String returns the text, with a last line saying so when it was cut.
func (t *Text) String() string {
	if !t.cut {
		return t.b.String()
	}
	return t.b.String() + fmt.Sprintf("\n# cut: this view stops at %d bytes; the kernel holds more\n", t.limit)
}

// Cache keeps one rendering of the kernel's rules for as long as the nftables ruleset
// generation (which the kernel bumps at every committed batch, whoever sent it) stays the
// same: reading 10,000-50,000 Services back takes seconds, and an operator reloading the
// page must not cost that each time. Concurrent readers of a changed generation wait for
// one rendering.
type Cache struct {
	// Generation reads the ruleset generation.
	Generation func() (uint32, error)
	// Render writes the rules into t.
	Render func(t *Text) error
	// Limit caps the rendering (DefaultLimit when 0).
	Limit int

	mu    sync.Mutex
	valid bool
	gen   uint32
	text  string
}

// Text returns the rendering of the current generation, rendering it when the generation
// changed since the last one.
func (c *Cache) Text() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The generation is read before the rules: a commit while they are read leaves a
	// rendering tagged with the older generation, which the next call replaces.
	gen, err := c.Generation()
	if err != nil {
		return "", fmt.Errorf("nftables generation: %w", err)
	}
	if c.valid && gen == c.gen {
		return c.text, nil
	}
	t := NewText(c.Limit)
	t.Printf("# as the kernel holds it at ruleset generation %d (counters: see the traffic view)\n", gen)
	if err := c.Render(t); err != nil {
		c.valid = false
		return "", err
	}
	c.valid, c.gen, c.text = true, gen, t.String()
	return c.text, nil
}
