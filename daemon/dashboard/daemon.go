package dashboard

import (
	"context"
	"log/slog"
	"net"
	"sync"

	"github.com/edgegate/edgegate/daemon/model"
)

// ForDaemon is the daemon's wiring: it loads the token (generating one in stateDir at first
// start, shown once in the log and so on the firmware console) and returns the dashboard
// with a logger that also feeds its log tail. Without a token it returns a nil dashboard and
// the daemon's logger: the proxy runs on without its dashboard.
func ForDaemon(o Options, addr, tokenFile, stateDir string, log *slog.Logger) (*Dashboard, *slog.Logger) {
	token, path, generated, err := LoadToken(tokenFile, stateDir)
	if err != nil {
		log.Error("dashboard disabled: no access token", "err", err)
		return nil, log
	}
	o.Token = token
	d := New(o)
	log = slog.New(d.LogHandler(log.Handler()))
	d.opts.Log = log.With("component", "dashboard")
	if generated {
		d.opts.Log.Info("dashboard token generated; open the dashboard with it", "url", "http://"+displayAddr(addr)+"/?token="+token, "file", path)
	} else {
		d.opts.Log.Info("dashboard token loaded", "file", path)
	}
	return d, log
}

// displayAddr names a listen address the way a browser reaches it.
func displayAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		return addr
	}
	return net.JoinHostPort("<management address>", port)
}

// Start serves the dashboard on addr and runs its samplers until ctx ends. A dashboard that
// cannot listen logs why and leaves the daemon running: rules matter more than the view.
func (d *Dashboard) Start(ctx context.Context, addr string) {
	var wg sync.WaitGroup
	wg.Go(func() { d.Run(ctx) })
	if err := d.Serve(ctx, addr); err != nil {
		d.opts.Log.Error("dashboard not served; the proxy carries on", "addr", addr, "err", err)
	} else {
		d.opts.Log.Debug("dashboard stopped")
	}
	wg.Wait()
}

// TrafficFor returns the traffic source of a proxy mode: the nftables mode's rule counters,
// the IPVS table's stats (ipvsStats), nil for iptables mode, which has none yet.
func TrafficFor(mode string, families []model.Family, counters NFTCounters, ipvsStats TrafficSource) TrafficSource {
	switch {
	case mode == ModeNFTables && counters != nil:
		return &NFTTraffic{Counters: counters, Families: families}
	case mode == ModeIPVS:
		return ipvsStats
	}
	return nil
}
