package dashboard

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/edgegate/edgegate/daemon/internal/fault"
	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/view"
	"github.com/edgegate/edgegate/webui"
)

// CookieName carries the token after the page was opened with ?token=, so that the page's
// own files, views and websocket need no token in their URLs.
const CookieName = "edgegate_token"

// writeWait bounds one websocket write: a client that does not take a frame in that time
// is gone. Options.PongWait bounds the silence of one that stopped answering pings.
const writeWait = 5 * time.Second

// Handler returns the dashboard's HTTP handler: every path needs the token and, when the
// request names an Origin, the dashboard's own.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/ws", d.serveWS)
	mux.HandleFunc("GET /api/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(d.hub.Snapshot())
	})
	mux.HandleFunc("GET /api/nft", d.serveRules(plan.ModeNFTables))
	mux.HandleFunc("GET /api/iptables", d.serveRules(plan.ModeIPTables))
	mux.HandleFunc("GET /api/ipvs", d.serveRules(plan.ModeIPVS))
	mux.HandleFunc("GET /api/conntrack", d.serveConntrack)
	mux.HandleFunc("GET /api/network", d.serveNetwork)
	mux.HandleFunc("GET /api/traffic", d.serveTraffic)
	mux.HandleFunc("GET /api/logs", d.serveLogs)
	mux.HandleFunc("POST /api/drain", d.serveDrain)
	mux.HandleFunc("GET /api/update", d.serveUpdateStatus)
	mux.HandleFunc("POST /api/update", d.serveUpdate)
	mux.HandleFunc("POST /api/update/activate", d.serveActivate)
	mux.HandleFunc("POST /api/update/cancel", d.serveCancel)
	mux.Handle("GET /", http.FileServerFS(webui.Files))
	return d.guard(limitBodies(mux))
}

// maxRequestBody bounds the body of every request but a firmware upload, which bounds its
// own (Options.Upload): the other actions take a form field or nothing.
const maxRequestBody = 64 << 10

func limitBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/update" {
			r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
		}
		next.ServeHTTP(w, r)
	})
}

// guard checks method, Origin and token, and sets the headers every answer carries.
func (d *Dashboard) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.Set("Cache-Control", "no-store")
		action := r.Method == http.MethodPost && actions[r.URL.Path]
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !action {
			http.Error(w, "the dashboard is read-only but for its actions", http.StatusMethodNotAllowed)
			return
		}
		if !sameOrigin(r) {
			http.Error(w, "origin "+r.Header.Get("Origin")+" is not this dashboard's", http.StatusForbidden)
			return
		}
		got, from := requestToken(r)
		switch {
		case got == "":
			http.Error(w, "token required: open the dashboard as /?token=<token> (the console shows it)", http.StatusUnauthorized)
			return
		case subtle.ConstantTimeCompare([]byte(got), []byte(d.opts.Token)) != 1:
			http.Error(w, "wrong token", http.StatusForbidden)
			return
		}
		if action && (from == "query" || r.Header.Get("Origin") == "" && from != "header") {
			// An action is never a link to follow: it carries the token in a header, or
			// in the cookie from a page of this dashboard (which sends its Origin).
			http.Error(w, "an action needs the token in an Authorization header, or this dashboard's page", http.StatusForbidden)
			return
		}
		if from == "query" {
			// Secure on TLS, which is every address but loopback: the browser never
			// sends the token in clear.
			http.SetCookie(w, &http.Cookie{Name: CookieName, Value: got, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
				SameSite: http.SameSiteStrictMode})
		}
		next.ServeHTTP(w, r)
	})
}

// actions are the paths that change something: POST only, token required, logged.
var actions = map[string]bool{"/api/drain": true, "/api/update": true, "/api/update/activate": true, "/api/update/cancel": true}

