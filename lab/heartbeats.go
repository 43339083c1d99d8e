package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/ipv4"

	"github.com/edgegate/edgegate/daemon/lb/member"
)

// HeartbeatTap is a host on a site's segment as an attacker of the gateways' heartbeats
// sees it: it hears what they multicast on its eth0 and multicasts what it likes there.
type HeartbeatTap struct {
	conn *net.UDPConn
	pc   *ipv4.PacketConn
	dst  *net.UDPAddr
	done sync.WaitGroup

	mu  sync.Mutex
	got []CapturedHeartbeat
}

// CapturedHeartbeat is one datagram heard, as sent, with what its body says (unchecked).
type CapturedHeartbeat struct {
	From netip.Addr
	Data []byte
	member.Heartbeat
}

// TapHeartbeats joins the heartbeats' group on h's eth0 (its own socket, in h's namespace);
// Close ends it.
func (h *Host) TapHeartbeats() (*HeartbeatTap, error) {
	tap := &HeartbeatTap{dst: &net.UDPAddr{IP: member.DefaultGroup.AsSlice(), Port: member.DefaultPort}}
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{Port: member.DefaultPort})
		if err != nil {
			return err
		}
		pc := ipv4.NewPacketConn(conn)
		err = errors.Join(pc.JoinGroup(ifi, &net.UDPAddr{IP: tap.dst.IP}), pc.SetMulticastInterface(ifi),
			pc.SetMulticastTTL(1), pc.SetMulticastLoopback(false))
		if err != nil {
			conn.Close()
			return err
		}
		tap.conn, tap.pc = conn, pc
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: heartbeat tap: %w", h.Name, err)
	}
	tap.done.Go(tap.listen)
	return tap, nil
}

func (tap *HeartbeatTap) listen() {
	buf := make([]byte, 1<<16)
	for {
		n, from, err := tap.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // closed
		}
		c := CapturedHeartbeat{From: from.Addr().Unmap(), Data: append([]byte(nil), buf[:n]...)}
		body, _, _ := strings.Cut(string(c.Data), "\n")
		if json.Unmarshal([]byte(body), &c.Heartbeat) != nil {
			continue
		}
		tap.mu.Lock()
		tap.got = append(tap.got, c)
		tap.mu.Unlock()
	}
}

// Captured returns the heartbeats heard from addr that match keep, in the order heard.
func (tap *HeartbeatTap) Captured(addr netip.Addr, keep func(member.Heartbeat) bool) []CapturedHeartbeat {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	var out []CapturedHeartbeat
	for _, c := range tap.got {
		if c.From == addr && keep(c.Heartbeat) {
			out = append(out, c)
		}
	}
	return out
}

// Send multicasts one datagram on the segment.
func (tap *HeartbeatTap) Send(b []byte) error {
	_, err := tap.pc.WriteTo(b, nil, tap.dst)
	return err
}

// Close stops hearing and sending.
func (tap *HeartbeatTap) Close() {
	tap.conn.Close()
	tap.done.Wait()
}
