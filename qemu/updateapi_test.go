package qemu

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/firmware/layout"
)

// The update tests' client of a gateway's dashboard API (/api/update): where it answers, its
// status, uploads and actions.

// waitDashboard waits for the dashboard to answer (a trial boot commits after its first
// sync, so after a commit marker the boot's EDGEGATE-READY is behind the console cursor).
func (u *updateTest) waitDashboard(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := u.request(http.MethodGet, "/api/update", nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dashboard does not answer: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (u *updateTest) request(method, path string, body io.Reader) (*http.Response, error) {
	at := u.dashboard
	if at == nil {
		at = &dashboardAt{base: fmt.Sprintf("https://127.0.0.1:%d", u.port), client: dashboardClient}
	}
	req, err := http.NewRequestWithContext(u.ctx, method, at.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+dashboardToken)
	return at.client.Do(req)
}

// dashboardAt is where a gateway's dashboard answers: its base URL and the client that
// reaches it.
type dashboardAt struct {
	base   string
	client *http.Client
}

// dashboardClient speaks TLS to the gateway's own certificate, generated at its first
// boot; pinning its key is the browser tier's test (lab/labtest/dashboard_test.go), not this one.
var dashboardClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

func (u *updateTest) status(t *testing.T) update.Status {
	t.Helper()
	st, err := u.statusErr()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// answer is the dashboard's answer to an update action.
type answer struct {
	Attempt *update.Attempt `json:"attempt"`
	Error   string          `json:"error"`
}

// post sends an update action; body nil for activate.
func (u *updateTest) post(t *testing.T, path string, body io.Reader) (int, answer) {
	t.Helper()
	resp, err := u.request(http.MethodPost, path, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("POST %s: %d, answer: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, a
}

func (u *updateTest) upload(t *testing.T, file, query string) (int, answer) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return u.post(t, "/api/update"+query, f)
}

// slot returns the status of one slot.
func slot(st update.Status, s layout.Slot) update.SlotStatus {
	for _, ss := range st.Slots {
		if ss.Slot == s {
			return ss
		}
	}
	return update.SlotStatus{}
}
