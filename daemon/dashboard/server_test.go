package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/proxy"
	"github.com/edgegate/edgegate/daemon/view"
	"github.com/edgegate/edgegate/webui"
)

const testToken = "0123456789abcdef0123"

// PageBudget is the most the page and its assets may weigh: it must load quickly over a
// gateway's management link and on a phone.
const PageBudget = 300 << 10

type fakeDataplane struct {
	err   error
	views view.Source
}

func (f *fakeDataplane) OperatorViews() view.Source { return f.views }
func (*fakeDataplane) Mode() plan.Mode              { return plan.ModeNFTables }
func (*fakeDataplane) Cleanup() error               { return nil }
func (f *fakeDataplane) Program(_ *model.Snapshot, full bool) (proxy.Result, error) {
	return proxy.Result{Full: full, Written: 3, Elements: 7}, f.err
}

// fakeViews answers as a dataplane's views of its kernel do.
type fakeViews struct {
	rules   string
	err     error
	traffic func() map[string]view.ServiceTraffic // nil: the mode counts none
}

func (f fakeViews) Rules() (string, error) { return f.rules, f.err }
func (f fakeViews) Traffic(*model.Snapshot) (map[string]view.ServiceTraffic, error) {
	if f.traffic == nil {
		return nil, nil
	}
	return f.traffic(), nil
}

type fakeKernel struct{}

func (fakeKernel) Network() (view.Network, error) {
	return view.Network{Links: []view.Link{{Name: "eth0", Up: true, Addrs: []string{"10.200.1.1/24"}}}, Routes: []string{"default via 10.200.1.254 dev eth0"}}, nil
}

func (fakeKernel) Conntrack(f model.Family) ([]string, error) {
	if f == model.IPv6 {
		return nil, nil
	}
	return []string{
		"tcp\t6 117 TIME_WAIT src=10.200.1.2 dst=10.96.0.10 sport=40000 dport=80 src=10.0.1.1 dst=10.200.1.2 sport=8080 dport=40000",
		"udp\t17 29 src=10.200.1.2 dst=10.96.0.53 sport=40054 dport=53 src=10.0.1.1 dst=10.200.1.2 sport=53 dport=40054",
	}, nil
}

func webObjects(eps ...string) []any {
	var es []discovery.Endpoint
	for _, e := range eps {
		es = append(es, mt.EP(e))
	}
	return []any{
		mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080), mt.Type(v1.ServiceTypeNodePort)),
		mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, es...),
	}
}

func newTestDashboard(t *testing.T, mode plan.Mode) (*Dashboard, *httptest.Server) {
	t.Helper()
	d := New(Options{Version: "test", Mode: mode, Node: "gw", Families: []model.Family{model.IPv4, model.IPv6},
		Kernel: fakeKernel{}, Token: testToken})
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	return d, srv
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	return request(t, http.MethodGet, url, hdr)
}

func request(t *testing.T, method, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	return send(t, method, url, nil, hdr)
}

// send makes one request with body (nil for none) and headers hdr, and reads the answer.
func send(t *testing.T, method, url string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestTokenAndOrigin(t *testing.T) {
	_, srv := newTestDashboard(t, plan.ModeNFTables)
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	for _, tc := range []struct {
		name, path string
		hdr        map[string]string
		want       int
	}{
		{"no token", "/", nil, http.StatusUnauthorized},
		{"no token, api", "/api/state", nil, http.StatusUnauthorized},
		{"no token, asset", "/app.js", nil, http.StatusUnauthorized},
		{"wrong query token", "/?token=wrong-token-0000000", nil, http.StatusForbidden},
		{"wrong bearer", "/api/state", map[string]string{"Authorization": "Bearer x" + testToken}, http.StatusForbidden},
		{"wrong cookie", "/api/logs", map[string]string{"Cookie": CookieName + "=nope"}, http.StatusForbidden},
		{"query token", "/?token=" + testToken, nil, http.StatusOK},
		{"bearer", "/api/state", bearer, http.StatusOK},
		{"cookie", "/style.css", map[string]string{"Cookie": CookieName + "=" + testToken}, http.StatusOK},
		{"same origin", "/api/state", map[string]string{"Authorization": "Bearer " + testToken, "Origin": srv.URL}, http.StatusOK},
		{"foreign origin", "/api/state", map[string]string{"Authorization": "Bearer " + testToken, "Origin": "http://evil.example"}, http.StatusForbidden},
		{"null origin", "/api/state", map[string]string{"Authorization": "Bearer " + testToken, "Origin": "null"}, http.StatusForbidden},
	} {
		resp, body := get(t, srv.URL+tc.path, tc.hdr)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: GET %s: %d %q, want %d", tc.name, tc.path, resp.StatusCode, body, tc.want)
		}
	}
	resp, _ := get(t, srv.URL+"/?token="+testToken, nil)
	if c := resp.Cookies(); len(c) != 1 || c[0].Value != testToken || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode {
		t.Errorf("opening the page with ?token= sets cookies %v, want one HttpOnly SameSite=Strict token cookie", c)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/api/state", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+testToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v, want 405 (read-only)", resp.Status, err)
	}
}

