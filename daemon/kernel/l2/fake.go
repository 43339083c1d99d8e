package l2

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// Fake is Sockets without a kernel: interfaces the test adds, sockets whose reads it
// feeds and whose writes it reads back as text.
type Fake struct {
	mu     sync.Mutex
	ifs    map[string]net.Interface
	arp    map[string]*FakeARP
	ndp    map[string]*FakeNDP
	closed bool
}

var (
	_ Sockets = (*Fake)(nil)
	_ ARPConn = (*FakeARP)(nil)
	_ NDPConn = (*FakeNDP)(nil)
)

// NewFake returns a Fake without interfaces.
func NewFake() *Fake {
	return &Fake{ifs: map[string]net.Interface{}, arp: map[string]*FakeARP{}, ndp: map[string]*FakeNDP{}}
}

// SetInterface adds ifi, or replaces the interface of that name.
func (f *Fake) SetInterface(ifi net.Interface) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ifs[ifi.Name] = ifi
}

func (f *Fake) Interfaces() (map[string]net.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, net.ErrClosed
	}
	return maps.Clone(f.ifs), nil
}

func (f *Fake) ListenARP(ifi net.Interface) (ARPConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &FakeARP{fakeConn: newFakeConn(ifi.Name)}
	f.arp[ifi.Name] = c
	return c, nil
}

func (f *Fake) ListenNDP(ifi net.Interface) (NDPConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &FakeNDP{fakeConn: newFakeConn(ifi.Name), groups: map[netip.Addr]int{}}
	f.ndp[ifi.Name] = c
	return c, nil
}

func (f *Fake) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

// ARP is the last ARP socket opened on the interface name, nil if none was.
func (f *Fake) ARP(name string) *FakeARP {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.arp[name]
}

// NDP is the last NDP socket opened on the interface name, nil if none was.
func (f *Fake) NDP(name string) *FakeNDP {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ndp[name]
}

// fakeConn is what both fake sockets share: a queue of frames to read, the lines written.
type fakeConn struct {
	name   string
	in     chan func() // each returns the next read through the socket's own type
	done   chan struct{}
	mu     sync.Mutex
	sent   []string
	closed bool
}

func newFakeConn(name string) fakeConn {
	return fakeConn{name: name, in: make(chan func(), 16), done: make(chan struct{})}
}

func (c *fakeConn) wait() (func(), error) {
	select {
	case fn := <-c.in:
		return fn, nil
	case <-c.done:
		return nil, net.ErrClosed
	}
}

func (c *fakeConn) record(line string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	c.sent = append(c.sent, line)
	return nil
}

// Sent returns the frames written since the last call, one line each, and forgets them.
func (c *fakeConn) Sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sent
	c.sent = nil
	return s
}

// Closed reports whether the socket was closed.
func (c *fakeConn) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *fakeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.done)
	}
	return nil
}

// FakeARP is a fake ARP socket.
type FakeARP struct {
	fakeConn
	next ARP
}

// Receive queues p for Read.
func (c *FakeARP) Receive(p ARP) { c.in <- func() { c.next = p } }

func (c *FakeARP) Read() (ARP, error) {
	fn, err := c.wait()
	if err != nil {
		return ARP{}, err
	}
	fn()
	return c.next, nil
}

func (c *FakeARP) Write(p ARP, to MAC) error { return c.record(FormatARP(p, to)) }

// FormatARP is how FakeARP shows a frame it sent: "to MAC: op sender-MAC sender-IP
// target-MAC target-IP".
func FormatARP(p ARP, to MAC) string {
	op := fmt.Sprintf("op%d", p.Op)
	switch p.Op {
	case ARPRequest:
		op = "request"
	case ARPReply:
		op = "reply"
	}
	return fmt.Sprintf("%s %s: %s %s %s %s", op, to, p.SenderMAC, p.SenderIP, p.TargetMAC, p.TargetIP)
}

// FakeNDP is a fake NDP socket.
type FakeNDP struct {
	fakeConn
	next   Solicitation
	from   MAC
	groups map[netip.Addr]int
}

// Receive queues s, in a frame from the Ethernet address from, for Read.
func (c *FakeNDP) Receive(s Solicitation, from MAC) {
	c.in <- func() { c.next, c.from = s, from }
}

func (c *FakeNDP) Read() (Solicitation, MAC, error) {
	fn, err := c.wait()
	if err != nil {
		return Solicitation{}, MAC{}, err
	}
	fn()
	return c.next, c.from, nil
}

func (c *FakeNDP) Write(a Advertisement, to MAC) error { return c.record(FormatNA(a, to)) }

// FormatNA is how FakeNDP shows an advertisement it sent: "na to MAC: src > dst target
// flags target-MAC".
func FormatNA(a Advertisement, to MAC) string {
	flags := ""
	if a.Solicited {
		flags += "S"
	}
	if a.Override {
		flags += "O"
	}
	return fmt.Sprintf("na %s: %s > %s %s [%s] %s", to, a.Src, a.Dst, a.Target, flags, a.TargetLL)
}

func (c *FakeNDP) Join(addr netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.groups[SolicitedNode(addr)]++
	return nil
}

func (c *FakeNDP) Leave(addr netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := SolicitedNode(addr)
	if c.groups[g]--; c.groups[g] <= 0 {
		delete(c.groups, g)
	}
	return nil
}

// Groups lists the solicited-node groups joined, sorted, as text.
func (c *FakeNDP) Groups() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for _, g := range slices.SortedFunc(maps.Keys(c.groups), netip.Addr.Compare) {
		s = append(s, g.String())
	}
	return strings.Join(s, " ")
}
