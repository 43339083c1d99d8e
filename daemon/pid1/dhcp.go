package pid1

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
)

// DHCPClient opens DHCPv4 sessions on network devices.
type DHCPClient interface {
	Open(dev string) (DHCPSession, error)
}

// DHCPSession holds one device's DHCPv4 client.
type DHCPSession interface {
	// Acquire runs a full discover/offer/request/ack exchange.
	Acquire(ctx context.Context) (Lease, error)
	// Renew extends the lease last acquired or renewed.
	Renew(ctx context.Context) (Lease, error)
	Close() error
}

// ErrLeaseRefused is a renewal the server answered with a NAK: the address is no longer
// the client's, so it starts over at once instead of retrying (RFC 2131 3.2).
var ErrLeaseRefused = errors.New("the server refused the lease")

// Lease is what a DHCPv4 server granted.
type Lease struct {
	Address  netip.Prefix
	Router   netip.Addr // zero when the server gave none
	DNS      []netip.Addr
	Duration time.Duration // how long the address is valid from the grant
	Renew    time.Duration // when to renew, from the grant (T1)
}

// leaseKeeper keeps one device's lease: the first acquisition happens during boot, the
// renewals (and new acquisitions after a lease ran out) under the supervisor.
type leaseKeeper struct {
	m       *Machine
	dev     string
	session DHCPSession
	lease   Lease
	granted time.Time
	have    bool
}

func (k *leaseKeeper) acquire(ctx context.Context) error {
	if k.session == nil {
		s, err := k.m.sys.DHCP.Open(k.dev)
		if err != nil {
			return fmt.Errorf("dhcp on %s: %w", k.dev, err)
		}
		k.session = s
	}
	l, err := k.session.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("dhcp on %s: %w", k.dev, err)
	}
	k.lease, k.granted, k.have = l, time.Now(), true
	k.m.log.Info("DHCP lease", "dev", k.dev, "addr", l.Address, "router", l.Router, "dns", l.DNS, "valid", l.Duration)
	if err := k.m.applyLease(k.dev, l, true); err != nil {
		return fmt.Errorf("dhcp on %s: %w", k.dev, err)
	}
	return nil
}

// run renews the lease at its renewal time until ctx ends. When renewals fail it retries at
// half the remaining time (RFC 2131 4.4.5, bounded below); once the lease has run out, or
// the server refused it, it returns an error so the supervisor starts over with a new
// acquisition, with backoff.
func (k *leaseKeeper) run(ctx context.Context) error {
	defer func() {
		if ctx.Err() != nil && k.session != nil {
			_ = k.session.Close()
			k.session, k.have = nil, false
		}
	}()
	if !k.have {
		if err := k.acquire(ctx); err != nil {
			return err
		}
	}
	next := k.granted.Add(k.lease.Renew)
	for {
		if !sleepUntil(ctx, next) {
			return nil
		}
		l, err := k.session.Renew(ctx)
		now := time.Now()
		if err == nil {
			k.lease, k.granted = l, now
			if err := k.m.applyLease(k.dev, l, false); err != nil {
				k.m.log.Error("applying a renewed DHCP lease failed", "dev", k.dev, "err", err)
			}
			next = now.Add(l.Renew)
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		expiry := k.granted.Add(k.lease.Duration)
		if !now.Before(expiry) || errors.Is(err, ErrLeaseRefused) {
			k.have = false
			return fmt.Errorf("dhcp lease of %s on %s is gone: %w", k.lease.Address, k.dev, err)
		}
		wait := min(max(expiry.Sub(now)/2, k.m.timing.dhcpRetry), expiry.Sub(now))
		next = now.Add(wait)
		k.m.log.Warn("DHCP renewal failed; retrying", "dev", k.dev, "err", err, "in", next.Sub(now).Round(time.Second), "expires", expiry)
	}
}

// sleepUntil waits for t or ctx, and reports whether t came first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// nclient4DHCP is the DHCPClient of the real network: insomniacslk/dhcp's nclient4, which
// talks over a raw socket so the device needs no address yet.
type nclient4DHCP struct{}

func (nclient4DHCP) Open(dev string) (DHCPSession, error) {
	c, err := nclient4.New(dev)
	if err != nil {
		return nil, err
	}
	return &nclient4Session{c: c}, nil
}

type nclient4Session struct {
	c     *nclient4.Client
	lease *nclient4.Lease
}

func (s *nclient4Session) Acquire(ctx context.Context) (Lease, error) {
	l, err := s.c.Request(ctx)
	if err != nil {
		return Lease{}, err
	}
	s.lease = l
	return leaseFromACK(l.ACK)
}

func (s *nclient4Session) Renew(ctx context.Context) (Lease, error) {
	if s.lease == nil {
		return Lease{}, errors.New("no lease to renew")
	}
	l, err := s.c.Renew(ctx, s.lease)
	var nak *nclient4.ErrNak
	if errors.As(err, &nak) {
		return Lease{}, fmt.Errorf("%w: %v", ErrLeaseRefused, err)
	}
	if err != nil {
		return Lease{}, err
	}
	s.lease = l
	return leaseFromACK(l.ACK)
}

func (s *nclient4Session) Close() error { return s.c.Close() }

// leaseFromACK converts the server's ACK at the edge.
func leaseFromACK(ack *dhcpv4.DHCPv4) (Lease, error) {
	ip, ok := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if !ok || ip.IsUnspecified() {
		return Lease{}, fmt.Errorf("ack without an address: %v", ack.YourIPAddr)
	}
	mask := ack.SubnetMask()
	if mask == nil {
		mask = ack.YourIPAddr.DefaultMask()
	}
	bits, _ := mask.Size()
	l := Lease{Address: netip.PrefixFrom(ip, bits)}
	if routers := ack.Router(); len(routers) > 0 {
		l.Router = addrOf(routers[0])
	}
	for _, d := range ack.DNS() {
		if a := addrOf(d); a.IsValid() {
			l.DNS = append(l.DNS, a)
		}
	}
	// The kernel holds lifetimes in 32-bit seconds; all ones means forever.
	l.Duration = min(ack.IPAddressLeaseTime(time.Hour), math.MaxUint32*time.Second)
	l.Renew = ack.IPAddressRenewalTime(l.Duration / 2)
	return l, nil
}

func addrOf(ip net.IP) netip.Addr {
	if v4 := ip.To4(); v4 != nil {
		a, _ := netip.AddrFromSlice(v4)
		return a
	}
	a, _ := netip.AddrFromSlice(ip)
	return a
}