func wsURL(srv *httptest.Server, query string) string {
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/api/ws" + query
}

func TestWebsocketTokenOriginAndUpdates(t *testing.T) {
	d, srv := newTestDashboard(t, plan.ModeNFTables)
	for _, tc := range []struct {
		name, query, origin string
		want                int
	}{
		{"no token", "", srv.URL, http.StatusUnauthorized},
		{"wrong token", "?token=wrong", srv.URL, http.StatusForbidden},
		{"foreign origin", "?token=" + testToken, "http://evil.example", http.StatusForbidden},
	} {
		_, resp, err := websocket.DefaultDialer.Dial(wsURL(srv, tc.query), http.Header{"Origin": {tc.origin}})
		if err == nil || resp == nil || resp.StatusCode != tc.want {
			t.Errorf("%s: dial err %v, response %v; want refused with %d", tc.name, err, resp, tc.want)
		}
	}

	dp := d.Record(&fakeDataplane{})
	if _, err := dp.Program(mt.Snapshot(webObjects("10.0.1.1", "10.0.1.2", "10.0.1.3")...), true); err != nil {
		t.Fatal(err)
	}
	conn, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "?token="+testToken), http.Header{"Origin": {srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The deadline only bounds a broken test; nothing here measures time.
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var m Message
	if err := conn.ReadJSON(&m); err != nil || m.Type != "snapshot" {
		t.Fatalf("first message: %+v, %v; want the snapshot", m, err)
	}
	var svcs []Service
	if err := json.Unmarshal(m.State[KeyServices], &svcs); err != nil || len(svcs) != 1 || len(svcs[0].Endpoints) != 3 {
		t.Fatalf("snapshot services %s (%v), want default/web with 3 endpoints", m.State[KeyServices], err)
	}

	if _, err := dp.Program(mt.Snapshot(webObjects("10.0.1.1", "10.0.1.3")...), false); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{KeyServices: true, KeySyncs: true}
	for len(want) > 0 {
		if err := conn.ReadJSON(&m); err != nil {
			t.Fatalf("waiting for %v: %v", want, err)
		}
		switch m.Key {
		case KeyServices:
			if err := json.Unmarshal(m.Value, &svcs); err != nil || len(svcs[0].Endpoints) != 2 || svcs[0].Endpoints[1].Addr != "10.0.1.3:8080" {
				t.Errorf("pushed services %s (%v), want 10.0.1.2 gone", m.Value, err)
			}
		case KeySyncs:
			var s Sync
			if err := json.Unmarshal(m.Value, &s); err != nil || s.Full || s.Chains != 3 || s.Error != "" {
				t.Errorf("pushed sync %s (%v), want a partial one with 3 chains", m.Value, err)
			}
		}
		delete(want, m.Key)
	}

	failing := d.Record(&fakeDataplane{err: errors.New("netlink: permission denied")})
	if _, err := failing.Program(mt.Snapshot(webObjects("10.0.1.1")...), true); err == nil {
		t.Fatal("the recorder swallowed the dataplane's error")
	}
	if err := conn.ReadJSON(&m); err != nil || m.Key != KeySyncs || !strings.Contains(string(m.Value), "permission denied") {
		t.Errorf("after a failed sync: %+v %v, want a sync with its error (and no service change)", m, err)
	}
}

func TestOperatorViews(t *testing.T) {
	d, srv := newTestDashboard(t, plan.ModeNFTables)
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	if resp, body := get(t, srv.URL+"/api/nft", auth); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/api/nft before a dataplane: %d %q, want 503", resp.StatusCode, body)
	}
	// The rules pages print what the dataplane reads back from its kernel, as it is.
	nftText := "# as the kernel holds it at ruleset generation 3\ntable ip edgegate {\n}\ntable ip6 edgegate {\n}\ntable inet foreign {\n}\n"
	snap := mt.Snapshot(webObjects("10.0.1.1", "10.0.1.2", "10.0.1.3")...)
	if _, err := d.Record(&fakeDataplane{views: fakeViews{rules: nftText}}).Program(snap, true); err != nil {
		t.Fatal(err)
	}
	if resp, body := get(t, srv.URL+"/api/nft", auth); resp.StatusCode != 200 || body != nftText {
		t.Errorf("/api/nft: %d, want the dataplane's view of the kernel; got\n%s", resp.StatusCode, body)
	}
	if resp, body := get(t, srv.URL+"/api/iptables", auth); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "nftables mode") {
		t.Errorf("/api/iptables in nftables mode: %d %q, want 404 naming the mode", resp.StatusCode, body)
	}
	d2, srv2 := newTestDashboard(t, plan.ModeIPTables)
	if _, err := d2.Record(&fakeDataplane{views: fakeViews{rules: "# IPv4\n*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"}}).Program(snap, true); err != nil {
		t.Fatal(err)
	}
	if resp, body := get(t, srv2.URL+"/api/iptables", auth); resp.StatusCode != 200 || !strings.Contains(body, "*nat\n") || !strings.Contains(body, "COMMIT") {
		t.Errorf("/api/iptables: %d, want iptables-save form; got\n%s", resp.StatusCode, body)
	}

	if resp, body := get(t, srv.URL+"/api/ipvs", auth); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/api/ipvs in nftables mode: %d %q, want 404", resp.StatusCode, body)
	}
	d3, srv3 := newTestDashboard(t, plan.ModeIPVS)
	d3.Record(&fakeDataplane{views: fakeViews{rules: "Prot LocalAddress:Port Scheduler Flags\nTCP  10.96.0.10:80 rr\n  -> 10.0.1.1:8080 Masq 1 0 0\n"}})
	if resp, body := get(t, srv3.URL+"/api/ipvs", auth); resp.StatusCode != 200 || !strings.Contains(body, "TCP  10.96.0.10:80 rr") {
		t.Errorf("/api/ipvs in ipvs mode: %d %q, want the kernel's table", resp.StatusCode, body)
	}
	d3.Record(&fakeDataplane{views: fakeViews{err: errors.New("ip_vs not loaded")}})
	if resp, body := get(t, srv3.URL+"/api/ipvs", auth); resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "ip_vs not loaded") {
		t.Errorf("/api/ipvs unreadable: %d %q, want 500 with the error", resp.StatusCode, body)
	}

	_, body := get(t, srv.URL+"/api/conntrack?q=dport=80&q=tcp", auth)
	if strings.Count(body, "\n") != 1 || !strings.Contains(body, "dst=10.96.0.10") {
		t.Errorf("/api/conntrack filtered: %q, want the one TCP entry", body)
	}
	if resp, _ := get(t, srv.URL+"/api/conntrack?family=5", auth); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("/api/conntrack?family=5: %d, want 400", resp.StatusCode)
	}
	if _, body := get(t, srv.URL+"/api/network?format=text", auth); !strings.Contains(body, "eth0 UP 10.200.1.1/24") || !strings.Contains(body, "default via") {
		t.Errorf("/api/network text: %q", body)
	}

	log := slog.New(d.LogHandler(slog.NewTextHandler(io.Discard, nil))).With("component", "proxy")
	log.Info("rules programmed", "mode", "nftables", "took", "1ms")
	log.WithGroup("g").Warn("second", "k", "two words")
	_, body = get(t, srv.URL+"/api/logs?n=1", auth)
	if !strings.HasSuffix(body, `WARN second component=proxy g.k="two words"`+"\n") || strings.Count(body, "\n") != 1 {
		t.Errorf("/api/logs?n=1: %q, want the newest line with its attributes", body)
	}
	_, body = get(t, srv.URL+"/api/state", auth)
	var st map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &st); err != nil || st[KeyFirmware] == nil || st[KeyLogs] == nil || st[KeySyncs] == nil {
		t.Errorf("/api/state: %v, keys %v", err, st)
	}
}

