// Package healthcheck runs the per-service health-check servers of Services with
// externalTrafficPolicy Local: one HTTP listener on each healthCheckNodePort that answers 200
// while this node has a local endpoint for the service and 503 otherwise, so external load
// balancers send traffic only to nodes that can serve it. A dedicated ingress node usually has
// no local endpoints and answers 503. It follows kube-proxy's service_health.go.
package healthcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"

	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/model"
)

// ProxyHealth is the proxy's own sync health, reported in every answer; *healthz.Server has it.
type ProxyHealth interface {
	IsHealthy() bool
}

// Server owns the health-check listeners. Its methods are safe for concurrent use.
type Server struct {
	bindAddrs []netip.Addr
	gate      *listener.Gate // shared by every port, so their connections together stay capped
	log       *slog.Logger

	mu          sync.Mutex
	services    map[model.ServiceName]*checkPort
	endpoints   map[model.ServiceName]int
	proxyHealth ProxyHealth // nil: count the proxy as healthy
}

// checkPort is one service's health check on one port, possibly on several addresses.
type checkPort struct {
	port    uint16
	servers []*http.Server
	serving sync.WaitGroup
}

// NewServer returns a Server whose listeners bind to bindAddrs, or to every address when
// bindAddrs is empty, and admit connections through gate.
func NewServer(bindAddrs []netip.Addr, gate *listener.Gate, log *slog.Logger) *Server {
	return &Server{
		bindAddrs: bindAddrs,
		gate:      gate,
		log:       log,
		services:  map[model.ServiceName]*checkPort{},
		endpoints: map[model.ServiceName]int{},
	}
}

// UseProxyHealth makes the listeners also answer 503 while the proxy itself is unhealthy, as
// kube-proxy does, since rules that are not being synced cannot be trusted to reach endpoints.
func (s *Server) UseProxyHealth(h ProxyHealth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proxyHealth = h
}

// SyncServices makes the open listeners match services, a map from service to its
// healthCheckNodePort: it closes listeners of services that are gone or moved port and opens
// the missing ones. A port that cannot be opened is logged and tried again on the next call,
// because another program may hold it only for a while. Port 0 means no health check.
func (s *Server) SyncServices(services map[model.ServiceName]uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, l := range s.services {
		if port, ok := services[name]; !ok || port != l.port {
			s.log.Info("closing health check", "service", name.String(), "port", l.port)
			l.close(s.log, name)
			delete(s.services, name)
		}
	}
	for name, port := range services {
		if port == 0 || s.services[name] != nil {
			continue
		}
		l, err := s.listen(name, port)
		if err != nil {
			s.log.Error("opening health check failed, will retry on next sync", "service", name.String(), "port", port, "err", err)
			continue
		}
		s.log.Info("opened health check", "service", name.String(), "port", port)
		s.services[name] = l
	}
}

// SyncEndpoints sets the number of local endpoints of each service; services missing from
// counts have none.
func (s *Server) SyncEndpoints(counts map[model.ServiceName]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endpoints = make(map[model.ServiceName]int, len(counts))
	for name, n := range counts {
		s.endpoints[name] = n
	}
}

// Close closes every listener.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, l := range s.services {
		l.close(s.log, name)
		delete(s.services, name)
	}
}

// listen opens port on every bind address, or on none if any fails, so that a retry starts
// from a clean slate.
func (s *Server) listen(name model.ServiceName, port uint16) (*checkPort, error) {
	addrs := []string{net.JoinHostPort("", strconv.Itoa(int(port)))}
	if len(s.bindAddrs) > 0 {
		addrs = addrs[:0]
		for _, a := range s.bindAddrs {
			addrs = append(addrs, netip.AddrPortFrom(a, port).String())
		}
	}
	l := &checkPort{port: port}
	var lns []net.Listener
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, open := range lns {
				open.Close()
			}
			return nil, fmt.Errorf("health check listen on %s: %w", addr, err)
		}
		lns = append(lns, ln)
	}
	handler := s.handler(name)
	for _, ln := range lns {
		srv := s.gate.Server(handler)
		l.servers = append(l.servers, srv)
		l.serving.Go(func() {
			if err := srv.Serve(s.gate.Listen(ln)); !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("health check stopped serving", "service", name.String(), "addr", ln.Addr().String(), "err", err)
			}
		})
	}
	return l, nil
}

// close stops l's servers and waits for their serve loops to end, so the port is free when it
// returns. It does not wait for request handlers, which may be waiting for Server.mu.
func (l *checkPort) close(log *slog.Logger, name model.ServiceName) {
	for _, srv := range l.servers {
		if err := srv.Close(); err != nil {
			log.Warn("closing health check", "service", name.String(), "port", l.port, "err", err)
		}
	}
	l.serving.Wait()
}

// answer is kube-proxy's health-check body.
type answer struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func (s *Server) handler(name model.ServiceName) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		count, health := s.endpoints[name], s.proxyHealth
		s.mu.Unlock()

		var a answer
		a.Service.Namespace, a.Service.Name = name.Namespace, name.Name
		a.LocalEndpoints = count
		a.ServiceProxyHealthy = health == nil || health.IsHealthy()

		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if count > 0 && a.ServiceProxyHealthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		// The status code has been sent and is what load balancers read; the body is a courtesy.
		_ = json.NewEncoder(w).Encode(a)
	})
}
