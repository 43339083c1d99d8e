package lab

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/edgegate/edgegate/lab/whoami"
)

// startBackend serves package whoami on BackendTCPPort (HTTP) and BackendUDPPort inside b's
// namespace, on both IPv4 and IPv6 (dual-stack sockets), until the test ends.
func startBackend(t testing.TB, b *Host) {
	t.Helper()
	var ln net.Listener
	var pc net.PacketConn
	err := b.Do(func() error {
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
		t.Fatalf("start %s: %v", b.Name, err)
	}
	srv := &http.Server{Handler: whoami.Handler(b.Name), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- whoami.ServeUDP(pc, b.Name) }()
	t.Cleanup(func() {
		srv.Close()
		pc.Close()
		for range 2 {
			if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("%s stopped serving: %v", b.Name, err)
			}
		}
	})
}
