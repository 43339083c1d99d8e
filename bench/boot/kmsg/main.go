// Command kmsg is the boot benchmark's program inside the guest: the firmware runs it as its
// test binary once EDGEGATE-READY is out. It prints the kernel log's records that place the
// boot on the kernel's clock, one line each: marker (boot.KmsgMarker), the record's time in
// µs since the kernel started, its text. The console does not show them: the firmware boots
// with "quiet", and PID 1 keeps its own records from being echoed there.
//
// It imports nothing of the benchmark: it rides in the initramfs whose unpacking is part of
// the boot being measured, so it stays as small as a Go program gets.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// marker is boot.KmsgMarker (boot's test checks they agree).
const marker = "EGBENCH-KMSG "

// wanted are the texts whose records are printed.
var wanted = []string{"Linux version", "Run /init as init process", "EDGEGATE-"}

func main() {
	// Raw system calls: an os.File would hand a non-blocking descriptor to the runtime's
	// poller, and its Read would wait for new records instead of reporting the end.
	fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		fmt.Println("kmsg: open /dev/kmsg:", err)
		os.Exit(1)
	}
	defer syscall.Close(fd)
	buf := make([]byte, 8192)
	for {
		// One record per read: "<priority>,<sequence>,<µs>,<flags>;<text>\n" with
		// continuation lines after it.
		n, err := syscall.Read(fd, buf)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return // read to the end
		case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EINTR):
			continue // records overwritten while reading: go on with the next
		case err != nil:
			fmt.Println("kmsg: read /dev/kmsg:", err)
			os.Exit(1)
		case n <= 0:
			return
		}
		head, text, ok := bytes.Cut(buf[:n], []byte(";"))
		if !ok {
			continue
		}
		fields := strings.Split(string(head), ",")
		if len(fields) < 3 {
			continue
		}
		line, _, _ := strings.Cut(string(text), "\n")
		for _, w := range wanted {
			if strings.Contains(line, w) {
				fmt.Printf("%s%s %s\n", marker, fields[2], line)
				break
			}
		}
	}
}
