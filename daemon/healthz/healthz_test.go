package healthz

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/runner/fakeclock"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

const timeout = 30 * time.Second

type answer struct {
	code int
	body map[string]any
}

func probe(t *testing.T, h http.Handler, path string) answer {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", path, ct)
	}
	if v := rec.Header().Get("X-Content-Type-Options"); v != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q", path, v)
	}
	a := answer{code: rec.Code}
	if err := json.Unmarshal(rec.Body.Bytes(), &a.body); err != nil {
		t.Fatalf("%s: body %q: %v", path, rec.Body.String(), err)
	}
	return a
}

// expectProbe checks a probe's status code and its lastUpdated/currentTime fields.
func expectProbe(t *testing.T, h http.Handler, path string, code int, lastUpdated, current time.Time) answer {
	t.Helper()
	a := probe(t, h, path)
	if a.code != code {
		t.Errorf("%s: status %d, want %d (body %v)", path, a.code, code, a.body)
	}
	for key, want := range map[string]time.Time{"lastUpdated": lastUpdated, "currentTime": current} {
		s, _ := a.body[key].(string)
		got, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !got.Equal(want) {
			t.Errorf("%s: %s = %q, want %v", path, key, s, want)
		}
	}
	return a
}

func TestHealthyWhileStartingUp(t *testing.T) {
	clk := fakeclock.New(t0)
	s := New(timeout, clk.Now)
	h := s.Handler()
	a := expectProbe(t, h, "/healthz", http.StatusOK, t0, t0)
	if a.body["nodeEligible"] != true {
		t.Errorf("/healthz nodeEligible = %v, want true", a.body["nodeEligible"])
	}
	expectProbe(t, h, "/livez", http.StatusOK, t0, t0)

	// Before the sync loop's first Updated, queued changes do not count (kube-proxy does the same).
	s.QueuedUpdate(t0)
	clk.Advance(2 * timeout)
	expectProbe(t, h, "/healthz", http.StatusOK, clk.Now(), clk.Now())
}

func TestQueuedUpdateWithoutSyncTurnsUnhealthy(t *testing.T) {
	clk := fakeclock.New(t0)
	s := New(timeout, clk.Now)
	h := s.Handler()
	s.Updated(t0)

	queued := t0.Add(time.Second)
	clk.Advance(time.Second)
	s.QueuedUpdate(queued)
	clk.Advance(timeout - time.Nanosecond)
	expectProbe(t, h, "/healthz", http.StatusOK, clk.Now(), clk.Now())
	s.QueuedUpdate(clk.Now()) // a newer change must not reset the age of the oldest one

	clk.Advance(time.Nanosecond)
	expectProbe(t, h, "/healthz", http.StatusServiceUnavailable, t0, clk.Now())
	expectProbe(t, h, "/livez", http.StatusServiceUnavailable, t0, clk.Now())
	if s.IsHealthy() {
		t.Error("IsHealthy with a change queued past the timeout")
	}

	synced := clk.Now()
	s.Updated(synced)
	clk.Advance(time.Hour)
	expectProbe(t, h, "/healthz", http.StatusOK, clk.Now(), clk.Now())
	if !s.IsHealthy() {
		t.Error("not healthy after a sync")
	}
}

func TestDrainingFailsOnlyHealthz(t *testing.T) {
	clk := fakeclock.New(t0)
	s := New(timeout, clk.Now)
	h := s.Handler()
	s.Updated(t0)
	clk.Advance(time.Second)

	s.SetDraining(true)
	a := expectProbe(t, h, "/healthz", http.StatusServiceUnavailable, t0, clk.Now())
	if a.body["nodeEligible"] != false {
		t.Errorf("draining /healthz nodeEligible = %v, want false", a.body["nodeEligible"])
	}
	a = expectProbe(t, h, "/livez", http.StatusOK, clk.Now(), clk.Now())
	if _, ok := a.body["nodeEligible"]; ok {
		t.Error("/livez reports nodeEligible; kube-proxy's does not")
	}
	if !s.IsHealthy() {
		t.Error("IsHealthy follows draining; it must report sync health only")
	}

	s.SetDraining(false)
	expectProbe(t, h, "/healthz", http.StatusOK, clk.Now(), clk.Now())
}

func TestUnknownPathIsNotFound(t *testing.T) {
	rec := httptest.NewRecorder()
	New(timeout, time.Now).Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("/metrics: status %d, want 404", rec.Code)
	}
}

func TestServeAnswersAndStopsOnCancel(t *testing.T) {
	addr := freeAddr(t)
	s := New(timeout, time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, addr, testGate(), slog.New(slog.DiscardHandler)) }()

	var resp *http.Response
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if resp, err = http.Get("http://" + addr + "/livez"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("GET /livez: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/livez: status %d", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func TestServeReportsListenFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = New(timeout, time.Now).Serve(context.Background(), ln.Addr().String(), testGate(), slog.New(slog.DiscardHandler))
	if err == nil {
		t.Fatal("Serve on a taken port returned nil")
	}
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestChecksAreReportedButNeverFailHealthz(t *testing.T) {
	clk := fakeclock.New(t0)
	s := New(timeout, clk.Now)
	linkOK := false
	s.AddCheck("cluster", func() (bool, any) { return linkOK, map[string]string{"lastError": "connection refused"} })
	h := s.Handler()
	s.Updated(t0)

	for _, path := range []string{"/healthz", "/livez"} {
		a := probe(t, h, path)
		if a.code != http.StatusOK {
			t.Errorf("%s with a failing check: status %d, want 200 (checks are informational)", path, a.code)
		}
		checks, _ := a.body["checks"].(map[string]any)
		c, _ := checks["cluster"].(map[string]any)
		if c["ok"] != false || c["detail"] == nil {
			t.Errorf("%s: checks = %v, want cluster not ok with its detail", path, a.body["checks"])
		}
	}
	a := probe(t, h, "/healthz/cluster")
	if a.code != http.StatusServiceUnavailable || a.body["ok"] != false {
		t.Errorf("/healthz/cluster with the link lost: %d %v, want 503 ok=false", a.code, a.body)
	}
	linkOK = true
	if a := probe(t, h, "/healthz/cluster"); a.code != http.StatusOK || a.body["ok"] != true {
		t.Errorf("/healthz/cluster with the link up: %d %v, want 200 ok=true", a.code, a.body)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz/nothing", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("/healthz/nothing: status %d, want 404", rec.Code)
	}
}

func testGate() *listener.Gate {
	return listener.NewGate("healthz", listener.Default, nil, slog.New(slog.DiscardHandler))
}
