// Package listener hardens the daemon's HTTP listeners (healthz, metrics, the per-Service
// health checks, the dashboard): a Gate caps the connections a listener holds, in all and
// per source address, and builds the http.Server with the timeouts and size limits every
// listener shares, so that idle or slow clients cannot hold PID 1's file descriptors.
//
// A Gate counts raw TCP connections, before any TLS: a TLS listener goes on top of the
// gated one (tls.NewListener(gate.Listen(ln), cfg)), and http.Server bounds the handshake
// of every *tls.Conn it accepts by the smallest of its timeouts (ReadHeaderTimeout here).
package listener

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Config is how a listener is hardened. Every field must be positive.
type Config struct {
	// MaxConnsPerSource caps the connections one source address holds open at once;
	// MaxConns caps all of them. A connection over either cap is closed at once.
	MaxConnsPerSource int
	MaxConns          int
	// ReadHeaderTimeout bounds the TLS handshake and the request line and headers;
	// ReadTimeout the whole request with its body; WriteTimeout the handler and its
	// answer; IdleTimeout a kept-alive connection between requests.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
}

// Default is what an operator expects of a management listener: a browser's handful of
// connections and a few scrapers or load balancer probes per source fit well under the
// per-source cap, and all four listeners at their caps stay far below the 4096 file
// descriptors a PID 1 has. The write timeout leaves room for a 30s profile.
var Default = Config{
	MaxConnsPerSource: 32,
	MaxConns:          256,
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       30 * time.Second,
	WriteTimeout:      60 * time.Second,
	IdleTimeout:       60 * time.Second,
	MaxHeaderBytes:    16 << 10,
}

// Reasons a connection is refused, as the metrics label them.
const (
	RefusedPerSource = "per_source"
	RefusedTotal     = "total"
)

// Metrics receives a gate's counts; *metrics.Metrics implements it.
type Metrics interface {
	ListenerRefused(listener, reason string)
	ListenerConnections(listener string, open int)
}

// refusalLogEvery bounds the log to one line per gate and period however hard it is hit;
// the metrics count every refusal.
const refusalLogEvery = time.Minute

// Gate admits connections up to its caps. One Gate may gate several listeners (the health
// check ports share one), which then share its counts. It is safe for concurrent use.
type Gate struct {
	name    string
	cfg     Config
	metrics Metrics // may be nil
	log     *slog.Logger

	mu         sync.Mutex
	open       int
	bySource   map[netip.Addr]int
	refused    int // since the last log line
	lastLogged time.Time
}

// NewGate returns a gate named name (the metrics' "listener" label) with cfg's caps and
// timeouts. m may be nil.
func NewGate(name string, cfg Config, m Metrics, log *slog.Logger) *Gate {
	g := &Gate{name: name, cfg: cfg, metrics: m, log: log, bySource: map[netip.Addr]int{}}
	if m != nil {
		m.ListenerConnections(name, 0)
	}
	return g
}

// Open returns the number of connections the gate holds open, hijacked ones included.
func (g *Gate) Open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// Listen returns ln gated: Accept returns only connections within the caps and closes the
// others at once (with a reset, so they cost neither a descriptor nor a TIME_WAIT). A
// connection counts until it is closed, also after an http.Server handed it to a handler
// (a websocket).
func (g *Gate) Listen(ln net.Listener) net.Listener { return &gated{Listener: ln, g: g} }

type gated struct {
	net.Listener
	g *Gate
}

func (l *gated) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := source(c.RemoteAddr())
		if reason := l.g.admit(src); reason != "" {
			l.g.refuse(src, reason)
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		return &conn{Conn: c, release: func() { l.g.release(src) }}, nil
	}
}

// source is the address a connection comes from; connections that are not IP share one.
func source(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// admit takes a place for a connection from src, or says why there is none.
func (g *Gate) admit(src netip.Addr) (reason string) {
	g.mu.Lock()
	switch {
	case g.bySource[src] >= g.cfg.MaxConnsPerSource:
		reason = RefusedPerSource
	case g.open >= g.cfg.MaxConns:
		reason = RefusedTotal
	default:
		g.bySource[src]++
		g.open++
	}
	open := g.open
	g.mu.Unlock()
	if reason == "" {
		g.report(open)
	}
	return reason
}

// refuse counts a refused connection, and logs it with those since the last line at most
// once per refusalLogEvery.
func (g *Gate) refuse(src netip.Addr, reason string) {
	if g.metrics != nil {
		g.metrics.ListenerRefused(g.name, reason)
	}
	g.mu.Lock()
	g.refused++
	refused, now := g.refused, time.Now()
	logNow := now.Sub(g.lastLogged) >= refusalLogEvery
	if logNow {
		g.refused, g.lastLogged = 0, now
	}
	g.mu.Unlock()
	if logNow {
		g.log.Warn("connections refused: cap reached", "listener", g.name, "source", src.String(), "reason", reason,
			"refused", refused, "maxConnsPerSource", g.cfg.MaxConnsPerSource, "maxConns", g.cfg.MaxConns)
	}
}

func (g *Gate) release(src netip.Addr) {
	g.mu.Lock()
	if g.bySource[src]--; g.bySource[src] <= 0 {
		delete(g.bySource, src)
	}
	g.open--
	open := g.open
	g.mu.Unlock()
	g.report(open)
}

func (g *Gate) report(open int) {
	if g.metrics != nil {
		g.metrics.ListenerConnections(g.name, open)
	}
}

// conn is an admitted connection: closing it, once, gives its place back.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite lets http.Server half-close a plain TCP connection before it closes it, so a
// client still sending is not reset before it reads the answer.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
