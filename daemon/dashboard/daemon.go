package dashboard

import (
	"context"
	"crypto/tls"
	"github.com/edgegate/edgegate/daemon/plan"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"github.com/edgegate/edgegate/daemon/model"
)

// Plane is where and how the management plane is served: its addresses, its TLS (every
// address but loopback) and the sources it answers.
type Plane struct {
	Binds   []Bind
	TLS     *tls.Config
	Allowed []netip.Prefix
}

// ForDaemon is the daemon's wiring: it loads the token (generating one in stateDir at first
// start) and returns the dashboard with a logger that also feeds its log tail. A generated
// token is written to console only, the daemon's own handler, never to the tail that
// /api/logs and the websocket serve. Without a token it returns a nil dashboard and the
// daemon's logger: the proxy runs on without its dashboard.
func ForDaemon(o Options, binds []Bind, tokenFile, stateDir string, log *slog.Logger) (*Dashboard, *slog.Logger) {
	token, path, generated, err := LoadToken(tokenFile, stateDir)
	if err != nil {
		log.Error("dashboard disabled: no access token", "err", err)
		return nil, log
	}
	o.Token = token
	d := New(o)
	console := log.With("component", "dashboard")
	log = slog.New(d.LogHandler(log.Handler()))
	d.opts.Log = log.With("component", "dashboard")
	if generated {
		url := ""
		if len(binds) > 0 {
			url = displayURL(binds[0]) + "?token=" + token
		}
		console.Info("dashboard token generated; open the dashboard with it (shown on the console only)", "url", url, "file", path)
		d.opts.Log.Info("dashboard token generated; the console shows it", "file", path)
	} else {
		d.opts.Log.Info("dashboard token loaded", "file", path)
	}
	return d, log
}

// displayURL names a bind the way a browser reaches it.
func displayURL(b Bind) string {
	scheme := "https://"
	if b.Loopback() {
		scheme = "http://"
	}
	host, port, err := net.SplitHostPort(b.Addr)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		return scheme + b.Addr + "/"
	}
	return scheme + net.JoinHostPort("<management address>", port) + "/"
}

// Start serves the dashboard on the plane's addresses and runs its samplers until ctx
// ends; Rebind moves it meanwhile. An address that cannot be served is logged and leaves
// the daemon running: rules matter more than the view.
func (d *Dashboard) Start(ctx context.Context, p Plane) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { d.Run(ctx) })
	open := map[string]func(){} // address -> stop, which returns once the address is closed
	serve := func(p Plane) {
		want := map[string]Bind{}
		for _, b := range p.Binds {
			want[b.Addr] = b
		}
		for addr, stop := range open {
			if _, ok := want[addr]; !ok {
				stop()
				delete(open, addr)
				d.opts.Log.Info("dashboard no longer listening", "addr", addr)
			}
		}
		for addr, b := range want {
			if _, ok := open[addr]; ok {
				continue
			}
			bctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			open[addr] = func() { cancel(); <-done }
			wg.Go(func() {
				defer close(done)
				defer cancel()
				ln, err := Listen(b, p.TLS, p.Allowed, d.opts.Gate, d.opts.Log)
				if err == nil {
					d.opts.Log.Info("dashboard listening", "url", displayURL(b))
					err = d.serve(bctx, ln)
				}
				if err != nil {
					d.opts.Log.Error("dashboard not served; the proxy carries on", "addr", b.Addr, "err", err)
				}
			})
		}
	}
	serve(p)
	for {
		select {
		case <-ctx.Done():
			d.opts.Log.Debug("dashboard stopped")
			return
		case <-d.rebind:
			d.mu.Lock()
			p := *d.next
			d.mu.Unlock()
			serve(p)
		}
	}
}

// Rebind moves a started dashboard to p's addresses: those it lacks are opened, those it
// no longer names are closed with their connections, the others stay as they are (p's TLS
// and allow-list apply to the addresses it opens). Only the last of quick calls counts.
func (d *Dashboard) Rebind(p Plane) {
	d.mu.Lock()
	d.next = &p
	d.mu.Unlock()
	select {
	case d.rebind <- struct{}{}:
	default: // a wake-up is pending; it reads the plane just set
	}
}

// TrafficFor returns the traffic source of a proxy mode: the nftables mode's rule counters,
// the IPVS table's stats (ipvsStats), nil for iptables mode, which has none yet.
func TrafficFor(mode plan.Mode, families []model.Family, counters NFTCounters, ipvsStats TrafficSource) TrafficSource {
	switch {
	case mode == plan.ModeNFTables && counters != nil:
		return &NFTTraffic{Counters: counters, Families: families}
	case mode == plan.ModeIPVS:
		return ipvsStats
	}
	return nil
}
