package pid1

import (
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// children is the process's one table of children. PID 1 reaps every child that exits (its
// own and the orphans the kernel re-parents to it) with wait4(-1), which would steal the
// exit status from any other waiter, so there is exactly one reaper per process and the
// children PID 1 starts itself go through it.
//
// A package that starts a process with os/exec and waits for it races with this reaper
// (its Wait may see ECHILD); under PID 1 such a process must be started with spawn.
var children = &reaper{waiting: map[int]chan unix.WaitStatus{}}

type reaper struct {
	once    sync.Once
	mu      sync.Mutex // held while reaping and while starting, so no exit goes unclaimed
	waiting map[int]chan unix.WaitStatus
	log     *slog.Logger
}

// start begins reaping on SIGCHLD; later calls do nothing.
func (r *reaper) start(log *slog.Logger) {
	r.once.Do(func() {
		r.log = log
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, unix.SIGCHLD)
		go func() {
			r.reap() // whatever exited before the handler was installed
			for range sig {
				r.reap()
			}
		}()
	})
}

// reap collects every child that has exited. Signals coalesce, so one SIGCHLD may stand
// for many exits: it loops until none is left.
func (r *reaper) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiting[pid]; ok {
			ch <- ws
			delete(r.waiting, pid)
			continue
		}
		r.log.Debug("reaped an orphan", "pid", pid, "status", exitCode(ws))
	}
}

// spawn starts a process whose exit status arrives on the returned channel.
func (r *reaper) spawn(log *slog.Logger, name string, argv []string, attr *os.ProcAttr) (int, <-chan unix.WaitStatus, error) {
	r.start(log)
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(name, argv, attr)
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	r.waiting[p.Pid] = ch
	// The reaper, not os.Process.Wait, collects it; Release frees the process handle.
	pid := p.Pid
	_ = p.Release()
	return pid, ch, nil
}

// exitCode is a shell's view of a wait status: the exit code, or 128 plus the signal.
func exitCode(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