// TestPageWeight loads the page and everything it references, as a browser would, and
// checks the total against the budget.
func TestPageWeight(t *testing.T) {
	_, srv := newTestDashboard(t, plan.ModeNFTables)
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	resp, page := get(t, srv.URL+"/", auth)
	if resp.StatusCode != 200 || !strings.Contains(page, "<title>edgegate</title>") {
		t.Fatalf("GET /: %d", resp.StatusCode)
	}
	total := len(page)
	refs := regexp.MustCompile(`(?:src|href)="([^"]+\.(?:js|css))"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 2 {
		t.Fatalf("page references %v, want its script and stylesheet", refs)
	}
	for _, r := range refs {
		resp, body := get(t, srv.URL+"/"+r[1], auth)
		if resp.StatusCode != 200 || len(body) == 0 {
			t.Fatalf("GET %s: %d", r[1], resp.StatusCode)
		}
		total += len(body)
	}
	embedded := 0
	_ = fs.WalkDir(webui.Files, ".", func(_ string, e fs.DirEntry, _ error) error {
		if info, err := e.Info(); err == nil && !e.IsDir() {
			embedded += int(info.Size())
		}
		return nil
	})
	t.Logf("page weight: %d bytes loaded (%d references), %d bytes embedded; budget %d", total, len(refs), embedded, PageBudget)
	if total > PageBudget || embedded > PageBudget {
		t.Errorf("page weight %d bytes (embedded %d), over the budget of %d", total, embedded, PageBudget)
	}
}

func TestWebsocketEndsWithContext(t *testing.T) {
	d := New(Options{Token: testToken, Mode: plan.ModeNFTables})
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewUnstartedServer(d.Handler())
	srv.Config.BaseContext = d.baseContext(ctx)
	srv.Start()
	defer srv.Close()
	conn, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "?token="+testToken), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var m Message
	if err := conn.ReadJSON(&m); err != nil {
		t.Fatal(err)
	}
	cancel()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, _, err = conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Errorf("after the daemon stops: %v, want a going-away close", err)
	}
	// The server unsubscribes after writing the close frame; wait for it, bounded.
	for i := 0; ; i++ {
		n, _ := d.hub.Stats()
		if n == 0 {
			break
		}
		if i == 1000 {
			t.Fatalf("%d clients still subscribed after the connection ended", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeadClientDropped: a client that stops reading answers no pings; the server drops it
// at the pong deadline while another client still gets every change.
func TestDeadClientDropped(t *testing.T) {
	d := New(Options{Token: testToken, Mode: plan.ModeNFTables, PongWait: 300 * time.Millisecond})
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	dial := func() *websocket.Conn {
		conn, _, err := websocket.DefaultDialer.Dial(wsURL(srv, "?token="+testToken), nil)
		if err != nil {
			t.Fatal(err)
		}
		var m Message
		if err := conn.ReadJSON(&m); err != nil || m.Type != "snapshot" {
			t.Fatalf("first message %+v %v", m, err)
		}
		return conn
	}
	dead := dial() // never read again: gorilla answers pings only while reading
	defer dead.Close()
	live := dial()
	defer live.Close()
	// live reads (and so answers pings) in the background.
	got := make(chan Message, 64)
	go func() {
		for {
			var m Message
			if err := live.ReadJSON(&m); err != nil {
				close(got)
				return
			}
			got <- m
		}
	}()
	for i := 0; ; i++ {
		if n, _ := d.hub.Stats(); n == 1 {
			break
		}
		if i == 1000 {
			t.Fatal("the silent client was never dropped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = d.hub.Set(KeyNetwork, view.Network{Routes: []string{"default via 192.0.2.1"}})
	if m, ok := <-got; !ok || m.Key != KeyNetwork {
		t.Errorf("the live client after the drop: %+v (open %v), want the change", m, ok)
	}
}

type drainingDataplane struct {
	fakeDataplane
	pending bool
}

func (d *drainingDataplane) Pending() bool { return d.pending }

// TestRecorderKeepsDraining: the proxier asks its dataplane whether IPVS real servers are
// still draining; the recorder in between must not hide the answer.
func TestRecorderKeepsDraining(t *testing.T) {
	d := New(Options{Token: testToken})
	for _, tc := range []struct {
		dp   proxy.Dataplane
		want bool
	}{{&drainingDataplane{pending: true}, true}, {&drainingDataplane{}, false}, {&fakeDataplane{}, false}} {
		dr, ok := d.Record(tc.dp).(proxy.Draining)
		if !ok || dr.Pending() != tc.want {
			t.Errorf("%T: recorded dataplane Draining %v, Pending %v; want %v", tc.dp, ok, ok && dr.Pending(), tc.want)
		}
	}
}

// TestDrainAction: the drain action is a POST with the token in a header, or in the cookie
// from this dashboard's page (its Origin); never from a link, a foreign page or without the
// token. It is logged, and its state reaches the hub.
func TestDrainAction(t *testing.T) {
	var logs strings.Builder
	d := New(Options{Mode: plan.ModeNFTables, Token: testToken, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	post := func(path string, hdr map[string]string) (int, string) {
		t.Helper()
		resp, body := request(t, http.MethodPost, srv.URL+path, hdr)
		return resp.StatusCode, body
	}
	bearer := map[string]string{"Authorization": "Bearer " + testToken}
	if code, body := post("/api/drain?on=1", bearer); code != http.StatusNotFound {
		t.Errorf("without a drain action: %d %q, want 404", code, body)
	}
	var calls []bool
	draining := false
	d.OnDrain(func(on bool) bool {
		calls = append(calls, on)
		draining = on
		d.ShowDrain(on, []string{"operator"})
		return draining
	})
	cookie := CookieName + "=" + testToken
	for _, tc := range []struct {
		name, path string
		hdr        map[string]string
		want       int
	}{
		{"no token", "/api/drain?on=1", nil, http.StatusUnauthorized},
		{"token in the query", "/api/drain?on=1&token=" + testToken, nil, http.StatusForbidden},
		{"cookie without origin", "/api/drain?on=1", map[string]string{"Cookie": cookie}, http.StatusForbidden},
		{"cookie from a foreign page", "/api/drain?on=1", map[string]string{"Cookie": cookie, "Origin": "http://evil.example"}, http.StatusForbidden},
		{"bad value", "/api/drain?on=maybe", bearer, http.StatusBadRequest},
		{"not an action", "/api/state", bearer, http.StatusMethodNotAllowed},
		{"bearer drains", "/api/drain?on=1", bearer, http.StatusOK},
		{"the page serves again", "/api/drain?on=0", map[string]string{"Cookie": cookie, "Origin": srv.URL}, http.StatusOK},
	} {
		if code, body := post(tc.path, tc.hdr); code != tc.want {
			t.Errorf("%s: POST %s: %d %q, want %d", tc.name, tc.path, code, body, tc.want)
		}
	}
	if len(calls) != 2 || !calls[0] || calls[1] {
		t.Errorf("drain calls %v, want [true false]", calls)
	}
	if n := strings.Count(logs.String(), "operator action"); n != 2 {
		t.Errorf("%d operator actions logged, want 2:\n%s", n, logs.String())
	}
	var state struct{ Drain DrainState }
	if err := json.Unmarshal(d.Hub().Snapshot(), &state); err != nil || !state.Drain.Action || state.Drain.Draining {
		t.Errorf("hub drain state %+v (%v), want the action offered and not draining", state.Drain, err)
	}
}

// TestTrafficAPI: /api/traffic reads the counters from the dataplane at each request, not
// from the page's samples.
func TestTrafficAPI(t *testing.T) {
	d, srv := newTestDashboard(t, plan.ModeNFTables)
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	if resp, body := get(t, srv.URL+"/api/traffic", auth); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/api/traffic before a sync: %d %q, want 503", resp.StatusCode, body)
	}
	var reads atomic.Int64
	views := fakeViews{traffic: func() map[string]view.ServiceTraffic {
		n := uint64(reads.Add(1))
		return map[string]view.ServiceTraffic{"default/web:http": {BackendTraffic: view.BackendTraffic{Connections: n}}}
	}}
	if _, err := d.Record(&fakeDataplane{views: views}).Program(mt.Snapshot(webObjects("10.0.1.1")...), true); err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 2; want++ {
		resp, body := get(t, srv.URL+"/api/traffic", auth)
		var tr map[string]view.ServiceTraffic
		if err := json.Unmarshal([]byte(body), &tr); resp.StatusCode != 200 || err != nil || tr["default/web:http"].Connections != uint64(want) {
			t.Errorf("/api/traffic read %d: %d %s", want, resp.StatusCode, body)
		}
	}
}
