package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/internal/fault"
	"github.com/edgegate/edgegate/daemon/update"
)

// Machine is what PID 1 does for its child.
type Machine interface {
	// Ready is told of every successful sync.
	Ready()
	// Report records a report of the process pid and returns what PID 1 knows of the runs.
	Report(pid int, r Report) Child
}

// Limits of the server: one child makes a few concurrent calls (a report, a long poll, an
// upload or two), so a handful of connections is plenty, and nothing else may connect.
const (
	maxConns       = 16
	maxSmallBody   = 64 << 10
	maxStatusWait  = time.Minute
	readHeaderWait = 5 * time.Second
	idleWait       = 2 * time.Minute
)

// Server is PID 1's side of the channel.
type Server struct {
	machine Machine
	updates update.Updater
	isChild func(pid int) bool
	log     *slog.Logger

	mu      sync.Mutex
	version uint64        // counts the updater's changes
	changed chan struct{} // closed and replaced at each change
}

// NewServer returns a server for m and u (nil: this machine has no updater); isChild says
// whether a connecting process is the current child, and only those are answered.
func NewServer(m Machine, u update.Updater, isChild func(pid int) bool, log *slog.Logger) *Server {
	s := &Server{machine: m, updates: u, isChild: isChild, log: log, changed: make(chan struct{})}
	if u != nil {
		u.OnChange(s.bump)
	}
	return s
}

func (s *Server) bump() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	close(s.changed)
	s.changed = make(chan struct{})
}

type peerKey struct{}

// Listen creates the socket at path, readable and writable by root only, replacing a stale
// one of an earlier run.
func Listen(path string) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve answers on l until ctx ends.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderWait,
		IdleTimeout:       idleWait,
		MaxHeaderBytes:    16 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			pid := -1
			if pc, ok := c.(*peerConn); ok {
				pid = pc.pid
			}
			return context.WithValue(ctx, peerKey{}, pid)
		},
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	err := srv.Serve(&peerListener{Listener: l, slots: make(chan struct{}, maxConns)})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// peerListener accepts at most cap(slots) connections at a time and notes the process at the
// other end of each.
type peerListener struct {
	net.Listener
	slots chan struct{}
}

func (l *peerListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &peerConn{Conn: c, pid: peerPID(c), release: sync.OnceFunc(func() { <-l.slots })}, nil
}

type peerConn struct {
	net.Conn
	pid     int
	release func()
}

func (c *peerConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// peerPID is the process at the other end of a unix socket; -1 when unknown.
func peerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1
	}
	pid := -1
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// Handler is the server's HTTP API; requests whose connection does not carry a child's
// process ID (see Serve) are refused.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/ready", func(w http.ResponseWriter, _ *http.Request) {
		s.machine.Ready()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/report", s.serveReport)
	mux.HandleFunc("GET /v1/update", s.serveStatus)
	mux.HandleFunc("POST /v1/update/install", s.serveInstall)
	mux.HandleFunc("POST /v1/update/activate", func(w http.ResponseWriter, _ *http.Request) {
		s.answerUpdate(w, func(u update.Updater) (update.Attempt, error) { return u.Activate() })
	})
	mux.HandleFunc("POST /v1/update/cancel", func(w http.ResponseWriter, r *http.Request) {
		s.answerUpdate(w, func(u update.Updater) (update.Attempt, error) { return u.Cancel(r.URL.Query().Get("source")) })
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A panic below is recovered by net/http: the request fails, PID 1 goes on.
		fault.Point(fault.Update)
		pid, _ := r.Context().Value(peerKey{}).(int)
		if !s.isChild(pid) {
			s.log.Warn("refused a control request from a process that is not the daemon", "pid", pid, "path", r.URL.Path)
			http.Error(w, "only PID 1's daemon may use this socket", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (s *Server) serveReport(w http.ResponseWriter, r *http.Request) {
	var rep Report
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSmallBody)).Decode(&rep); err != nil {
		http.Error(w, "report: "+err.Error(), http.StatusBadRequest)
		return
	}
	pid, _ := r.Context().Value(peerKey{}).(int)
	writeJSON(w, s.machine.Report(pid, rep))
}

// serveStatus answers the updater's status; with after=N it waits (up to wait, at most a
// minute) until the status has changed more than N times.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	if s.updates == nil {
		writeJSON(w, statusAnswer{Status: update.Status{Problem: update.ErrUnavailable.Error()}})
		return
	}
	q := r.URL.Query()
	if q.Has("after") {
		after, err := strconv.ParseUint(q.Get("after"), 10, 64)
		if err != nil {
			http.Error(w, "after: "+err.Error(), http.StatusBadRequest)
			return
		}
		wait, err := time.ParseDuration(q.Get("wait"))
		if err != nil || wait <= 0 || wait > maxStatusWait {
			wait = maxStatusWait
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		for {
			s.mu.Lock()
			v, changed := s.version, s.changed
			s.mu.Unlock()
			if v > after {
				break
			}
			select {
			case <-changed:
				continue
			case <-t.C:
			case <-r.Context().Done():
				return
			}
			break
		}
	}
	s.mu.Lock()
	v := s.version
	s.mu.Unlock()
	writeJSON(w, statusAnswer{Version: v, Status: s.updates.Status()})
}

func (s *Server) serveInstall(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := update.Request{Source: q.Get("source"), Force: q.Get("force") == "1", Activate: q.Get("activate") == "1"}
	s.answerUpdate(w, func(u update.Updater) (update.Attempt, error) { return u.Install(r.Context(), r.Body, req) })
}

func (s *Server) answerUpdate(w http.ResponseWriter, fn func(update.Updater) (update.Attempt, error)) {
	if s.updates == nil {
		writeJSON(w, updateAnswer{Error: update.ErrUnavailable.Error(), Kind: "unavailable"})
		return
	}
	a, err := fn(s.updates)
	ans := updateAnswer{Attempt: a}
	if err != nil {
		ans.Error, ans.Kind = err.Error(), errorKind(err)
	}
	writeJSON(w, ans)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(encode(v)) // an error means the child went away: nothing to tell it
}
