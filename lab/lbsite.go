package lab

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// SitePoolsYAML is the pools file of a site's gateways: the LoadBalancer IP ranges,
// announced on the front NIC (eth0) only.
const SitePoolsYAML = `pools:
- name: site
  addresses: ["10.210.0.200-10.210.0.219", "fd00:210::200-fd00:210::21f"]
  interfaces: [eth0]
`

// Neighbor returns the MAC address h's kernel holds for addr (empty without an entry in
// a usable state).
func (h *Host) Neighbor(addr netip.Addr) (string, error) {
	var mac string
	err := h.Do(func() error {
		fam := unix.AF_INET
		if addr.Is6() {
			fam = unix.AF_INET6
		}
		neighs, err := netlink.NeighList(0, fam)
		if err != nil {
			return err
		}
		for _, n := range neighs {
			ip, _ := netip.AddrFromSlice(n.IP)
			usable := n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT) != 0
			if ip.Unmap() == addr && usable && len(n.HardwareAddr) > 0 {
				mac = n.HardwareAddr.String()
			}
		}
		return nil
	})
	return mac, err
}

// MAC returns the hardware address of h's interface name.
func (h *Host) MAC(name string) (string, error) {
	var mac string
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		mac = ifi.HardwareAddr.String()
		return nil
	})
	return mac, err
}

// ARPAnswer is one ARP reply the watch saw for its address.
type ARPAnswer struct {
	At       time.Time
	MAC      string
	Question int // the index of the question it answers
}

// arpAskers is how many sender addresses an ARPWatch asks from, in turn (see WatchARP).
const arpAskers = 64

// arpAsker is the sender address of question i: 169.254.1.0 and on, link-local (RFC 3927),
// so that it is no host's of a site.
func arpAsker(i int) netip.Addr {
	n := i % arpAskers
	return netip.AddrFrom4([4]byte{169, 254, 1, byte(n)})
}

// ARPWatch asks for one IPv4 address from a host every interval (an ARP request of its
// own, broadcast on the host's eth0) and records every reply naming the address: which
// gateway answers which question, and whether two ever answer the same one.
//
// Each question carries the host's MAC but a sender address of its own (arpAsker: link-local,
// arpAskers of them in turn, so that a host that does own the target adds at most that
// many neighbour entries), which every reply repeats as its target address: a reply is
// matched to its question exactly, however late the watch or a gateway is scheduled,
// rather than by when it arrived (a reply later than arpAskers questions would be taken
// for an answer to a later one).
type ARPWatch struct {
	target   netip.Addr
	interval time.Duration
	fd       int
	ifindex  int
	mac      net.HardwareAddr

	mu      sync.Mutex
	sent    []time.Time // by question
	answers []ARPAnswer
	stop    chan struct{}
	done    sync.WaitGroup
}

