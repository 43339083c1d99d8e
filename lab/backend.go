package lab

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/edgegate/edgegate/lab/whoami"
)

// serveBackend serves package whoami on BackendTCPPort (HTTP) and BackendUDPPort inside b's
// namespace, on both IPv4 and IPv6 (dual-stack sockets), until stop is called.
func serveBackend(b *Host) (stop func() error, err error) {
	var ln net.Listener
	var pc net.PacketConn
	err = b.Do(func() error {
		var err error
		if ln, err = net.Listen("tcp", fmt.Sprintf(":%d", BackendTCPPort)); err != nil {
			return err
		}
		if pc, err = net.ListenPacket("udp", fmt.Sprintf(":%d", BackendUDPPort)); err != nil {
			ln.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", b.Name, err)
	}
	srv := &http.Server{Handler: whoami.Handler(b.Name), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- whoami.ServeUDP(pc, b.Name) }()
	return func() error {
		srv.Close()
		pc.Close()
		var errs []error
		for range 2 {
			if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
				errs = append(errs, fmt.Errorf("%s stopped serving: %w", b.Name, err))
			}
		}
		return errors.Join(errs...)
	}, nil
}
