package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/edgegate/edgegate/lab/whoami"
)

// Client timeouts. DialTimeout is short so that a dropped flow (a timeout) is told apart
// from a rejected one (refused at once) quickly; ExchangeTimeout bounds a request/answer.
const (
	DialTimeout     = time.Second
	ExchangeTimeout = 2 * time.Second
)

// Outcome is how a flow through the gateway ended.
//
// (*) The kernel rate-limits "no route" errors with settings that are global, not per
// namespace (net.ipv4.route.error_cost/error_burst): after a few in a row they turn into
// TimedOut, so a check must not count on Unreachable repeatedly.
type Outcome int

const (
	Answered    Outcome = iota // a backend answered
	Refused                    // ECONNREFUSED: TCP reset or ICMP port unreachable (REJECT)
	Unreachable                // ICMP net/host unreachable or prohibited: no rule and no route (*)
	TimedOut                   // nothing came back before the deadline (DROP)
	Failed                     // anything else; see Result.Err
)

func (o Outcome) String() string {
	switch o {
	case Answered:
		return "answered"
	case Refused:
		return "refused"
	case Unreachable:
		return "unreachable"
	case TimedOut:
		return "timed out"
	}
	return "failed"
}

// Result is the end of one probe.
type Result struct {
	Outcome Outcome
	Reply   whoami.Reply // when Answered
	Err     error        // when not Answered
	Took    time.Duration
}

func (r Result) String() string {
	if r.Outcome == Answered {
		return fmt.Sprintf("answered by %s (saw %s) in %v", r.Reply.Backend, r.Reply.Source, r.Took.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s after %v: %v", r.Outcome, r.Took.Round(time.Millisecond), r.Err)
}

// classify maps a socket error to an Outcome.
func classify(err error) Outcome {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.EACCES):
		return Unreachable
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return TimedOut
	}
	return Failed
}

// Probe opens a new TCP connection from h to addr ("ip:port" or "[ip6]:port"), asks the
// backend behind it who it is over HTTP, and reports how that ended.
func (h *Host) Probe(addr string) Result {
	start := time.Now()
	r := h.probe(addr)
	r.Took = time.Since(start)
	return r
}

func (h *Host) probe(addr string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Result{Outcome: classify(err), Err: err}
	}
	defer c.Close()
	hc := &HTTPConn{conn: c, r: bufio.NewReader(c)}
	reply, err := hc.Ask()
	if err != nil {
		return Result{Outcome: classify(err), Err: err}
	}
	return Result{Outcome: Answered, Reply: reply}
}

// ProbeFrom is Probe from the source address src (one of h's addresses).
func (h *Host) ProbeFrom(src netip.Addr, addr string) Result {
	start := time.Now()
	r := func() Result {
		ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
		defer cancel()
		var c net.Conn
		err := h.Do(func() error {
			var err error
			d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
			c, err = d.DialContext(ctx, "tcp", addr)
			return err
		})
		if err != nil {
			return Result{Outcome: classify(err), Err: err}
		}
		defer c.Close()
		reply, err := (&HTTPConn{conn: c, r: bufio.NewReader(c)}).Ask()
		if err != nil {
			return Result{Outcome: classify(err), Err: err}
		}
		return Result{Outcome: Answered, Reply: reply}
	}()
	r.Took = time.Since(start)
	return r
}

// HTTPConn is a kept-alive HTTP connection to a backend through the gateway: every Ask
// reuses the same TCP connection, so the same conntrack entry.
type HTTPConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// OpenHTTP connects from h to addr and keeps the connection for Ask.
func (h *Host) OpenHTTP(addr string) (*HTTPConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect %s from %s: %w", addr, h.Name, err)
	}
	return &HTTPConn{conn: c, r: bufio.NewReader(c)}, nil
}

