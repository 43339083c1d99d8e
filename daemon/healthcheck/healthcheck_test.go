package healthcheck

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/internal/prereq"
)

var (
	loopback  = netip.MustParseAddr("127.0.0.1")
	loopback2 = netip.MustParseAddr("127.0.0.2") // Linux routes all of 127/8 to lo
	svcA      = model.ServiceName{Namespace: "ns", Name: "a"}
	svcB      = model.ServiceName{Namespace: "ns", Name: "b"}
	client    = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
)

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func addr(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// get fetches a health check and returns its status and body, checking the headers.
func get(t *testing.T, hostport string) (int, string) {
	t.Helper()
	resp, err := client.Get("http://" + hostport + "/")
	if err != nil {
		t.Fatalf("GET %s: %v", hostport, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", hostport, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", hostport, ct)
	}
	if v := resp.Header.Get("X-Content-Type-Options"); v != "nosniff" {
		t.Errorf("GET %s: X-Content-Type-Options %q", hostport, v)
	}
	return resp.StatusCode, strings.TrimSpace(string(body))
}

func expectAnswer(t *testing.T, hostport string, code int, svc model.ServiceName, endpoints int, proxyHealthy bool) {
	t.Helper()
	gotCode, body := get(t, hostport)
	want := fmt.Sprintf(`{"service":{"namespace":%q,"name":%q},"localEndpoints":%d,"serviceProxyHealthy":%v}`,
		svc.Namespace, svc.Name, endpoints, proxyHealthy)
	if gotCode != code || body != want {
		t.Errorf("GET %s = %d %s, want %d %s", hostport, gotCode, body, code, want)
	}
}

func expectClosed(t *testing.T, hostport string) {
	t.Helper()
	if c, err := net.DialTimeout("tcp", hostport, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections", hostport)
	}
}

func newServer(t *testing.T, bind ...netip.Addr) (*Server, *testkit.Buffer) {
	t.Helper()
	return newGatedServer(t, listener.Default, bind...)
}

func newGatedServer(t *testing.T, cfg listener.Config, bind ...netip.Addr) (*Server, *testkit.Buffer) {
	t.Helper()
	logs := &testkit.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	s := NewServer(bind, listener.NewGate("healthcheck", cfg, nil, log), log)
	t.Cleanup(s.Close)
	return s, logs
}

// TestPortsShareOneGate: the health-check ports are capped together, and a port closed with
// its service gives back the places of its connections.
func TestPortsShareOneGate(t *testing.T) {
	cfg := listener.Default
	cfg.MaxConnsPerSource = 1
	s, _ := newGatedServer(t, cfg, loopback)
	pa, pb := freePort(t), freePort(t)
	s.SyncServices(map[model.ServiceName]uint16{svcA: pa, svcB: pb})
	held, err := net.DialTimeout("tcp", addr(loopback, pa), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for deadline := time.Now().Add(5 * time.Second); s.gate.Open() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the held connection is not counted: %d open", s.gate.Open())
		}
	}
	if _, err := http.Get("http://" + addr(loopback, pb)); err == nil {
		t.Fatal("port B answered while port A held the source's only place")
	}
	s.SyncServices(map[model.ServiceName]uint16{svcB: pb})
	if got := s.gate.Open(); got != 0 {
		t.Fatalf("open connections after port A closed: %d, want 0", got)
	}
	expectAnswer(t, addr(loopback, pb), http.StatusServiceUnavailable, svcB, 0, true)
}

func TestAnswerFollowsLocalEndpoints(t *testing.T) {
	s, _ := newServer(t, loopback)
	port := freePort(t)
	hp := addr(loopback, port)
	s.SyncServices(map[model.ServiceName]uint16{svcA: port})
	expectAnswer(t, hp, http.StatusServiceUnavailable, svcA, 0, true)

	s.SyncEndpoints(map[model.ServiceName]int{svcA: 2, svcB: 1})
	expectAnswer(t, hp, http.StatusOK, svcA, 2, true)

	s.SyncEndpoints(map[model.ServiceName]int{svcB: 1})
	expectAnswer(t, hp, http.StatusServiceUnavailable, svcA, 0, true)
}