// WatchARP starts an ARPWatch in h's namespace; Stop ends it. Requests and replies stay
// on h's segment.
func (h *Host) WatchARP(target netip.Addr, interval time.Duration) (*ARPWatch, error) {
	w := &ARPWatch{target: target, interval: interval, stop: make(chan struct{})}
	err := h.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		w.ifindex, w.mac = ifi.Index, ifi.HardwareAddr
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
		if err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind packet socket to eth0: %w", err)
		}
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return err
		}
		w.fd = fd
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: ARP watch: %w", h.Name, err)
	}
	w.done.Go(w.ask)
	w.done.Go(w.listen)
	return w, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (w *ARPWatch) ask() {
	frame := make([]byte, 42)
	copy(frame[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(frame[6:12], w.mac)
	binary.BigEndian.PutUint16(frame[12:], unix.ETH_P_ARP)
	arp := frame[14:]
	binary.BigEndian.PutUint16(arp[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(arp[2:], 0x0800) // IPv4
	arp[4], arp[5] = 6, 4
	binary.BigEndian.PutUint16(arp[6:], 1) // request
	copy(arp[8:14], w.mac)
	dst := w.target.As4()
	copy(arp[24:28], dst[:])
	to := &unix.SockaddrLinklayer{Ifindex: w.ifindex, Halen: 6, Protocol: htons(unix.ETH_P_ARP)}
	copy(to.Addr[:], frame[0:6])
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		w.mu.Lock()
		i := len(w.sent)
		src := arpAsker(i).As4()
		copy(arp[14:18], src[:])
		// Recorded before it leaves: a reply never comes before its question.
		w.sent = append(w.sent, time.Now())
		if err := unix.Sendto(w.fd, frame, 0, to); err != nil {
			w.sent = w.sent[:i]
		}
		w.mu.Unlock()
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
	}
}

func (w *ARPWatch) listen() {
	buf := make([]byte, 1500)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(w.fd, buf, 0)
		if err != nil || n < 42 {
			continue // timeout: look at stop again
		}
		arp := buf[14:n]
		if binary.BigEndian.Uint16(arp[6:]) != 2 { // replies only
			continue
		}
		spa, _ := netip.AddrFromSlice(arp[14:18])
		tpa, _ := netip.AddrFromSlice(arp[24:28])
		if spa != w.target {
			continue // another address
		}
		w.mu.Lock()
		// The latest question asked from tpa; a gratuitous reply (tpa = the address
		// itself: an announcement, not an answer) matches none.
		for q := len(w.sent) - 1; q >= 0 && q >= len(w.sent)-arpAskers; q-- {
			if arpAsker(q) == tpa {
				w.answers = append(w.answers, ARPAnswer{At: time.Now(), MAC: net.HardwareAddr(arp[8:14]).String(), Question: q})
				break
			}
		}
		w.mu.Unlock()
	}
}

// Stop ends the watch.
func (w *ARPWatch) Stop() {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	w.done.Wait()
	unix.Close(w.fd)
}

// DoubleAnswers lists the questions that two different MACs answered.
func (w *ARPWatch) DoubleAnswers() []string { return w.DoubleAnswersSince(time.Time{}) }

// DoubleAnswersSince is DoubleAnswers for the questions asked since from.
func (w *ARPWatch) DoubleAnswersSince(from time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	byQuestion := map[int][]ARPAnswer{}
	for _, a := range w.answers {
		byQuestion[a.Question] = append(byQuestion[a.Question], a)
	}
	var out []string
	for q, at := range w.sent {
		macs := map[string]bool{}
		var how []string
		for _, a := range byQuestion[q] {
			macs[a.MAC] = true
			how = append(how, fmt.Sprintf("%s after %v", a.MAC, a.At.Sub(at).Round(time.Millisecond)))
		}
		if len(macs) > 1 && !at.Before(from) {
			out = append(out, fmt.Sprintf("question %d (from %s) at %s answered by %s", q, arpAsker(q), at.Format("15:04:05.000"), strings.Join(how, ", ")))
		}
	}
	return out
}

// MACsSince counts the replies that arrived since from by the MAC that sent them.
func (w *ARPWatch) MACsSince(from time.Time) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for _, a := range w.answers {
		if !a.At.Before(from) {
			out[a.MAC]++
		}
	}
	return out
}

// RepliesSince counts the replies that arrived since from.
func (w *ARPWatch) RepliesSince(from time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.answers {
		if !a.At.Before(from) {
			n++
		}
	}
	return n
}

// Answers returns how many questions were asked, and how many replies to them came.
func (w *ARPWatch) Answers() (requests, replies int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.sent), len(w.answers)
}

// AskOnce opens one new connection from h to addr and asks who answers, within timeout.
func (h *Host) AskOnce(addr string, timeout time.Duration) (Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	reply, err := (&HTTPConn{conn: c, r: bufio.NewReader(c)}).Ask()
	if err != nil {
		return Result{}, err
	}
	return Result{Outcome: Answered, Reply: reply}, nil
}

// Through waits (bounded by within) until a new connection from the client to addr, a
// LoadBalancer IP:port on the front segment, goes through gateway i (the backend sees i's
// back address) and the client's neighbour entry for the IP holds macs[i]; it returns when
// that was first seen.
func (s *Site) Through(addr string, macs []string, i int, within time.Duration) (time.Time, error) {
	ip := netip.MustParseAddrPort(addr).Addr()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		r, err := s.Client.AskOnce(addr, 200*time.Millisecond)
		at := time.Now()
		switch {
		case err != nil:
			last = err.Error()
		case r.Reply.Source != GatewayBackIPv4(i):
			last = "answered through " + r.Reply.Source.String()
		default:
			mac, err := s.Client.Neighbor(ip)
			if err == nil && mac == macs[i] {
				return at, nil
			}
			last = fmt.Sprintf("answered through gateway-%d, but the client's neighbour entry is %q (%v)", i+1, mac, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("new connections to %s not through gateway-%d within %v: %s", addr, i+1, within, last)
}
