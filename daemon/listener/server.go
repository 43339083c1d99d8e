package listener

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"
)

// shutdownGrace is how long requests in flight may finish once the daemon stops.
const shutdownGrace = 2 * time.Second

// Server returns an http.Server for h with the gate's timeouts and header limit. Request
// bodies are bounded by ReadTimeout and, when a handler leaves one unread, by the server
// itself, which discards at most 256 KiB of it and then closes the connection; a handler
// that reads a body bounds it (http.MaxBytesReader, or Upload for a stream).
func (g *Gate) Server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: g.cfg.ReadHeaderTimeout,
		ReadTimeout:       g.cfg.ReadTimeout,
		WriteTimeout:      g.cfg.WriteTimeout,
		IdleTimeout:       g.cfg.IdleTimeout,
		MaxHeaderBytes:    g.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
}

// Serve serves srv on ln until ctx ends, then shuts srv down, letting requests in flight
// finish for a moment. ln is a gated listener (Gate.Listen), possibly inside a TLS one. Serve
// returns nil once ctx has ended, and the server's error if it fails before.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	shutdownDone := make(chan struct{})
	stopShutdown := context.AfterFunc(ctx, func() {
		defer close(shutdownDone)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		_ = srv.Shutdown(sctx) // past the grace, connections are closed all the same
	})
	err := srv.Serve(ln)
	if !stopShutdown() {
		<-shutdownDone
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
}

// ErrTooSlow ends an upload that brought less than its Upload.MinBytes in a window.
var ErrTooSlow = errors.New("upload too slow")

// Upload bounds a streamed request body, such as a firmware bundle of tens of megabytes
// that a slow link takes minutes to bring: no total time limit, but at most Max bytes and
// at least MinBytes in every Window. A client that stalls is cut off at the window's end.
type Upload struct {
	Max      int64
	MinBytes int64
	Window   time.Duration
}

// Body returns r's body bounded by u, for the handler of r to read instead of r.Body. It
// replaces the server's ReadTimeout (made for small requests) with u's windows for this
// request, and lifts the WriteTimeout until the body is read, then gives the answer the
// server's WriteTimeout from there.
func (u Upload) Body(w http.ResponseWriter, r *http.Request) io.Reader {
	rc := http.NewResponseController(w)
	var writeTimeout time.Duration
	if srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok {
		writeTimeout = srv.WriteTimeout
	}
	b := &uploadBody{r: http.MaxBytesReader(w, r.Body, u.Max), rc: rc, u: u, writeTimeout: writeTimeout}
	if err := rc.SetWriteDeadline(time.Time{}); err != nil {
		b.err = fmt.Errorf("upload: lift the write deadline: %w", err)
	}
	return b
}

type uploadBody struct {
	r            io.Reader
	rc           *http.ResponseController
	u            Upload
	writeTimeout time.Duration

	windowEnd time.Time
	got       int64 // bytes in the window that ends at windowEnd
	err       error // sticky
}

func (b *uploadBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	now := time.Now()
	switch {
	case b.windowEnd.IsZero():
		b.windowEnd = now.Add(b.u.Window)
	case !now.Before(b.windowEnd):
		if b.got < b.u.MinBytes {
			return 0, b.fail(b.tooSlow())
		}
		b.windowEnd, b.got = now.Add(b.u.Window), 0
	}
	// A read must not wait past the window that still lacks its bytes; one that has them
	// may wait into the next.
	deadline := b.windowEnd
	if b.got >= b.u.MinBytes {
		deadline = deadline.Add(b.u.Window)
	}
	if err := b.rc.SetReadDeadline(deadline); err != nil {
		return 0, b.fail(fmt.Errorf("upload: set the read deadline: %w", err))
	}
	n, err := b.r.Read(p)
	b.got += int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			b.answerDeadline()
			return n, err
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = b.tooSlow()
		}
		return n, b.fail(err)
	}
	return n, nil
}

func (b *uploadBody) tooSlow() error {
	return fmt.Errorf("%w: %d bytes in %s, want at least %d", ErrTooSlow, b.got, b.u.Window, b.u.MinBytes)
}

// fail ends the upload with err and gives the answer its write deadline.
func (b *uploadBody) fail(err error) error {
	b.err = err
	b.answerDeadline()
	return err
}

func (b *uploadBody) answerDeadline() {
	if b.writeTimeout > 0 {
		_ = b.rc.SetWriteDeadline(time.Now().Add(b.writeTimeout))
	}
}
