package listener

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serve serves h on a gated loopback listener, wrapped by wrap when not nil, until the
// test ends.
func serve(t *testing.T, cfg Config, h http.Handler, wrap func(net.Listener) net.Listener) (*Gate, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate("test", cfg, nil, slog.New(slog.DiscardHandler))
	gl := g.Listen(ln)
	if wrap != nil {
		gl = wrap(gl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, g.Server(h), gl) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return g, ln.Addr().String()
}

// eventually waits up to bound for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within %v: %s", bound, what)
}

// TestHijackedConnectionCounts: a connection a handler took over (a websocket) still holds
// its place until it is closed, though http.Server no longer tracks it.
func TestHijackedConnectionCounts(t *testing.T) {
	hijacked := make(chan net.Conn, 1)
	g, addr := serve(t, caps(1, 10), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		hijacked <- c
	}), nil)
	client := dial(t, "127.0.0.1", addr)
	fmt.Fprintf(client, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	var c net.Conn
	select {
	case c = <-hijacked:
	case <-time.After(bound):
		t.Fatal("the handler did not run")
	}
	if got := g.Open(); got != 1 {
		t.Fatalf("open connections with one hijacked: %d, want 1", got)
	}
	expectRefused(t, "127.0.0.1", addr, "a second connection while the first is hijacked")

	c.Close()
	eventually(t, "the hijacked connection's place is given back", func() bool { return g.Open() == 0 })
	again := dial(t, "127.0.0.1", addr)
	fmt.Fprintf(again, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case c = <-hijacked:
		c.Close()
	case <-time.After(bound):
		t.Fatal("a connection after the hijacked one closed was not served")
	}
}

// slowHeader sends one byte of an endless header every interval until the server closes
// the connection, and returns how long that took.
func slowHeader(t *testing.T, c net.Conn, interval time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c) // ends when the server closes
	}()
	header := []byte("GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 1000))
	for i := 0; ; i++ {
		select {
		case <-closed:
			return time.Since(start)
		case <-time.After(interval):
		}
		if time.Since(start) > bound {
			t.Fatalf("the server still reads a header after %v", bound)
		}
		_, _ = c.Write(header[i%len(header) : i%len(header)+1])
	}
}

func TestSlowHeaderIsCutOff(t *testing.T) {
	cfg := Default
	cfg.ReadHeaderTimeout = 300 * time.Millisecond
	g, addr := serve(t, cfg, http.NotFoundHandler(), nil)
	took := slowHeader(t, dial(t, "127.0.0.1", addr), 50*time.Millisecond)
	t.Logf("a header sent a byte every 50ms was cut off after %v (ReadHeaderTimeout %v)", took, cfg.ReadHeaderTimeout)
	eventually(t, "the cut-off connection's place is given back", func() bool { return g.Open() == 0 })
}

func TestHeaderSizeLimit(t *testing.T) {
	_, addr := serve(t, Default, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }), nil)
	for _, tc := range []struct {
		size int
		want int
	}{{8 << 10, http.StatusOK}, {24 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Header.Set("X-Big", strings.Repeat("a", tc.size))
		resp, err := (&http.Client{Timeout: bound}).Do(req)
		if err != nil {
			t.Fatalf("a %d-byte header: %v", tc.size, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("a %d-byte header: status %d, want %d", tc.size, resp.StatusCode, tc.want)
		}
	}
}

// TestTLSOnTopOfTheGate is how the dashboard composes TLS with the gate: the gate counts
// the raw connection, and a client that never completes its handshake is cut off by the
// server's ReadHeaderTimeout.
func TestTLSOnTopOfTheGate(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	cert := ts.TLS.Certificates[0]
	ts.Close()
	cfg := caps(1, 10)
	cfg.ReadHeaderTimeout = 300 * time.Millisecond
	g, addr := serve(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "over tls") }),
		func(ln net.Listener) net.Listener {
			return tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		})

	silent := dial(t, "127.0.0.1", addr)
	eventually(t, "the silent client is counted", func() bool { return g.Open() == 1 })
	expectRefused(t, "127.0.0.1", addr, "a second raw connection while a handshake is pending")
	start := time.Now()
	expectClosed(t, silent, "a client that never starts its TLS handshake")
	t.Logf("a client that sent no handshake was cut off after %v", time.Since(start))
	eventually(t, "the silent client's place is given back", func() bool { return g.Open() == 0 })

	client := &http.Client{Timeout: bound, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://" + addr + "/")
	if err != nil {
		t.Fatalf("GET over TLS: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "over tls" {
		t.Fatalf("GET over TLS: %q", body)
	}
}

// uploadServer serves one upload handler; it answers the byte count or the error.
func uploadServer(t *testing.T, cfg Config, u Upload) string {
	t.Helper()
	_, addr := serve(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, u.Body(w, r))
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		case errors.Is(err, ErrTooSlow):
			http.Error(w, err.Error(), http.StatusRequestTimeout)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			fmt.Fprintf(w, "%d", n)
		}
	}), nil)
	return addr
}

