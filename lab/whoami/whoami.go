// Package whoami is the lab backends' answer protocol: every HTTP request and every UDP
// datagram is answered with one line, "<backend name> <source address>", so a test can tell
// which endpoint a proxied flow reached and whether the gateway masqueraded it.
package whoami

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Reply is what a backend answered.
type Reply struct {
	Backend string     // the backend's name, e.g. "backend-2"
	Source  netip.Addr // the source address the backend saw
}

func (r Reply) String() string { return r.Backend + " " + r.Source.String() }

// Parse reads one answer line.
func Parse(line string) (Reply, error) {
	name, src, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok || name == "" {
		return Reply{}, fmt.Errorf("parse whoami answer %q: want \"<name> <address>\"", line)
	}
	a, err := netip.ParseAddr(src)
	if err != nil {
		return Reply{}, fmt.Errorf("parse whoami answer %q: %w", line, err)
	}
	return Reply{Backend: name, Source: a.Unmap()}, nil
}

// Handler answers every HTTP request with the backend's name and the request's source address.
func Handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			http.Error(w, "bad remote address "+r.RemoteAddr, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, Reply{Backend: name, Source: ap.Addr().Unmap()})
	})
}

// ServeUDP answers every datagram read from conn until conn is closed; it returns nil then.
func ServeUDP(conn net.PacketConn, name string) error {
	buf := make([]byte, 2048)
	for {
		_, from, err := conn.ReadFrom(buf)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read udp: %w", err)
		}
		ua, ok := from.(*net.UDPAddr)
		if !ok {
			continue
		}
		ap := ua.AddrPort()
		answer := Reply{Backend: name, Source: ap.Addr().Unmap()}.String() + "\n"
		// A client that went away makes WriteTo fail; that is no reason to stop answering others.
		if _, err := conn.WriteTo([]byte(answer), from); errors.Is(err, net.ErrClosed) {
			return nil
		}
	}
}
