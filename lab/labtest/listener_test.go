package labtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/listener"

	"github.com/edgegate/edgegate/lab"
)

// idlePerListener is how many idle connections the abuse test opens against each listener.
const idlePerListener = 2000

// slowCutOffWithin bounds how long a slow-header client may hold its connection: the
// header timeout and a generous margin for a loaded machine.
var slowCutOffWithin = listener.Default.ReadHeaderTimeout + 20*time.Second

// abused is one HTTP listener of the daemon under abuse: a flood of idle connections from
// one source, and a slow-header client from another.
type abused struct {
	name            string // the metrics' listener label
	flood           *lab.Host
	floodFrom       netip.Addr // the flood's source when it must be chosen (loopback)
	floodTo         string
	slow            *lab.Host
	slowFrom        netip.Addr
	slowTo          string
	tls             bool       // the listener speaks TLS: the slow client sends a handshake
	conns           []net.Conn // the flood's, open until the test ends
	resetAtDial     int        // flood connections the gate reset before the dial returned
	slowTook        time.Duration
	floodErr, slErr error
}

// TestListenerAbuse: 2,000 idle connections and a slow-header client against each HTTP
// listener of the real daemon (healthz, metrics, a healthCheckNodePort, the dashboard). The
// proxy keeps syncing, /healthz answers another source, the slow clients are cut off by the
// header timeout, and the daemon's open files stay bounded by the connection caps.
func TestListenerAbuse(t *testing.T) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Go raised the soft limit to the hard one at start; the test holds every client socket.
	if need := uint64(4*idlePerListener + 1000); lim.Cur < need {
		t.Fatalf("the test needs %d open files for its client sockets, RLIMIT_NOFILE allows %d (hard %d): raise it (ulimit -n)", need, lim.Cur, lim.Max)
	}
	l := New(t, lab.Options{Prefix: "egl"})
	dir := ManifestDir(t.TempDir())
	local := service("abuse-local", []string{"10.96.30.1"}, loadBalancer(30310, "203.0.113.31"), externalLocal(30410))
	dir.Write(t, "abuse-local", manifests(local, slice(local, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	// The dashboard on every address in TLS (the lab's default is plain HTTP on loopback,
	// out of the clients' reach): the gate counts connections before their handshake.
	d := StartDaemon(t, l.Gateway, append(lab.DaemonArgs("nftables", string(dir)), "--dashboard-bind-address", ":443")...)

	loopback := netip.MustParseAddr("127.0.0.1")
	targets := []*abused{
		{name: "healthz", flood: l.Client, floodTo: "10.200.1.1:10256", slow: l.Client2, slowTo: "10.200.3.1:10256"},
		{name: "healthcheck", flood: l.Client, floodTo: "10.200.1.1:30410", slow: l.Client2, slowTo: "10.200.3.1:30410"},
		{name: "dashboard", flood: l.Client, floodTo: "10.200.1.1:443", slow: l.Client2, slowTo: "10.200.3.1:443", tls: true},
		// Metrics answer on loopback only: the clients are in the daemon's namespace, on
		// loopback addresses of their own, so the test's scrapes from 127.0.0.1 still count
		// as another source.
		{name: "metrics", flood: l.Gateway, floodFrom: loopback.Next(), floodTo: "127.0.0.1:10249",
			slow: l.Gateway, slowFrom: loopback.Next().Next(), slowTo: "127.0.0.1:10249"},
	}
	before := openFiles(t, d.PID)
	peak := sampleOpenFiles(t, d.PID)

	var slow, floods sync.WaitGroup
	for _, a := range targets {
		slow.Go(func() { a.slowTook, a.slErr = slowHeader(a.slow, a.slowFrom, a.slowTo, a.tls, slowCutOffWithin) })
		floods.Go(func() { a.conns, a.resetAtDial, a.floodErr = flood(a.flood, a.floodFrom, a.floodTo, idlePerListener) })
	}
	t.Cleanup(func() {
		for _, a := range targets {
			for _, c := range a.conns {
				c.Close()
			}
		}
	})
	floods.Wait()

	// While every flood's connections are open, the admitted ones waiting out their header
	// timeout and the slow clients still sending: /healthz answers from another source,
	// and a new Service is programmed.
	healthy := 0
	for i := range 5 {
		code, body, err := l.Client2.Fetch("http://10.200.3.1:10256/healthz")
		if err != nil || code != 200 {
			t.Errorf("/healthz from client-2 under abuse, try %d: %d %v %s", i+1, code, err, body)
		} else {
			healthy++
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("/healthz from client-2 under abuse: %d of 5 answered 200", healthy)
	fresh := service("abuse-fresh", []string{"10.96.30.2"})
	written := time.Now()
	dir.Write(t, "abuse-fresh", manifests(fresh, slice(fresh, discovery.AddressTypeIPv4, ready(2))))
	eventually(t, 10*time.Second, "a Service added under abuse answers", func() (bool, string) {
		r := l.Client.Probe("10.96.30.2:80")
		return r.Outcome == lab.Answered, r.String()
	})
	t.Logf("a Service added under abuse answered %v after its manifest was written", time.Since(written).Round(time.Millisecond))
	slow.Wait()

	capPerSource := listener.Default.MaxConnsPerSource
	refused := refusedByListener(t, l)
	for _, a := range targets {
		if a.floodErr != nil {
			t.Errorf("%s: flood: %v", a.name, a.floodErr)
		}
		switch {
		case a.slErr != nil:
			t.Errorf("%s: slow-header client: %v", a.name, a.slErr)
		default:
			what := "a header"
			if a.tls {
				what = "a TLS handshake"
			}
			t.Logf("%s: %s sent one byte a second was cut off after %v (header timeout %v)", a.name, what, a.slowTook.Round(time.Millisecond), listener.Default.ReadHeaderTimeout)
		}
		t.Logf("%s: %d idle connections from %s: %d reset before the dial returned; %d refused per source, %d for the total, by the daemon's count",
			a.name, idlePerListener, a.flood.Name, a.resetAtDial, refused[a.name+"/per_source"], refused[a.name+"/total"])
		// Most of the flood is refused at once; the admitted ones fall to the header
		// timeout and free their places for more of it.
		if got := refused[a.name+"/per_source"]; got < idlePerListener/2 {
			t.Errorf("%s: %d connections refused per source, want at least %d of %d", a.name, got, idlePerListener/2, idlePerListener)
		}
	}
	// Each listener holds at most a source's cap of the flood, the slow client, a probe.
	bound := before + len(targets)*(capPerSource+2) + 64
	during := peak()
	t.Logf("the daemon's open files: %d before, at most %d under %d idle connections to each of %d listeners (bound %d)",
		before, during, idlePerListener, len(targets), bound)
	if during > bound {
		t.Errorf("the daemon held %d open files under abuse, want at most %d", during, bound)
	}
	code, body, err := l.Gateway.Fetch(lab.HealthzURL)
	if err != nil || code != 200 {
		t.Errorf("/healthz after the abuse: %d %v %s", code, err, body)
	}

	for _, a := range targets {
		for _, c := range a.conns {
			c.Close()
		}
		a.conns = nil
	}
	eventually(t, 10*time.Second, "the daemon's open files back to where they were", func() (bool, string) {
		n := openFiles(t, d.PID)
		return n <= before+8, fmt.Sprintf("%d open, %d before", n, before)
	})
	t.Logf("the daemon's open files after the clients closed: %d", openFiles(t, d.PID))
}

// flood opens n TCP connections from h to addr (from the address from, when valid) and
// returns those the daemon did not reset before the dial returned, open.
func flood(h *lab.Host, from netip.Addr, addr string, n int) (conns []net.Conn, reset int, err error) {
	err = h.Do(func() error {
		d := dialerFrom(from)
		for i := range n {
			c, err := d.Dial("tcp", addr)
			switch {
			case errors.Is(err, syscall.ECONNRESET):
				reset++
			case err != nil:
				return fmt.Errorf("connection %d of %d to %s from %s: %w", i+1, n, addr, h.Name, err)
			default:
				conns = append(conns, c)
			}
		}
		return nil
	})
	return conns, reset, err
}

// slowHeader connects from h to addr (from the address from, when valid) and sends one byte
// of a header (with tls, of a TLS handshake) that never ends each second, until the daemon
// closes the connection; it returns how long that took, or an error past limit.
func slowHeader(h *lab.Host, from netip.Addr, addr string, tls bool, limit time.Duration) (time.Duration, error) {
	var c net.Conn
	err := h.Do(func() error {
		d := dialerFrom(from)
		var err error
		c, err = d.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("connect to %s from %s: %w", addr, h.Name, err)
	}
	defer c.Close()
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = c.SetReadDeadline(start.Add(limit))
		_, _ = io.Copy(io.Discard, c)
	}()
	header := "GET / HTTP/1.1\r\nHost: gateway\r\nX-Slow: " + strings.Repeat("a", 100)
	if tls {
		// A TLS handshake record that announces a 512-byte ClientHello: the server waits in
		// its handshake for the rest (plain text would be answered 400 after 5 bytes).
		header = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + strings.Repeat("\x00", 100)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-closed:
			took := time.Since(start)
			if took >= limit {
				return took, fmt.Errorf("still connected after %v", limit)
			}
			return took, nil
		case <-tick.C:
			_, _ = c.Write([]byte{header[i%len(header)]})
		}
	}
}

// dialerFrom dials from the local address from, or from the one the kernel picks when from
// is the zero Addr.
func dialerFrom(from netip.Addr) *net.Dialer {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if from.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
	}
	return d
}

func openFiles(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("open files of edgegate (pid %d): %v", pid, err)
	}
	return len(ents)
}

// sampleOpenFiles counts pid's open files every 50ms until the test ends; the function it
// returns gives the most seen so far.
func sampleOpenFiles(t *testing.T, pid int) func() int {
	var mu sync.Mutex
	most := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				mu.Lock()
				most = max(most, len(ents))
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return most
	}
}

var refusedSeries = regexp.MustCompile(`^edgegate_listener_connections_refused_total\{listener="([^"]+)",reason="([^"]+)"\} (\S+)$`)

// refusedByListener reads the daemon's refusal counts, keyed "listener/reason".
func refusedByListener(t *testing.T, l *lab.Lab) map[string]int {
	t.Helper()
	code, body, err := l.Gateway.Fetch(lab.MetricsURL)
	if err != nil || code != 200 {
		t.Fatalf("metrics: %d %v", code, err)
	}
	out := map[string]int{}
	for line := range strings.Lines(body) {
		if m := refusedSeries.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			v, err := strconv.ParseFloat(m[3], 64)
			if err != nil {
				t.Fatalf("metrics: %q: %v", line, err)
			}
			out[m[1]+"/"+m[2]] = int(v)
		}
	}
	return out
}
