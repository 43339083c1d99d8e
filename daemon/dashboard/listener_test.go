package dashboard

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/view"
)

// serveGated serves d with ServeListener on loopback until the test ends.
func serveGated(t *testing.T, d *Dashboard) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	})
	return ln.Addr().String()
}

func waitOpen(t *testing.T, g *listener.Gate, want int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); g.Open() != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the gate holds %d connections, want %d", g.Open(), want)
		}
	}
}

// TestWebsocketOutlivesServerTimeouts: the server's timeouts are for requests; a websocket
// lives on their far side, bounded by its own ping deadline, and holds its place in the
// gate until it closes.
func TestWebsocketOutlivesServerTimeouts(t *testing.T) {
	cfg := listener.Default
	cfg.MaxConnsPerSource = 1
	cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.WriteTimeout, cfg.IdleTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	gate := listener.NewGate("dashboard", cfg, nil, slog.New(slog.DiscardHandler))
	d := New(Options{Token: testToken, Mode: plan.ModeNFTables, PongWait: 300 * time.Millisecond, Gate: gate})
	addr := serveGated(t, d)

	conn, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/api/ws?token="+testToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan Message, 64)
	go func() {
		defer close(got)
		for {
			var m Message
			if err := conn.ReadJSON(&m); err != nil {
				return
			}
			got <- m
		}
	}()
	if m := <-got; m.Type != "snapshot" {
		t.Fatalf("first message: %+v", m)
	}
	waitOpen(t, gate, 1)
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || n > 0 {
			t.Errorf("a second connection from the websocket's source was served: %d bytes, %v", n, err)
		}
		c.Close()
	}

	time.Sleep(1 * time.Second) // ten times every server timeout
	_ = d.hub.Set(KeyNetwork, view.Network{Routes: []string{"default via 192.0.2.1"}})
	if m, ok := <-got; !ok || m.Key != KeyNetwork {
		t.Fatalf("after 1s, past the server's 100ms timeouts: %+v (open %v), want the change", m, ok)
	}
	conn.Close()
	waitOpen(t, gate, 0)
}

// TestUploadBounded: a firmware upload is bounded by Options.Upload, in size and progress,
// and answers what cut it off.
func TestUploadBounded(t *testing.T) {
	d := New(Options{Token: testToken, Mode: plan.ModeNFTables, Upload: listener.Upload{Max: 1000, MinBytes: 100, Window: 300 * time.Millisecond}})
	d.ServeUpdates(&fakeUpdater{})
	addr := serveGated(t, d)

	for _, tc := range []struct {
		name     string
		length   int
		chunks   []string
		interval time.Duration
		want     int
		wantBody string
	}{
		{"within bounds", 900, []string{strings.Repeat("x", 900)}, 0, http.StatusOK, `"phase": "staged"`},
		{"too big", 1001, []string{strings.Repeat("x", 1001)}, 0, http.StatusRequestEntityTooLarge, "too large"},
		{"trickle", 900, strings.Split(strings.Repeat("x", 900), ""), 25 * time.Millisecond, http.StatusRequestTimeout, "upload too slow"},
		{"stalled", 900, []string{"xx"}, 0, http.StatusRequestTimeout, "upload too slow"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /api/update?activate=0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", testToken, tc.length)
		answered := make(chan string, 1)
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answered <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			answered <- fmt.Sprintf("%d %s", resp.StatusCode, b)
		}()
		var answer string
	send:
		for _, ch := range tc.chunks {
			if _, err := io.WriteString(c, ch); err != nil {
				break
			}
			select {
			case answer = <-answered:
				break send
			case <-time.After(tc.interval):
			}
		}
		if answer == "" {
			answer = <-answered
		}
		c.Close()
		if !strings.HasPrefix(answer, fmt.Sprint(tc.want)) || !strings.Contains(answer, tc.wantBody) {
			t.Errorf("%s: %s; want %d with %q", tc.name, answer, tc.want, tc.wantBody)
		}
	}
}
