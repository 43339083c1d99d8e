package pid1

import (
	"bytes"
	"errors"
	"strings"

	"golang.org/x/sys/unix"
)

// ueventBuffer is the socket's receive buffer: a boot's burst of device events (a USB hub
// with its ports, a disk with its partitions) must fit while PID 1 loads a driver.
const ueventBuffer = 4 << 20

// netlinkUevents is the kernel's device event stream: a NETLINK_KOBJECT_UEVENT socket
// bound to the kernel's multicast group (1; udevd's own messages go to group 2).
type netlinkUevents struct{}

func (netlinkUevents) Listen() (<-chan Uevent, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, err
	}
	// FORCE: PID 1 may exceed rmem_max; a smaller buffer only loses events sooner, and a
	// loss is noticed (ENOBUFS) and made up for by looking at every device again.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, ueventBuffer); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, ueventBuffer)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	events := make(chan Uevent, 64)
	go func() {
		defer close(events)
		defer unix.Close(fd)
		buf := make([]byte, 64<<10)
		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			switch {
			case errors.Is(err, unix.EINTR):
				continue
			case errors.Is(err, unix.ENOBUFS):
				events <- Uevent{Action: ueventOverflow}
				continue
			case err != nil:
				return
			}
			if ev, ok := parseUevent(buf[:n]); ok {
				events <- ev
			}
		}
	}()
	return events, nil
}

// parseUevent reads one kernel uevent message: "<action>@<devpath>", then NUL-separated
// KEY=VALUE pairs. ok is false for anything else (udevd's "libudev" messages).
func parseUevent(msg []byte) (ev Uevent, ok bool) {
	fields := bytes.Split(msg, []byte{0})
	head := string(fields[0])
	action, devpath, found := strings.Cut(head, "@")
	if !found || action == "" || !strings.HasPrefix(devpath, "/") {
		return Uevent{}, false
	}
	ev = Uevent{Action: action, DevPath: devpath}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(string(f), "=")
		switch k {
		case "ACTION":
			ev.Action = v
		case "DEVPATH":
			ev.DevPath = v
		case "SUBSYSTEM":
			ev.Subsystem = v
		case "MODALIAS":
			ev.Modalias = v
		}
	}
	return ev, true
}