// serveDrain is the operator's drain action: on=1 drains the gateway (its /healthz fails,
// so external load balancers steer away, and its Node turns not ready; the rules stay and
// connections in flight finish), on=0 ends the operator's drain.
func (d *Dashboard) serveDrain(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	fn := d.drain
	d.mu.Unlock()
	if fn == nil {
		http.Error(w, "this gateway offers no drain action", http.StatusNotFound)
		return
	}
	var on bool
	switch v := r.FormValue("on"); v {
	case "1", "true":
		on = true
	case "0", "false":
	default:
		http.Error(w, fmt.Sprintf("on=%q: want 1 (drain) or 0 (serve again)", v), http.StatusBadRequest)
		return
	}
	d.opts.Log.Warn("operator action", "action", "drain", "on", on, "from", r.RemoteAddr, "userAgent", r.UserAgent())
	draining := fn(on)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"draining\":%t}\n", draining)
}

// requestToken finds the token in the Authorization header, the query or the cookie.
func requestToken(r *http.Request) (token, from string) {
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && t != "" {
		return t, "header"
	}
	if t := r.URL.Query().Get("token"); t != "" {
		return t, "query"
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
		return c.Value, "cookie"
	}
	return "", ""
}

// sameOrigin accepts requests without Origin (curl, top-level navigation) and those whose
// Origin is the host they were sent to: a page elsewhere must not read the gateway's state
// through the operator's browser.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}

var upgrader = websocket.Upgrader{
	ReadBufferSize: 1024, WriteBufferSize: 16 << 10, HandshakeTimeout: 5 * time.Second,
	// guard has checked the Origin already; checking again keeps the upgrader safe alone.
	CheckOrigin: sameOrigin,
}

func (d *Dashboard) serveWS(w http.ResponseWriter, r *http.Request) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	c := d.hub.Subscribe()
	defer d.hub.Unsubscribe(c)
	defer conn.Close()
	// The reader only answers pings and notices a closed or silent client; the dashboard
	// takes no input.
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		conn.SetReadLimit(512)
		_ = conn.SetReadDeadline(time.Now().Add(d.opts.PongWait))
		conn.SetPongHandler(func(string) error {
			fault.Point(fault.DashboardWebsocket)
			return conn.SetReadDeadline(time.Now().Add(d.opts.PongWait))
		})
		for {
			fault.Point(fault.DashboardWebsocket)
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	ping := time.NewTicker(d.opts.PongWait * 2 / 3)
	defer ping.Stop()
	for {
		select {
		case m, ok := <-c.C:
			_ = conn.SetWriteDeadline(time.Now().Add(writeWait))
			if !ok {
				// Dropped for falling behind: the client reconnects to a fresh snapshot.
				_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseTryAgainLater, "too slow"))
				return
			}
			if err := conn.WriteMessage(websocket.TextMessage, m); err != nil {
				return
			}
		case <-ping.C:
			_ = conn.SetWriteDeadline(time.Now().Add(writeWait))
			if err := conn.WriteMessage(websocket.PingMessage, nil); err != nil {
				return
			}
		case <-gone:
			return
		case <-r.Context().Done():
			_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "stopping"))
			return
		}
	}
}

// serveRules writes the mode's rules as the kernel holds them, printed as the mode's stock
// tool prints them (the dataplane reads them back), or 404 when the gateway runs another
// mode.
func (d *Dashboard) serveRules(mode plan.Mode) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if d.opts.Mode != mode {
			http.Error(w, fmt.Sprintf("the gateway runs in %s mode, not %s", d.opts.Mode, mode), http.StatusNotFound)
			return
		}
		src := d.source()
		if src == nil {
			http.Error(w, "no dataplane yet", http.StatusServiceUnavailable)
			return
		}
		text, err := src.Rules()
		if err != nil {
			http.Error(w, string(mode)+" rules: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, text)
	}
}

