// Package healthz serves the proxy's own health on /healthz and /livez with kube-proxy's
// semantics: the proxy is healthy unless a change has waited longer than the health timeout
// without a sync that applied it. /healthz also fails while the node drains, so load balancers
// and the fleet rollout steer away from it; /livez does not, so nothing restarts a draining node.
package healthz

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/edgegate/edgegate/daemon/listener"
)

// Server tracks sync health and answers the health endpoints. Its methods are safe for
// concurrent use.
type Server struct {
	healthTimeout time.Duration
	now           func() time.Time

	mu           sync.Mutex
	lastUpdated  time.Time // zero until the first Updated
	oldestQueued time.Time // zero when no change waits for a sync
	draining     bool
	checks       []check
}

// check is an informational health check (see AddCheck).
type check struct {
	name string
	fn   func() (ok bool, detail any)
}

// CheckResult is one check's entry in the health bodies.
type CheckResult struct {
	OK     bool `json:"ok"`
	Detail any  `json:"detail,omitempty"`
}

// AddCheck adds a named check that is reported in the /healthz and /livez bodies and probed on
// its own at /healthz/<name> (200 when ok, 503 when not). It never changes the status code of
// /healthz or /livez, which keep kube-proxy's meaning: a gateway that lost its API server
// still forwards from its last state and must keep receiving traffic, while monitoring sees
// the lost link. Add checks before Handler is used.
func (s *Server) AddCheck(name string, fn func() (ok bool, detail any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checks = append(s.checks, check{name, fn})
}

func (s *Server) runChecks() map[string]CheckResult {
	s.mu.Lock()
	checks := s.checks
	s.mu.Unlock()
	if len(checks) == 0 {
		return nil
	}
	out := make(map[string]CheckResult, len(checks))
	for _, c := range checks {
		ok, detail := c.fn()
		out[c.name] = CheckResult{OK: ok, Detail: detail}
	}
	return out
}

// New returns a Server that reports unhealthy once a queued change is older than healthTimeout.
// now is the clock the answers are judged by (time.Now outside tests).
func New(healthTimeout time.Duration, now func() time.Time) *Server {
	return &Server{healthTimeout: healthTimeout, now: now}
}

// QueuedUpdate records that a change arrived at t and waits for a sync. Only the oldest
// waiting change counts, so a steady stream of changes cannot hide a stuck sync loop.
func (s *Server) QueuedUpdate(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.oldestQueued.IsZero() {
		s.oldestQueued = t
	}
}

// Updated records a successful sync at t, which applies every change queued so far. Call it
// once when the sync loop starts, as kube-proxy does, so that a first sync that never finishes
// is noticed: until the first Updated the proxy counts as starting up and healthy.
func (s *Server) Updated(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.oldestQueued = time.Time{}
	s.lastUpdated = t
}

// SetDraining makes /healthz fail (or pass again) independently of sync health.
func (s *Server) SetDraining(draining bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = draining
}

// IsHealthy reports sync health alone, ignoring draining; it is what the per-service health
// checks report as serviceProxyHealthy.
func (s *Server) IsHealthy() bool {
	healthy, _, _ := s.state(s.now())
	return healthy
}

// state returns sync health at now, the last successful sync, and whether the node is eligible
// for traffic (not draining).
func (s *Server) state(now time.Time) (healthy bool, lastUpdated time.Time, eligible bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	healthy = s.lastUpdated.IsZero() || s.oldestQueued.IsZero() || now.Sub(s.oldestQueued) < s.healthTimeout
	return healthy, s.lastUpdated, !s.draining
}

// Handler returns a handler with its own mux serving /healthz and /livez.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		now := s.now()
		healthy, last, eligible := s.state(now)
		writeStatus(w, healthy && eligible, status{LastUpdated: last, CurrentTime: now, NodeEligible: &eligible, Checks: s.runChecks()})
	})
	mux.HandleFunc("GET /healthz/{check}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		checks := s.checks
		s.mu.Unlock()
		for _, c := range checks {
			if c.name == r.PathValue("check") {
				ok, detail := c.fn()
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("X-Content-Type-Options", "nosniff")
				if !ok {
					w.WriteHeader(http.StatusServiceUnavailable)
				}
				_ = json.NewEncoder(w).Encode(CheckResult{OK: ok, Detail: detail})
				return
			}
		}
		http.NotFound(w, r)
	})
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		now := s.now()
		healthy, last, _ := s.state(now)
		writeStatus(w, healthy, status{LastUpdated: last, CurrentTime: now, Checks: s.runChecks()})
	})
	return mux
}

// status is the body kube-proxy answers with; /livez leaves out nodeEligible.
type status struct {
	LastUpdated  time.Time `json:"lastUpdated"`
	CurrentTime  time.Time `json:"currentTime"`
	NodeEligible *bool     `json:"nodeEligible,omitempty"`
	// Checks are edgegate's informational checks (AddCheck), absent when there are none.
	Checks map[string]CheckResult `json:"checks,omitempty"`
}

func writeStatus(w http.ResponseWriter, healthy bool, st status) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	code := http.StatusServiceUnavailable
	if healthy {
		code = http.StatusOK
		// kube-proxy answers a healthy probe with lastUpdated = now, a compatibility habit from
		// when it meant "the sync loop ran"; the metrics carry the real last sync time.
		st.LastUpdated = st.CurrentTime
	}
	w.WriteHeader(code)
	// The body is a courtesy; the status code has been sent and is what probes read.
	_ = json.NewEncoder(w).Encode(st)
}

// Serve listens on addr and serves Handler through gate until ctx ends, then shuts down
// gracefully. It returns an error only when it cannot listen or the server fails.
func (s *Server) Serve(ctx context.Context, addr string, gate *listener.Gate, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("healthz listen on %s: %w", addr, err)
	}
	log.Info("healthz serving", "addr", ln.Addr().String())
	if err := listener.Serve(ctx, gate.Server(s.Handler()), gate.Listen(ln)); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	return nil
}
