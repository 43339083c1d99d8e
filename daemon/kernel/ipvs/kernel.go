package ipvs

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"

	moby "github.com/moby/ipvs"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/model"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// IPVS service flags (include/uapi/linux/ip_vs.h).
const (
	flagPersistent = 0x0001
	flagHashed     = 0x0002
)

// procIPVS exists in every network namespace once ip_vs is loaded (or built in).
const procIPVS = "/proc/net/ip_vs"

// Available reports, with ErrNotAvailable, whether the kernel has IPVS now. It loads nothing.
func Available() error {
	if _, err := os.Stat(procIPVS); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotAvailable, procIPVS, err)
	}
	return nil
}

// Kernel is the IPVS table of the calling thread's network namespace, through moby/ipvs.
type Kernel struct {
	mu sync.Mutex
	h  *moby.Handle
}

var _ IPVS = (*Kernel)(nil)

var (
	setupMu   sync.Mutex
	setupDone bool
)

// Open opens the IPVS table. Without IPVS in the kernel it fails with ErrNotAvailable and
// touches nothing: moby/ipvs, on the first handle of a process, looks up the generic
// netlink family once and for all, so a handle made before ip_vs is loaded would stay
// broken (its calls "succeed" without effect) even after.
func Open() (*Kernel, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	h, err := newHandle()
	if err != nil {
		return nil, fmt.Errorf("open ipvs: %w", err)
	}
	return &Kernel{h: h}, nil
}

// newHandle makes a moby/ipvs handle. moby/ipvs v1.1.0 runs `modprobe -va ip_vs` when the
// first handle of the process is made; edgegate never execs modprobe (as PID 1 it reaps
// every child, and the firmware has no modprobe), so that first handle is made with an
// empty PATH, where the lookup fails before any fork, and with moby's logrus warning
// about it silenced. Nothing else in edgegate execs, so the brief PATH change races with
// nobody.
func newHandle() (*moby.Handle, error) {
	setupMu.Lock()
	defer setupMu.Unlock()
	if setupDone {
		return moby.New("")
	}
	path, hadPath := os.LookupEnv("PATH")
	out := logrus.StandardLogger().Out
	os.Setenv("PATH", "")
	logrus.SetOutput(io.Discard)
	h, err := moby.New("")
	logrus.SetOutput(out)
	if hadPath {
		os.Setenv("PATH", path)
	} else {
		os.Unsetenv("PATH")
	}
	setupDone = true
	return h, err
}

// Close releases the netlink socket; the virtual servers stay.
func (k *Kernel) Close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.h.Close()
}

func protoNumber(p model.Protocol) uint16 { return uint16(p.Number()) }

func protoOf(n uint16) (model.Protocol, bool) {
	switch n {
	case unix.IPPROTO_TCP:
		return model.TCP, true
	case unix.IPPROTO_UDP:
		return model.UDP, true
	case unix.IPPROTO_SCTP:
		return model.SCTP, true
	}
	return "", false
}

