package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The exchange after the handshake: a request the backend answers at once. Short enough
// to travel in one segment each way.
var (
	request  = []byte("ping\n")
	response = []byte("pong\n")
)

// Connection timeouts: a SYN lost once would be retried after a second and land in the
// p99; one that fails for 3 s counts as failed.
const (
	connectTimeout = 3 * time.Second
	replyTimeout   = 3 * time.Second
)

// sample is one connection's times, both from the connect() call: until the connection
// is established (the SYN walked the rules and the SYN-ACK came back), and until the
// backend's reply to the first request arrived.
type sample struct {
	connect, reply time.Duration
}

// series is one destination the client connects to, and what it measured.
type series struct {
	name    string
	dst     netip.AddrPort
	samples []sample
	failed  int
	lastErr error
}

// dial makes one connection from the calling thread's namespace and measures it. It uses
// raw non-blocking sockets and poll(2) rather than the net package, so the figures hold
// no goroutine scheduling: only the kernel's path and the two clock reads. The connection
// ends with a reset, which leaves no TIME_WAIT entry behind on either side.
func dial(dst netip.AddrPort) (sample, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return sample{}, fmt.Errorf("socket: %w", err)
	}
	defer func() {
		_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		_ = unix.Close(fd)
	}()
	sa := &unix.SockaddrInet4{Addr: dst.Addr().As4(), Port: int(dst.Port())}
	start := time.Now()
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		return sample{}, fmt.Errorf("connect %s: %w", dst, err)
	}
	if err := waitFD(fd, unix.POLLOUT, start.Add(connectTimeout)); err != nil {
		return sample{}, fmt.Errorf("connect %s: %w", dst, err)
	}
	if errno, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || errno != 0 {
		return sample{}, fmt.Errorf("connect %s: %w", dst, errors.Join(err, syscall.Errno(errno)))
	}
	var s sample
	s.connect = time.Since(start)
	if _, err := unix.Write(fd, request); err != nil {
		return sample{}, fmt.Errorf("send to %s: %w", dst, err)
	}
	buf := make([]byte, len(response))
	for got := 0; got < len(buf); {
		if err := waitFD(fd, unix.POLLIN, start.Add(connectTimeout+replyTimeout)); err != nil {
			return sample{}, fmt.Errorf("reply from %s: %w", dst, err)
		}
		n, err := unix.Read(fd, buf[got:])
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return sample{}, fmt.Errorf("reply from %s: %w", dst, err)
		case n == 0:
			return sample{}, fmt.Errorf("reply from %s: connection closed after %d bytes", dst, got)
		}
		got += n
	}
	s.reply = time.Since(start)
	if string(buf) != string(response) {
		return sample{}, fmt.Errorf("reply from %s: %q, want %q", dst, buf, response)
	}
	return s, nil
}

// waitFD polls fd for events until deadline; signals (the Go runtime's preemption) only
// restart the wait.
func waitFD(fd int, events int16, deadline time.Time) error {
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return errTimeout
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: events}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("poll: %w", err)
		case n == 0:
			return errTimeout
		}
		return nil
	}
}

var errTimeout = errors.New("timed out")

// measureOptions bound one interleaved measurement.
type measureOptions struct {
	conns   int           // connections per series
	batch   int           // consecutive connections to one series before the next
	warmup  int           // connections per series first, not counted (neighbour entries, caches)
	maxTime time.Duration // the measurement stops at a round's end after this, with what it has
}

// measure runs the series interleaved from the client's namespace: rounds of one batch
// per series, the series' order rotating every round, so whatever changes during the
// run (another process's CPU, a timer) hits every series alike. Every series ends with
// the same number of connections. Warm-up connections must all succeed: they prove every
// path works before anything is counted.
func measure(ctx context.Context, client node, all []*series, o measureOptions) error {
	return client.Do(func() error {
		for _, s := range all {
			for range o.warmup {
				if _, err := dial(s.dst); err != nil {
					return fmt.Errorf("warm-up, %s: %w", s.name, err)
				}
			}
			s.samples = make([]sample, 0, o.conns)
		}
		deadline := time.Now().Add(o.maxTime)
		for round, done := 0, 0; done < o.conns; round++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				break
			}
			n := min(o.batch, o.conns-done)
			for k := range all {
				s := all[(round+k)%len(all)]
				for range n {
					sm, err := dial(s.dst)
					if err != nil {
						s.failed++
						s.lastErr = err
						continue
					}
					s.samples = append(s.samples, sm)
				}
			}
			done += n
		}
		return nil
	})
}

// latency summarises one kind of time of a series.
func latency(samples []sample, of func(sample) time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	d := make([]time.Duration, len(samples))
	var sum time.Duration
	for i, s := range samples {
		d[i] = of(s)
		sum += d[i]
	}
	slices.Sort(d)
	return Latency{P50: rank(d, 0.50), P99: rank(d, 0.99), Mean: sum / time.Duration(len(d))}
}

// rank is the nearest-rank percentile of sorted durations.
func rank(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// backend answers every connection on TargetPort: it reads the request and sends the
// reply, then waits for the client's reset.
type backend struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startBackend(n node, port uint16) (*backend, error) {
	b := &backend{}
	err := n.Do(func() error {
		var err error
		b.ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("backend: listen on %d: %w", port, err)
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := b.ln.Accept()
			if err != nil {
				return // closed
			}
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				serve(c)
			}()
		}
	}()
	return b, nil
}

func serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(connectTimeout + replyTimeout))
	buf := make([]byte, len(request))
	if _, err := io.ReadFull(c, buf); err != nil {
		return
	}
	if string(buf) == string(sinkMagic) {
		sink(c)
		return
	}
	if _, err := c.Write(response); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, c)
}

func (b *backend) close() {
	b.ln.Close()
	b.wg.Wait()
}
