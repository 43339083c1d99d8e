package dashboard

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"

	"github.com/edgegate/edgegate/daemon/listener"
)

// NodeIPHost is the host of --dashboard-bind-address that stands for each --node-ip.
const NodeIPHost = "node-ip"

// DefaultAllowedCIDRs are the sources the management plane answers by default: the private
// and link-local ranges a site's management network uses, never the internet a gateway's
// client side faces. Loopback and the gateway's own addresses are always allowed.
var DefaultAllowedCIDRs = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "fe80::/10"}

// Bind is one address the dashboard listens on.
type Bind struct {
	Addr string // host:port
}

// Loopback reports whether the bind is a loopback address, the only place plain HTTP is
// served.
func (b Bind) Loopback() bool { return loopbackAddr(b.Addr) }

func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// ResolveBinds turns --dashboard-bind-address into the addresses to listen on. NodeIPHost
// becomes each node IP but those that skip names (an interface carrying LoadBalancer
// pools); with none left it becomes 127.0.0.1, failing closed rather than opening every
// interface. notes say what was left out and why, for the log.
func ResolveBinds(spec string, nodeIPs []netip.Addr, skip func(netip.Addr) string) (binds []Bind, notes []string, err error) {
	if spec == "" {
		return nil, nil, nil
	}
	host, port, err := net.SplitHostPort(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("--dashboard-bind-address %q: %w", spec, err)
	}
	if host != NodeIPHost {
		return []Bind{{Addr: spec}}, nil, nil
	}
	for _, a := range nodeIPs {
		if why := skip(a); why != "" {
			notes = append(notes, fmt.Sprintf("not on node IP %s: %s (--dashboard-on-lb-interfaces allows it)", a, why))
			continue
		}
		binds = append(binds, Bind{Addr: net.JoinHostPort(a.String(), port)})
	}
	if len(binds) == 0 {
		if len(nodeIPs) == 0 {
			notes = append(notes, "no --node-ip: the dashboard listens on loopback only (set --node-ip or --dashboard-bind-address)")
		} else {
			notes = append(notes, "no node IP left: the dashboard listens on loopback only")
		}
		binds = []Bind{{Addr: net.JoinHostPort("127.0.0.1", port)}}
	}
	return binds, notes, nil
}

// ParseCIDRs parses an allow-list strictly: an entry that does not parse is an error, never
// skipped, since skipping it would change who is let in.
func ParseCIDRs(field string, cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q: %w", field, s, err))
			continue
		}
		// An IPv4-mapped prefix means the IPv4 one: IPv4 packets and sockets' IPv4
		// peers carry no mapping.
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out, errors.Join(errs...)
}

// SourceAllowed reports whether the management plane answers a connection from src to
// local: from loopback, from the gateway itself, or from an allowed prefix.
func SourceAllowed(src, local netip.Addr, allowed []netip.Prefix) bool {
	src, local = src.Unmap(), local.Unmap()
	if src.IsLoopback() || src == local {
		return true
	}
	for _, p := range allowed {
		if p.Contains(src) {
			return true
		}
	}
	return false
}

// Listen opens the dashboard's listener on b: plain HTTP only on a loopback address, TLS
// with tlsConfig on every other. Connections from outside allowed are closed before a
// byte is read (the kernel drops them first where its allow-list table is in place).
//
// A gate, when given, counts the allowed connections before their TLS handshake: the server
// bounds a handshake only on the *tls.Conn the listener returns, unwrapped.
func Listen(b Bind, tlsConfig *tls.Config, allowed []netip.Prefix, gate *listener.Gate, log *slog.Logger) (net.Listener, error) {
	if !b.Loopback() && tlsConfig == nil {
		return nil, fmt.Errorf("dashboard %s: plain HTTP is served on loopback only, and there is no certificate", b.Addr)
	}
	ln, err := net.Listen("tcp", b.Addr)
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	ln = &allowListener{Listener: ln, allowed: allowed, log: log}
	if gate != nil {
		ln = gate.Listen(ln)
	}
	if b.Loopback() {
		return ln, nil
	}
	return tls.NewListener(ln, tlsConfig), nil
}

// allowListener closes the connections of sources outside the allow-list.
type allowListener struct {
	net.Listener
	allowed []netip.Prefix
	log     *slog.Logger
}

func (l *allowListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, local := addrOf(c.RemoteAddr()), addrOf(c.LocalAddr())
		if SourceAllowed(src, local, l.allowed) {
			return c, nil
		}
		// Debug: whoever is refused must not be able to fill the log.
		l.log.Debug("dashboard connection refused: source outside --dashboard-allowed-cidrs", "from", c.RemoteAddr().String())
		_ = c.Close()
	}
}

func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr()
}

// BindPorts returns the address and port of each bind that is not loopback, for the
// kernel's allow-list; an unspecified host (every interface) is returned as such.
func BindPorts(binds []Bind) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, b := range binds {
		if b.Loopback() {
			continue
		}
		host, p, err := net.SplitHostPort(b.Addr)
		if err != nil {
			return nil, err
		}
		port, err := strconv.ParseUint(p, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("dashboard %s: port: %w", b.Addr, err)
		}
		if host == "" {
			// Go listens on both families for ":port".
			out = append(out, netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port)), netip.AddrPortFrom(netip.IPv6Unspecified(), uint16(port)))
			continue
		}
		a, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", b.Addr, err)
		}
		out = append(out, netip.AddrPortFrom(a.Unmap(), uint16(port)))
	}
	return out, nil
}
