package pid1

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

const watchdogDevice = "/dev/watchdog"

// startWatchdog opens the hardware watchdog, when the board has one, and keeps it fed from
// a goroutine until ctx ends, as long as feedable says so. It is not essential: without one the machine runs
// unwatched. When ctx ends the pings stop but the device stays open and armed (closing
// it would stop drivers without magic close), so a shutdown that hangs ends in a reset.
func (m *Machine) startWatchdog(ctx context.Context) {
	f, err := os.OpenFile(m.path(watchdogDevice), os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		m.log.Info("no hardware watchdog")
		return
	}
	if err != nil {
		m.log.Warn("hardware watchdog unusable", "device", watchdogDevice, "err", err)
		return
	}
	fd := int(f.Fd())
	timeout := 60 * time.Second
	if s, err := unix.IoctlGetInt(fd, unix.WDIOC_GETTIMEOUT); err == nil && s > 0 {
		timeout = time.Duration(s) * time.Second
	}
	identity := "unknown"
	if info, err := unix.IoctlGetWatchdogInfo(fd); err == nil {
		identity = unix.ByteSliceToString(info.Identity[:])
	}
	// A third of the timeout leaves room for two late pings before the reset.
	every := max(timeout/3, time.Second)
	m.log.Info("hardware watchdog armed", "identity", identity, "timeout", timeout, "ping", every)
	m.watchdog = f // referenced, so no finalizer closes it
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		starving := false
		for {
			fed := m.feedable()
			switch {
			case fed:
				if err := unix.IoctlWatchdogKeepalive(fd); err != nil {
					m.log.Warn("hardware watchdog ping failed", "err", err)
				}
			case !starving:
				m.log.Error("restarting the daemon does not help; the hardware watchdog is no longer fed and resets the board", "within", timeout)
			}
			starving = !fed
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// feedable says whether the watchdog may be fed: unless the daemon's restarts stopped
// helping (see daemonProc.alive), and always when no daemon runs (a reset would not start
// one).
func (m *Machine) feedable() bool {
	d := m.daemon.Load()
	return d == nil || d.alive()
}
