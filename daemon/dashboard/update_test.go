package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/firmware/bundle"
)

// fakeUpdater answers like update.Manager: "bad" bundles are refused, others staged.
type fakeUpdater struct {
	got      []update.Request
	bodies   []string
	onChange func()
}

func (f *fakeUpdater) Status() update.Status {
	return update.Status{Available: true, Board: "qemu-x86_64", Version: "v1.0.0", Slot: "a", History: []update.Attempt{}}
}

func (f *fakeUpdater) Install(_ context.Context, r io.Reader, req update.Request) (update.Attempt, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return update.Attempt{}, fmt.Errorf("%w: %w", update.ErrRefused, err)
	}
	f.got, f.bodies = append(f.got, req), append(f.bodies, string(b))
	a := update.Attempt{ID: "1", Source: req.Source, Phase: update.PhaseStaged}
	if string(b) == "bad" {
		a.Phase = update.PhaseRefused
		return a, fmt.Errorf("%w: bundle is for board qemu-arm64, this gateway is qemu-x86_64: %w", update.ErrRefused, bundle.ErrWrongBoard)
	}
	f.onChange()
	return a, nil
}

func (f *fakeUpdater) Activate() (update.Attempt, error) {
	return update.Attempt{}, update.ErrNothingStaged
}

func (f *fakeUpdater) Cancel(string) (update.Attempt, error) {
	return update.Attempt{ID: "1", Phase: update.PhaseCancelled}, nil
}

func (f *fakeUpdater) OnChange(fn func()) { f.onChange = fn }

func TestUpdateActions(t *testing.T) {
	var logs strings.Builder
	d := New(Options{Mode: plan.ModeNFTables, Token: testToken, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	post := func(path, body string, hdr map[string]string) (int, string) {
		t.Helper()
		resp, b := send(t, http.MethodPost, srv.URL+path, strings.NewReader(body), hdr)
		return resp.StatusCode, b
	}
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	if code, body := post("/api/update", "x", bearer); code != http.StatusNotFound || !strings.Contains(body, "only offered by the firmware") {
		t.Errorf("a plain daemon: %d %q", code, body)
	}
	u := &fakeUpdater{}
	d.ServeUpdates(u)
	for _, tc := range []struct {
		name, path, body string
		hdr              map[string]string
		want             int
		wantBody         string
	}{
		{"no token", "/api/update", "b", nil, http.StatusUnauthorized, "token required"},
		{"token in the query", "/api/update?token=" + testToken, "b", nil, http.StatusForbidden, "Authorization header"},
		{"refused", "/api/update", "bad", bearer, http.StatusUnprocessableEntity, "wrong board"},
		{"staged", "/api/update?activate=0&force=1", "good", bearer, http.StatusOK, `"phase": "staged"`},
		{"nothing to activate", "/api/update/activate", "", bearer, http.StatusConflict, "no staged update"},
		{"cancel", "/api/update/cancel", "", bearer, http.StatusOK, `"phase": "cancelled"`},
	} {
		if code, body := post(tc.path, tc.body, tc.hdr); code != tc.want || !strings.Contains(body, tc.wantBody) {
			t.Errorf("%s: POST %s: %d %q, want %d with %q", tc.name, tc.path, code, body, tc.want, tc.wantBody)
		}
	}
	if len(u.got) != 2 || u.got[0].Activate != true || u.got[1].Activate || !u.got[1].Force || !strings.HasPrefix(u.got[1].Source, "upload from 127.0.0.1:") {
		t.Errorf("requests: %+v", u.got)
	}
	if u.bodies[1] != "good" {
		t.Errorf("bodies: %q", u.bodies)
	}
	if !strings.Contains(logs.String(), "action=update") {
		t.Errorf("the action is not logged:\n%s", logs.String())
	}
	resp, body := get(t, srv.URL+"/api/update", bearer)
	var st update.Status
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Slot != "a" {
		t.Errorf("GET /api/update: %d %q", resp.StatusCode, body)
	}
	if !strings.Contains(string(d.hub.Snapshot()), `"update":{"available":true`) {
		t.Errorf("the hub lacks the update status: %s", d.hub.Snapshot())
	}
}

// TestDaemonRuns: on the firmware the page gets PID 1's count of the daemon's restarts.
func TestDaemonRuns(t *testing.T) {
	d, _ := newTestDashboard(t, plan.ModeNFTables)
	d.SetDaemonRuns(DaemonRuns{Run: 3, Restarts: map[string]int{"panic": 1, "hang": 1}, LastExit: "killed for hanging"})
	if want := `"daemon":{"run":3,"restarts":{"hang":1,"panic":1},"lastExit":"killed for hanging"}`; !strings.Contains(string(d.hub.Snapshot()), want) {
		t.Errorf("the hub lacks %s: %s", want, d.hub.Snapshot())
	}
}
