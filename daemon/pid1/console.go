package pid1

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// maxHeldLines bounds what the console keeps back while a test binary owns it.
const maxHeldLines = 2000

// console is where PID 1 speaks: the kernel's console (fd 1 of init) and, once /dev is
// mounted, the kernel log (/dev/kmsg), so the lines outlive the console's scrollback and a
// test inside the guest can read them back.
type console struct {
	mu        sync.Mutex
	out       *os.File
	kmsg      io.Writer
	kmsgFloor int // lowest priority number written to kmsg (see attachKmsg)
	// While a test binary streams its output to the console, log lines wait here so they
	// never split the test's lines; markers are never held.
	holding bool
	held    [][]byte
	dropped int
}

func newConsole(out *os.File) *console { return &console{out: out} }

// attachKmsg makes every later line also go to the kernel log. The kernel echoes a record
// to the console when its priority is below the console log level; the floor (that level)
// keeps our records from being echoed: the line is on the console already, and an echo
// could land in the middle of a test's output.
func (c *console) attachKmsg(w io.Writer, floor int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kmsg, c.kmsgFloor = w, min(floor, kmsgDebug)
}

// marker prints one exact line that the host harness waits for (see the firmware contract),
// and records it in the kernel log.
func (c *console) marker(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = io.WriteString(c.out, line+"\n")
	if c.kmsg != nil {
		c.writeKmsg(max(kmsgInfo, c.kmsgFloor), []byte(line))
	}
}

// hold keeps log lines off the console until release.
func (c *console) hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = true
}

// release prints the lines held back, in order, and stops holding.
func (c *console) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.held {
		_, _ = c.out.Write(l)
	}
	if c.dropped > 0 {
		fmt.Fprintf(c.out, "edgegate: %d more log lines went to the kernel log only (dmesg)\n", c.dropped)
	}
	c.holding, c.held, c.dropped = false, nil, 0
}

// drain waits until the console has sent what it was given: a power-off right after a write
// would otherwise cut the last lines off a serial console.
func (c *console) drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// TCSBRK with a non-zero argument is tcdrain(3); it fails harmlessly on a non-tty.
	_ = unix.IoctlSetInt(int(c.out.Fd()), unix.TCSBRK, 1)
}

// writeLog sends one formatted log line to the console (or holds it) and to the kernel log
// at the record's priority.
func (c *console) writeLog(level slog.Level, line []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		if len(c.held) < maxHeldLines {
			c.held = append(c.held, bytes.Clone(line))
		} else {
			c.dropped++
		}
	} else {
		_, _ = c.out.Write(line)
	}
	if c.kmsg != nil {
		c.writeKmsg(max(kmsgPriority(level), c.kmsgFloor), line)
	}
}

// kmsgRecordMax keeps a record under the kernel's limit for one /dev/kmsg write (992 bytes
// on 6.1, prefix included); a longer write fails with EINVAL and the line is lost.
const kmsgRecordMax = 960

// writeKmsg writes one line as kernel log records, one write each, cutting a long line
// (a panic's stack) into several. Call with mu held.
func (c *console) writeKmsg(priority int, line []byte) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	prefix := fmt.Sprintf("<%d>edgegate: ", priority)
	for first := true; first || len(line) > 0; first = false {
		if !first {
			prefix = fmt.Sprintf("<%d>edgegate: … ", priority)
		}
		n := min(len(line), kmsgRecordMax-len(prefix)-1)
		for n < len(line) && n > 0 && !utf8.RuneStart(line[n]) {
			n--
		}
		rec := make([]byte, 0, len(prefix)+n+1)
		rec = append(append(append(rec, prefix...), line[:n]...), '\n')
		_, _ = c.kmsg.Write(rec)
		line = line[n:]
	}
}

// syslog priorities the kernel log understands.
const (
	kmsgErr   = 3
	kmsgWarn  = 4
	kmsgInfo  = 6
	kmsgDebug = 7
)

func kmsgPriority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return kmsgErr
	case l >= slog.LevelWarn:
		return kmsgWarn
	case l >= slog.LevelInfo:
		return kmsgInfo
	}
	return kmsgDebug
}

// consoleHandler is a log/slog handler that formats records as slog's text and writes them
// to the console and the kernel log.
type consoleHandler struct {
	inner slog.Handler
	sink  *handlerSink
}

// handlerSink is shared by a handler and those derived from it with WithAttrs/WithGroup:
// the inner text handler writes into buf, and Handle passes the line on with its level.
type handlerSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
	c   *console
}

func (c *console) handler(level slog.Leveler) slog.Handler {
	s := &handlerSink{c: c}
	inner := slog.NewTextHandler(&s.buf, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey && a.Value.Kind() == slog.KindTime {
				// The kernel log has its own timestamps; the console gets a short one.
				return slog.String(slog.TimeKey, a.Value.Time().Format("15:04:05.000"))
			}
			return a
		},
	})
	return &consoleHandler{inner: inner, sink: s}
}

func (h *consoleHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *consoleHandler) Handle(ctx context.Context, r slog.Record) error {
	h.sink.mu.Lock()
	defer h.sink.mu.Unlock()
	h.sink.buf.Reset()
	if err := h.inner.Handle(ctx, r); err != nil {
		return err
	}
	h.sink.c.writeLog(r.Level, h.sink.buf.Bytes())
	return nil
}

func (h *consoleHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &consoleHandler{inner: h.inner.WithAttrs(as), sink: h.sink}
}

func (h *consoleHandler) WithGroup(name string) slog.Handler {
	return &consoleHandler{inner: h.inner.WithGroup(name), sink: h.sink}
}

// since formats a step's duration for the boot log.
func since(t time.Time) string { return time.Since(t).Round(time.Millisecond).String() }
