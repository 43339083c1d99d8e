package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/edgegate/edgegate/daemon/healthz"
	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/metrics"
)

// listenerUnits serve /healthz and /metrics where the configuration says (an empty
// address turns one off). A listener holds nothing but its socket: it restarts alone,
// with backoff, when it fails (an address still held, say) while the proxy runs on.
func listenerUnits(cfg Config, health *healthz.Server, m *metrics.Metrics, gate func(string) *listener.Gate, log *slog.Logger) []Unit {
	var us []Unit
	// A gate outlives its listener's restarts: it counts the connections still open.
	if cfg.HealthzBindAddress != "" {
		g, hlog := gate("healthz"), log.With("component", "healthz")
		us = append(us, Unit{Name: "healthz", Policy: Restart, Run: func(ctx context.Context) error {
			return health.Serve(ctx, cfg.HealthzBindAddress, g, hlog)
		}})
	}
	if cfg.MetricsBindAddress != "" {
		g, mux := gate("metrics"), metricsMux(m, cfg.EnableProfiling)
		us = append(us, Unit{Name: "metrics", Policy: Restart, Run: func(ctx context.Context) error {
			return serveMetrics(ctx, cfg.MetricsBindAddress, mux, g)
		}})
	}
	return us
}

// metricsMux serves /metrics and, with profiling, Go's profiles under /debug/pprof/.
func metricsMux(m *metrics.Metrics, profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func serveMetrics(ctx context.Context, addr string, mux http.Handler, gate *listener.Gate) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	return listener.Serve(ctx, gate.Server(mux), gate.Listen(ln))
}
