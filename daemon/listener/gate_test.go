package listener

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bound is how long a test waits for what must happen at once: a failure bound, far above
// anything a loaded machine takes.
const bound = 10 * time.Second

// fakeMetrics records what a gate reports.
type fakeMetrics struct {
	mu      sync.Mutex
	refused map[string]int // by reason
	open    map[string]int // by listener
}

func newFakeMetrics() *fakeMetrics {
	return &fakeMetrics{refused: map[string]int{}, open: map[string]int{}}
}

func (m *fakeMetrics) ListenerRefused(_, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused[reason]++
}

func (m *fakeMetrics) ListenerConnections(listener string, open int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.open[listener] = open
}

func (m *fakeMetrics) refusals(reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refused[reason]
}

// caps is Default with the given caps.
func caps(perSource, total int) Config {
	c := Default
	c.MaxConnsPerSource, c.MaxConns = perSource, total
	return c
}

// acceptor accepts on a gated loopback listener and hands out what it admits.
type acceptor struct {
	gate     *Gate
	addr     string
	accepted chan net.Conn
}

func newAcceptor(t *testing.T, cfg Config, m Metrics) *acceptor {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &acceptor{gate: NewGate("test", cfg, m, slog.New(slog.DiscardHandler)), addr: ln.Addr().String(), accepted: make(chan net.Conn, 16)}
	gl := a.gate.Listen(ln)
	t.Cleanup(func() { gl.Close() })
	go func() {
		for {
			c, err := gl.Accept()
			if err != nil {
				return
			}
			a.accepted <- c
		}
	}()
	return a
}

// dial connects from the loopback address from (127.0.0.1, 127.0.0.2, ...).
func dial(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: bound}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// admitted waits for the next admitted connection and checks where it comes from.
func (a *acceptor) admitted(t *testing.T, from string) net.Conn {
	t.Helper()
	select {
	case c := <-a.accepted:
		if got := source(c.RemoteAddr()).String(); got != from {
			t.Fatalf("admitted a connection from %s, want one from %s", got, from)
		}
		return c
	case <-time.After(bound):
		t.Fatalf("no connection from %s admitted within %v", from, bound)
		return nil
	}
}

// open dials from the loopback address from and waits until the gate admits the
// connection; it returns the server's side.
func (a *acceptor) open(t *testing.T, from string) net.Conn {
	t.Helper()
	dial(t, from, a.addr)
	return a.admitted(t, from)
}

// expectRefused dials from the loopback address from and checks that the gate closed the
// connection at once: its reset may come before the dial returns, or as the first read.
func expectRefused(t *testing.T, from, addr, what string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: bound}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return
	}
	if err != nil {
		t.Fatalf("%s: dial: %v; want a connection closed by the gate", what, err)
	}
	defer c.Close()
	expectClosed(t, c, what)
}

// expectClosed checks that the server side closed c at once: a read ends, without data.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(bound))
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	if n > 0 || err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: read %d bytes, %v; want the connection closed by the gate", what, n, err)
	}
}

// expectCount fails t when a count is not want.
func expectCount(t *testing.T, what string, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %d, want %d", what, got, want)
	}
}

func TestPerSourceCap(t *testing.T) {
	m := newFakeMetrics()
	a := newAcceptor(t, caps(2, 10), m)
	a.open(t, "127.0.0.1")
	a.open(t, "127.0.0.1")

	expectRefused(t, "127.0.0.1", a.addr, "a third connection from 127.0.0.1")
	a.open(t, "127.0.0.2")
	expectCount(t, "open connections", a.gate.Open(), 3)
	expectCount(t, "refusals per source", m.refusals(RefusedPerSource), 1)
}

func TestTotalCap(t *testing.T) {
	m := newFakeMetrics()
	a := newAcceptor(t, caps(10, 2), m)
	a.open(t, "127.0.0.1")
	a.open(t, "127.0.0.2")

	expectRefused(t, "127.0.0.3", a.addr, "a third connection, from a new source")
	expectCount(t, "refusals for the total", m.refusals(RefusedTotal), 1)
	expectCount(t, "refusals per source", m.refusals(RefusedPerSource), 0)
}

func TestCloseGivesThePlaceBackOnce(t *testing.T) {
	m := newFakeMetrics()
	a := newAcceptor(t, caps(1, 10), m)
	c := a.open(t, "127.0.0.1")
	expectRefused(t, "127.0.0.1", a.addr, "a second connection from 127.0.0.1")

	c.Close()
	c.Close() // twice: must give back one place, not two
	if got := a.gate.Open(); got != 0 {
		t.Fatalf("open connections after close: %d, want 0", got)
	}
	a.open(t, "127.0.0.1")
	expectRefused(t, "127.0.0.1", a.addr, "a second connection from 127.0.0.1 after one was closed twice")
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open["test"] != 1 {
		t.Errorf("reported open connections: %d, want 1", m.open["test"])
	}
}

func TestIPv4MappedSourcesCountAsIPv4(t *testing.T) {
	got := source(&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 80})
	if got.String() != "10.0.0.1" {
		t.Errorf("source of ::ffff:10.0.0.1 = %s, want 10.0.0.1", got)
	}
}

// TestCloseWriteReachesTCP proves the half-close http.Server uses reaches the TCP connection.
func TestCloseWriteReachesTCP(t *testing.T) {
	a := newAcceptor(t, caps(1, 1), nil)
	client := dial(t, "127.0.0.1", a.addr)
	server := a.admitted(t, "127.0.0.1")
	cw, ok := server.(interface{ CloseWrite() error })
	if !ok {
		t.Fatal("an admitted connection has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(bound))
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("client read after the server's CloseWrite: %v, want EOF", err)
	}
}

// TestRefusalsLoggedOncePerPeriod: a flood must not flood the log (the metrics count each).
func TestRefusalsLoggedOncePerPeriod(t *testing.T) {
	var logs strings.Builder
	m := newFakeMetrics()
	g := NewGate("test", caps(1, 10), m, slog.New(slog.NewTextHandler(&logs, nil)))
	for range 3 {
		g.refuse(netip.MustParseAddr("192.0.2.1"), RefusedPerSource)
	}
	if n := strings.Count(logs.String(), "cap reached"); n != 1 || m.refusals(RefusedPerSource) != 3 {
		t.Errorf("3 refusals: %d log lines, %d counted; want 1 line, 3 counted:\n%s", n, m.refusals(RefusedPerSource), logs.String())
	}
}