// post announces a body of length bytes, sends chunks, one every interval, and returns the
// answer's status and body.
func post(t *testing.T, addr string, length int, chunks [][]byte, interval time.Duration) (int, string) {
	t.Helper()
	c := dial(t, "127.0.0.1", addr)
	fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", length)
	answered := make(chan struct{})
	var code int
	var body string
	go func() {
		defer close(answered)
		_ = c.SetReadDeadline(time.Now().Add(4 * bound))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			body = err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		code, body = resp.StatusCode, strings.TrimSpace(string(b))
	}()
	for _, ch := range chunks {
		if _, err := c.Write(ch); err != nil {
			break
		}
		select {
		case <-answered:
			return code, body
		case <-time.After(interval):
		}
	}
	<-answered
	return code, body
}

func TestUploadOutlivesReadTimeout(t *testing.T) {
	cfg := Default
	cfg.ReadTimeout, cfg.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	addr := uploadServer(t, cfg, Upload{Max: 1 << 20, MinBytes: 10, Window: 3 * time.Second})
	chunks := make([][]byte, 12)
	for i := range chunks {
		chunks[i] = bytes.Repeat([]byte{'x'}, 100)
	}
	start := time.Now()
	code, body := post(t, addr, 1200, chunks, 100*time.Millisecond)
	if code != http.StatusOK || body != "1200" {
		t.Fatalf("an upload slower than ReadTimeout and WriteTimeout but steady: %d %s; want 200 1200", code, body)
	}
	t.Logf("1200 bytes in 12 chunks took %v, past ReadTimeout and WriteTimeout of 300ms", time.Since(start))
}

func TestUploadTooBig(t *testing.T) {
	addr := uploadServer(t, Default, Upload{Max: 1000, MinBytes: 10, Window: bound})
	code, body := post(t, addr, 1001, [][]byte{bytes.Repeat([]byte{'x'}, 1001)}, time.Millisecond)
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("1001 bytes over a 1000-byte limit: %d %s; want 413", code, body)
	}
}

func TestUploadTrickleIsCutOff(t *testing.T) {
	addr := uploadServer(t, Default, Upload{Max: 1 << 20, MinBytes: 1000, Window: 300 * time.Millisecond})
	chunks := make([][]byte, 400) // one byte every 25ms: never 1000 in a window
	for i := range chunks {
		chunks[i] = []byte{'x'}
	}
	start := time.Now()
	code, body := post(t, addr, len(chunks), chunks, 25*time.Millisecond)
	if code != http.StatusRequestTimeout || !strings.Contains(body, "upload too slow") {
		t.Fatalf("a trickle: %d %s; want 408 upload too slow", code, body)
	}
	t.Logf("a trickle was cut off after %v: %s", time.Since(start), body)
}

func TestUploadStallIsCutOff(t *testing.T) {
	addr := uploadServer(t, Default, Upload{Max: 1 << 20, MinBytes: 10, Window: 300 * time.Millisecond})
	start := time.Now()
	// Promises 5000 bytes, sends 100, then nothing.
	code, body := post(t, addr, 5000, [][]byte{bytes.Repeat([]byte{'x'}, 100)}, 2*bound)
	if code != http.StatusRequestTimeout || !strings.Contains(body, "upload too slow") {
		t.Fatalf("a stalled upload: %d %s; want 408 upload too slow", code, body)
	}
	t.Logf("a stalled upload was cut off after %v: %s", time.Since(start), body)
}