// Ask sends one request on the connection and reads the backend's answer.
func (c *HTTPConn) Ask() (whoami.Reply, error) {
	if err := c.conn.SetDeadline(time.Now().Add(ExchangeTimeout)); err != nil {
		return whoami.Reply{}, fmt.Errorf("set deadline: %w", err)
	}
	if _, err := io.WriteString(c.conn, "GET / HTTP/1.1\r\nHost: lab\r\n\r\n"); err != nil {
		return whoami.Reply{}, fmt.Errorf("send request: %w", err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return whoami.Reply{}, fmt.Errorf("read response: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return whoami.Reply{}, fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return whoami.Reply{}, fmt.Errorf("status %s: %s", resp.Status, body)
	}
	return whoami.Parse(string(body))
}

// Reset ends the connection with a TCP reset (SO_LINGER 0): it leaves no TIME_WAIT entry
// behind, in the kernel's TCP or in IPVS.
func (c *HTTPConn) Reset() error {
	tc, ok := c.conn.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("reset: %T is not a TCP connection", c.conn)
	}
	if err := tc.SetLinger(0); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return tc.Close()
}

// Close closes the connection.
func (c *HTTPConn) Close() error { return c.conn.Close() }

// Fetch GETs url from inside h's namespace on a new connection and returns the status code
// and body; for the daemon's /healthz and health-check node ports.
func (h *Host) Fetch(url string) (int, string, error) {
	client := &http.Client{
		Timeout: ExchangeTimeout,
		Transport: &http.Transport{
			DialContext:       h.DialContext,
			DisableKeepAlives: true,
		},
	}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", fmt.Errorf("get %s from %s: %w", url, h.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, "", fmt.Errorf("read %s: %w", url, err)
	}
	return resp.StatusCode, string(body), nil
}

// UDPFlow is one UDP socket with a fixed source port, connected to a service address, so
// every datagram belongs to the same conntrack entry on the gateway.
type UDPFlow struct {
	conn *net.UDPConn
}

// OpenUDP opens a UDP socket in h bound to localPort and connected to remote ("ip:port").
func (h *Host) OpenUDP(localPort uint16, remote string) (*UDPFlow, error) {
	raddr, err := netip.ParseAddrPort(remote)
	if err != nil {
		return nil, fmt.Errorf("open udp flow: %w", err)
	}
	network, local := "udp4", h.IPv4
	if raddr.Addr().Is6() {
		network, local = "udp6", h.IPv6
	}
	var c *net.UDPConn
	err = h.Do(func() error {
		var err error
		c, err = net.DialUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, localPort)), net.UDPAddrFromAddrPort(raddr))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open udp flow %s:%d -> %s: %w", h.Name, localPort, remote, err)
	}
	return &UDPFlow{conn: c}, nil
}

// udpQuestion is what a UDPFlow sends; package whoami answers any datagram.
const udpQuestion = "who\n"

// Ask sends one datagram and waits up to DialTimeout for the answer. A connected UDP
// socket reports an ICMP port unreachable for an earlier datagram as Refused.
func (f *UDPFlow) Ask() Result {
	_, _, r := f.AskBytes()
	return r
}

// AskBytes is Ask that also returns the lengths of the datagrams' data: the question sent
// and the answer received.
func (f *UDPFlow) AskBytes() (sent, received int, r Result) {
	start := time.Now()
	received, r = f.ask()
	r.Took = time.Since(start)
	return len(udpQuestion), received, r
}

func (f *UDPFlow) ask() (int, Result) {
	if err := f.conn.SetDeadline(time.Now().Add(DialTimeout)); err != nil {
		return 0, Result{Outcome: Failed, Err: err}
	}
	if _, err := f.conn.Write([]byte(udpQuestion)); err != nil {
		return 0, Result{Outcome: classify(err), Err: err}
	}
	buf := make([]byte, 512)
	n, err := f.conn.Read(buf)
	if err != nil {
		return 0, Result{Outcome: classify(err), Err: err}
	}
	reply, err := whoami.Parse(strings.TrimSpace(string(buf[:n])))
	if err != nil {
		return n, Result{Outcome: Failed, Err: err}
	}
	return n, Result{Outcome: Answered, Reply: reply}
}

// LocalAddr is the flow's source address and port.
func (f *UDPFlow) LocalAddr() netip.AddrPort { return f.conn.LocalAddr().(*net.UDPAddr).AddrPort() }

// Close closes the socket.
func (f *UDPFlow) Close() error { return f.conn.Close() }