func TestNoBindAddressesListensEverywhere(t *testing.T) {
	s, _ := newServer(t)
	port := freePort(t)
	s.SyncServices(map[model.ServiceName]uint16{svcA: port})
	expectAnswer(t, addr(loopback, port), http.StatusServiceUnavailable, svcA, 0, true)
}

func TestEndpointsSyncedBeforeServiceCount(t *testing.T) {
	s, _ := newServer(t, loopback)
	port := freePort(t)
	s.SyncEndpoints(map[model.ServiceName]int{svcA: 1})
	s.SyncServices(map[model.ServiceName]uint16{svcA: port})
	expectAnswer(t, addr(loopback, port), http.StatusOK, svcA, 1, true)
}

type fixedHealth bool

func (h fixedHealth) IsHealthy() bool { return bool(h) }

func TestUnhealthyProxyFailsCheck(t *testing.T) {
	s, _ := newServer(t, loopback)
	port := freePort(t)
	s.SyncServices(map[model.ServiceName]uint16{svcA: port})
	s.SyncEndpoints(map[model.ServiceName]int{svcA: 3})
	s.UseProxyHealth(fixedHealth(false))
	expectAnswer(t, addr(loopback, port), http.StatusServiceUnavailable, svcA, 3, false)
	s.UseProxyHealth(fixedHealth(true))
	expectAnswer(t, addr(loopback, port), http.StatusOK, svcA, 3, true)
}

func TestSyncServicesOpensMovesAndCloses(t *testing.T) {
	s, _ := newServer(t, loopback)
	pa, pb, pa2 := freePort(t), freePort(t), freePort(t)
	s.SyncEndpoints(map[model.ServiceName]int{svcA: 1, svcB: 1})
	s.SyncServices(map[model.ServiceName]uint16{svcA: pa, svcB: pb})
	expectAnswer(t, addr(loopback, pa), http.StatusOK, svcA, 1, true)
	expectAnswer(t, addr(loopback, pb), http.StatusOK, svcB, 1, true)

	s.SyncServices(map[model.ServiceName]uint16{svcA: pa2})
	expectClosed(t, addr(loopback, pa))
	expectClosed(t, addr(loopback, pb))
	expectAnswer(t, addr(loopback, pa2), http.StatusOK, svcA, 1, true)

	s.Close()
	expectClosed(t, addr(loopback, pa2))
}

func TestListenFailureIsLoggedAndRetried(t *testing.T) {
	s, logs := newServer(t, loopback)
	port := freePort(t)
	squatter, err := net.Listen("tcp", addr(loopback, port))
	if err != nil {
		t.Fatal(err)
	}
	services := map[model.ServiceName]uint16{svcA: port}
	s.SyncServices(services)
	if !strings.Contains(logs.String(), "will retry") {
		t.Errorf("listen failure not logged; logs:\n%s", logs)
	}

	squatter.Close()
	s.SyncServices(services)
	expectAnswer(t, addr(loopback, port), http.StatusServiceUnavailable, svcA, 0, true)
}

func TestEveryBindAddressOrNone(t *testing.T) {
	s, _ := newServer(t, loopback, loopback2)
	port := freePort(t)
	squatter, err := net.Listen("tcp", addr(loopback2, port))
	if err != nil {
		// Linux routes all of 127.0.0.0/8 to lo; elsewhere the test cannot run.
		prereq.Missing(t, "no 127.0.0.2 on this host: %v", err)
	}
	services := map[model.ServiceName]uint16{svcA: port}
	s.SyncServices(services)
	// Half-open health checks would keep the port busy and make the retry fail forever.
	expectClosed(t, addr(loopback, port))

	squatter.Close()
	s.SyncServices(services)
	s.SyncEndpoints(map[model.ServiceName]int{svcA: 1})
	expectAnswer(t, addr(loopback, port), http.StatusOK, svcA, 1, true)
	expectAnswer(t, addr(loopback2, port), http.StatusOK, svcA, 1, true)
}

func TestPortZeroOpensNothing(t *testing.T) {
	s, _ := newServer(t, loopback)
	s.SyncServices(map[model.ServiceName]uint16{svcA: 0})
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.services) != 0 {
		t.Fatalf("port 0 opened a listener: %v", s.services)
	}
}
