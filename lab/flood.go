package lab

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
)

// A bounded SYN flood from a lab host, and a legitimate client's connections during it,
// each pinned to a CPU: on a 2-core machine the flooder, the gateway's processing of its
// packets (softirq runs on the sending CPU for a veth) and the client would otherwise
// compete at random, and the figures would say more about the scheduler than the gateway.

// FloodOptions bound a SYN flood. It never outlives its count or MaxTime.
type FloodOptions struct {
	// Target is the address attacked: a lab address (a Service's LoadBalancer IP).
	Target netip.AddrPort
	// Sources are the spoofed source addresses, drawn at random: an IPv4 prefix of
	// private addresses, which the gateway routes back to the flooding host.
	Sources netip.Prefix
	// Count is the number of SYNs sent; Rate the packets per second aimed at.
	Count, Rate int
	// CPU pins the sender (-1: not pinned).
	CPU int
	// MaxTime bounds the flood (default 60 s).
	MaxTime time.Duration
}

// FloodResult is what a flood sent.
type FloodResult struct {
	Sent int
	Took time.Duration
}

// Rate is the packets per second actually sent.
func (r FloodResult) Rate() float64 {
	if r.Took <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Took.Seconds()
}

// SYNFlood sends o.Count TCP SYNs with spoofed sources from h, paced to o.Rate, through a
// raw socket of h's namespace.
func (h *Host) SYNFlood(o FloodOptions) (FloodResult, error) {
	switch {
	case !h.ns.IsOpen():
		// Never from the machine's own namespace: a flood stays inside the lab.
		return FloodResult{}, fmt.Errorf("flood: %s is not a namespace of its own", h.Name)
	case !o.Target.Addr().Is4() || !o.Sources.Addr().Is4() || !o.Sources.Addr().IsPrivate():
		return FloodResult{}, fmt.Errorf("flood: target %s and sources %s must be IPv4, the sources private", o.Target, o.Sources)
	case o.Count <= 0 || o.Rate <= 0:
		return FloodResult{}, fmt.Errorf("flood: count %d and rate %d must be positive", o.Count, o.Rate)
	}
	if o.MaxTime == 0 {
		o.MaxTime = time.Minute
	}
	var res FloodResult
	err := h.Do(func() error {
		return pinned(o.CPU, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
			if err != nil {
				return fmt.Errorf("flood: raw socket: %w", err)
			}
			defer unix.Close(fd)
			to := &unix.SockaddrInet4{Addr: o.Target.Addr().As4()}
			pkt := make([]byte, 40)
			base := o.Sources.Masked().Addr().As4()
			hostBits := 32 - o.Sources.Bits()
			start := time.Now()
			deadline := start.Add(o.MaxTime)
			for res.Sent < o.Count && time.Now().Before(deadline) {
				// Pace: never ahead of Rate since the start.
				if due := int(time.Since(start).Seconds()*float64(o.Rate)) + 1; res.Sent >= due {
					time.Sleep(200 * time.Microsecond)
					continue
				}
				src := base
				binary.BigEndian.PutUint32(src[:], binary.BigEndian.Uint32(base[:])|(rand.Uint32()&(1<<hostBits-1)))
				synPacket(pkt, src, o.Target)
				if err := unix.Sendto(fd, pkt, 0, to); err != nil {
					if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
						continue
					}
					return fmt.Errorf("flood: send: %w", err)
				}
				res.Sent++
			}
			res.Took = time.Since(start)
			return nil
		})
	})
	return res, err
}

// synPacket writes an IPv4 TCP SYN from src (a random port) to dst into b (40 bytes).
func synPacket(b []byte, src [4]byte, dst netip.AddrPort) {
	clear(b)
	b[0], b[8], b[9] = 0x45, 64, unix.IPPROTO_TCP // version 4, 20-byte header; TTL; TCP
	binary.BigEndian.PutUint16(b[2:], 40)
	d := dst.Addr().As4()
	copy(b[12:16], src[:])
	copy(b[16:20], d[:])
	binary.BigEndian.PutUint16(b[10:], checksum(b[:20], 0))
	tcp := b[20:]
	binary.BigEndian.PutUint16(tcp[0:], uint16(1024+rand.IntN(64000)))
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], rand.Uint32())
	tcp[12], tcp[13] = 5<<4, 0x02 // 20-byte header; SYN
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	// The pseudo-header: addresses, protocol, TCP length.
	pseudo := uint32(unix.IPPROTO_TCP) + 20
	for i := 12; i < 20; i += 2 {
		pseudo += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	binary.BigEndian.PutUint16(tcp[16:], checksum(tcp, pseudo))
}

// checksum is the Internet checksum of b, starting from sum.
func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// pinned runs fn with the calling OS thread (locked by Do) on one CPU, and gives the
// thread back its CPUs afterwards; cpu < 0 runs fn as it is.
func pinned(cpu int, fn func() error) error {
	if cpu < 0 {
		return fn()
	}
	var was, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	defer unix.SchedSetaffinity(0, &was)
	return fn()
}

// ProbeEvery probes addr from h n times, one probe every interval (a probe that takes
// longer delays the next), on CPU cpu (-1: not pinned), each bounded by DialTimeout.
func (h *Host) ProbeEvery(addr string, n int, interval time.Duration, cpu int) ([]Result, error) {
	var out []Result
	err := h.Do(func() error {
		return pinned(cpu, func() error {
			next := time.Now()
			for range n {
				time.Sleep(time.Until(next))
				next = next.Add(interval)
				start := time.Now()
				r := func() Result {
					ctx, cancel := context.WithTimeout(context.Background(), DialTimeout)
					defer cancel()
					c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
					if err != nil {
						return Result{Outcome: classify(err), Err: err}
					}
					defer c.Close()
					return askOnce(c)
				}()
				r.Took = time.Since(start)
				out = append(out, r)
			}
			return nil
		})
	})
	return out, err
}

// ConntrackCount is the number of conntrack entries in h's namespace.
func (h *Host) ConntrackCount() (int, error) {
	var n int
	err := h.Do(func() error {
		b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
		if err != nil {
			return err
		}
		n, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return n, err
}

// SynProxyStats reads the synproxy counters of h's namespace.
func (h *Host) SynProxyStats() (conntrack.SynProxyStats, error) {
	b, err := h.ReadProcNet(filepath.Join("stat", "synproxy"))
	if err != nil {
		return conntrack.SynProxyStats{}, err
	}
	sp, err := conntrack.ParseSynProxy(b)
	if err != nil {
		return sp, fmt.Errorf("/proc/net/stat/synproxy: %w", err)
	}
	return sp, nil
}

// askOnce asks the backend behind c who it is.
func askOnce(c net.Conn) Result {
	reply, err := (&HTTPConn{conn: c, r: bufio.NewReader(c)}).Ask()
	if err != nil {
		return Result{Outcome: classify(err), Err: err}
	}
	return Result{Outcome: Answered, Reply: reply}
}

// RouteVia routes prefix through the neighbour via in h's namespace (the route a flood's
// spoofed sources need back to the flooder): netlink, as a guest has no ip(8).
func (h *Host) RouteVia(prefix netip.Prefix, via netip.Addr) error {
	n, err := openLinks(h)
	if err != nil {
		return err
	}
	defer n.close()
	r := &netlink.Route{Dst: ipNet(prefix), Gw: via.AsSlice(), Family: unix.AF_INET}
	if via.Is6() {
		r.Family = unix.AF_INET6
	}
	n.fail("route "+prefix.String()+" via "+via.String(), n.nl.RouteAdd(r))
	return n.err
}
