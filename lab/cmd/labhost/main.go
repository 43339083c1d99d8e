// Command labhost is the backend process of the demo lab: it answers HTTP on a TCP port and
// datagrams on a UDP port with its name and the source address it saw (package whoami), so
// the demo can show which backend the gateway picked.
//
//	labhost serve -name backend-1 -tcp :8080 -udp :5353
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/edgegate/edgegate/lab/whoami"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: labhost serve -name NAME [-tcp :8080] [-udp :5353]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	name := fs.String("name", "", "name to answer with (required)")
	tcpAddr := fs.String("tcp", ":8080", "TCP address for HTTP")
	udpAddr := fs.String("udp", ":5353", "UDP address for the datagram echo")
	_ = fs.Parse(os.Args[2:])
	if *name == "" {
		fmt.Fprintln(os.Stderr, "labhost serve: -name is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, log.With("backend", *name), *name, *tcpAddr, *udpAddr); err != nil {
		log.Error("labhost failed", "err", err)
		os.Exit(1)
	}
}

// serve answers on both ports until ctx is done.
func serve(ctx context.Context, log *slog.Logger, name, tcpAddr, udpAddr string) error {
	ln, err := net.Listen("tcp", tcpAddr)
	if err != nil {
		return fmt.Errorf("listen tcp: %w", err)
	}
	pc, err := net.ListenPacket("udp", udpAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen udp: %w", err)
	}
	srv := &http.Server{Handler: whoami.Handler(name), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- whoami.ServeUDP(pc, name) }()
	log.Info("serving", "tcp", ln.Addr().String(), "udp", pc.LocalAddr().String())

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	pc.Close()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}
