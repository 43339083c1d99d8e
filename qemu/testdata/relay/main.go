// Command relay joins its standard input and output to a TCP connection: QEMU's user-mode
// network runs it for each connection a guest opens to a guestfwd address
// (guestfwd=tcp:10.0.2.100:6443-cmd:relay 127.0.0.1:PORT), so a guest without any route to
// the outside (restrict=on) reaches exactly one service on the host's loopback.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: relay 127.0.0.1:PORT")
		os.Exit(2)
	}
	conn, err := net.Dial("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(1)
	}
	go func() {
		_, _ = io.Copy(conn, os.Stdin)
		// The guest closed its side: tell the service, and keep reading its answer.
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	// The service's side ending ends the relay, and with it the guest's connection.
	_, _ = io.Copy(os.Stdout, conn)
}