func family(a netip.Addr) uint16 {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func toMobyService(s Service) *moby.Service {
	ms := &moby.Service{
		Address:       net.IP(s.Addr.AsSlice()),
		Protocol:      protoNumber(s.Proto),
		Port:          s.Port,
		SchedName:     s.Scheduler,
		AddressFamily: family(s.Addr),
		// Persistence per client address: the netmask is /32, or for IPv6 the prefix length.
		Netmask: 0xffffffff,
	}
	if !s.Addr.Is4() {
		ms.Netmask = 128
	}
	if s.Persistent() {
		ms.Flags, ms.Timeout = flagPersistent, s.Timeout
	}
	return ms
}

// fromMobyService converts a kernel virtual server; ok is false for one edgegate never makes.
func fromMobyService(ms *moby.Service) (Service, bool) {
	proto, ok := protoOf(ms.Protocol)
	a, okAddr := netip.AddrFromSlice(ms.Address)
	if !ok || !okAddr || ms.FWMark != 0 {
		return Service{}, false
	}
	s := Service{VSKey: ipvsplan.VSKey{Addr: a.Unmap(), Proto: proto, Port: ms.Port}, Scheduler: ms.SchedName,
		Stats: Counters{Connections: ms.Stats.Connections, PacketsIn: ms.Stats.PacketsIn, PacketsOut: ms.Stats.PacketsOut,
			BytesIn: ms.Stats.BytesIn, BytesOut: ms.Stats.BytesOut}}
	if ms.Flags&flagPersistent != 0 {
		s.Timeout = ms.Timeout
	}
	return s, true
}

func toMobyDest(d Destination) *moby.Destination {
	return &moby.Destination{
		Address:         net.IP(d.Addr.AsSlice()),
		Port:            d.Port,
		Weight:          d.Weight,
		ConnectionFlags: uint32(d.Forward),
		AddressFamily:   family(d.Addr),
	}
}

func fromMobyDest(md *moby.Destination) (Destination, bool) {
	a, ok := netip.AddrFromSlice(md.Address)
	if !ok {
		return Destination{}, false
	}
	return Destination{Addr: a.Unmap(), Port: md.Port, Weight: md.Weight, Forward: Forward(md.ConnectionFlags & moby.ConnFwdMask),
		ActiveConns: md.ActiveConnections, InactiveConns: md.InactiveConnections,
		Stats: Counters{Connections: md.Stats.Connections, PacketsIn: md.Stats.PacketsIn, PacketsOut: md.Stats.PacketsOut,
			BytesIn: md.Stats.BytesIn, BytesOut: md.Stats.BytesOut}}, true
}

// GetServices implements IPVS.
func (k *Kernel) GetServices() ([]Service, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ms, err := k.h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("get virtual servers: %w", err)
	}
	var out []Service
	for _, m := range ms {
		if s, ok := fromMobyService(m); ok {
			// Every virtual server the kernel holds is hashed into its table; one that is
			// not was not really created (kube-proxy checks the same).
			if m.Flags&flagHashed == 0 {
				return nil, fmt.Errorf("virtual server %s: kernel reports it unhashed (flags %#x)", s.VSKey, m.Flags)
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// GetDestinations implements IPVS.
func (k *Kernel) GetDestinations(s Service) ([]Destination, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	md, err := k.h.GetDestinations(toMobyService(s))
	if err != nil {
		return nil, fmt.Errorf("get real servers of %s: %w", s.VSKey, err)
	}
	var out []Destination
	for _, m := range md {
		if d, ok := fromMobyDest(m); ok {
			out = append(out, d)
		}
	}
	return out, nil
}

func (k *Kernel) do(what string, s Service, fn func(*moby.Service) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := fn(toMobyService(s)); err != nil {
		return fmt.Errorf("%s %s: %w", what, s.VSKey, err)
	}
	return nil
}

func (k *Kernel) doDest(what string, s Service, d Destination, fn func(*moby.Service, *moby.Destination) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := fn(toMobyService(s), toMobyDest(d)); err != nil {
		return fmt.Errorf("%s %s -> %s: %w", what, s.VSKey, d.AddrPort(), err)
	}
	return nil
}

// NewService implements IPVS.
func (k *Kernel) NewService(s Service) error { return k.do("create virtual server", s, k.h.NewService) }

// UpdateService implements IPVS.
func (k *Kernel) UpdateService(s Service) error {
	return k.do("update virtual server", s, k.h.UpdateService)
}

// DelService implements IPVS.
func (k *Kernel) DelService(s Service) error { return k.do("delete virtual server", s, k.h.DelService) }

// NewDestination implements IPVS.
func (k *Kernel) NewDestination(s Service, d Destination) error {
	return k.doDest("add real server", s, d, k.h.NewDestination)
}

// UpdateDestination implements IPVS.
func (k *Kernel) UpdateDestination(s Service, d Destination) error {
	return k.doDest("update real server", s, d, k.h.UpdateDestination)
}

// DelDestination implements IPVS.
func (k *Kernel) DelDestination(s Service, d Destination) error {
	return k.doDest("delete real server", s, d, k.h.DelDestination)
}

// Flush implements IPVS.
func (k *Kernel) Flush() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.h.Flush(); err != nil {
		return fmt.Errorf("flush ipvs: %w", err)
	}
	return nil
}

// notFound reports errors that mean the object is already gone.
func notFound(err error) bool { return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) }

// exists reports errors that mean the object is already there.
func exists(err error) bool { return errors.Is(err, unix.EEXIST) }