// serveConntrack lists conntrack entries; ?family=4|6 picks a family, every q= word must
// appear in a line (q=dport=80 q=tcp).
func (d *Dashboard) serveConntrack(w http.ResponseWriter, r *http.Request) {
	if d.opts.Kernel == nil {
		http.Error(w, "no kernel view", http.StatusNotImplemented)
		return
	}
	families := d.opts.Families
	if f := r.URL.Query().Get("family"); f != "" {
		n, err := strconv.Atoi(f)
		if err != nil || (n != 4 && n != 6) {
			http.Error(w, "family: want 4 or 6, not "+f, http.StatusBadRequest)
			return
		}
		families = []model.Family{model.Family(n)}
	}
	words := r.URL.Query()["q"]
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for _, f := range families {
		lines, err := d.opts.Kernel.Conntrack(f)
		if err != nil {
			fmt.Fprintf(w, "# %s: %v\n", f, err)
			continue
		}
		for _, l := range lines {
			if !slices.ContainsFunc(words, func(q string) bool { return !strings.Contains(l, q) }) {
				fmt.Fprintln(w, l)
			}
		}
	}
}

// serveTraffic answers GET /api/traffic: the per-service and per-endpoint counters as the
// mode's dataplane reads them from the kernel now (the page gets them sampled, every
// Interval or less often when reading is slow), in the form of the state's "traffic".
func (d *Dashboard) serveTraffic(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	snap := d.snap
	d.mu.Unlock()
	src := d.source()
	if src == nil || snap == nil {
		http.Error(w, "nothing programmed yet", http.StatusServiceUnavailable)
		return
	}
	tr, err := src.Traffic(snap)
	if err != nil {
		http.Error(w, "traffic counters: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if tr == nil {
		tr = map[string]view.ServiceTraffic{} // the mode counts none
	}
	writeJSON(w, http.StatusOK, tr)
}

func (d *Dashboard) serveNetwork(w http.ResponseWriter, r *http.Request) {
	if d.opts.Kernel == nil {
		http.Error(w, "no kernel view", http.StatusNotImplemented)
		return
	}
	n, err := d.opts.Kernel.Network()
	if err != nil {
		http.Error(w, "addresses and routes: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if r.URL.Query().Get("format") == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, l := range n.Links {
			state := "DOWN"
			if l.Up {
				state = "UP"
			}
			fmt.Fprintf(w, "%s %s %s\n", l.Name, state, strings.Join(l.Addrs, " "))
		}
		fmt.Fprintln(w)
		for _, rt := range n.Routes {
			fmt.Fprintln(w, rt)
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(n)
}

// serveLogs writes the newest ?n= (default all) log lines as text.
func (d *Dashboard) serveLogs(w http.ResponseWriter, r *http.Request) {
	n := 0
	if s := r.URL.Query().Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			http.Error(w, "n: want a count, not "+s, http.StatusBadRequest)
			return
		}
		n = v
	}
	var entries []LogEntry
	for _, raw := range d.hub.List(KeyLogs) {
		var e LogEntry
		if json.Unmarshal(raw, &e) == nil {
			entries = append(entries, e)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, logLines(entries, n))
}

// baseContext makes request contexts derive from ctx, so open websockets end with the
// daemon (Shutdown does not wait for hijacked connections).
func (d *Dashboard) baseContext(ctx context.Context) func(net.Listener) context.Context {
	return func(net.Listener) context.Context { return ctx }
}

// ServeListener serves on a plain listener the caller opened until ctx ends. Connections
// pass Options.Gate first. Listen opens the dashboard's own listeners, with the gate
// between the allow-list and TLS, so that connections are counted before their handshake,
// which the server bounds by its ReadHeaderTimeout.
func (d *Dashboard) ServeListener(ctx context.Context, ln net.Listener) error {
	return d.serve(ctx, d.opts.Gate.Listen(ln))
}

// serve serves on a listener that passes Options.Gate already (see Listen).
func (d *Dashboard) serve(ctx context.Context, ln net.Listener) error {
	srv := d.opts.Gate.Server(d.Handler())
	srv.BaseContext = d.baseContext(ctx)
	if err := listener.Serve(ctx, srv, ln); err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	return nil
}
