package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/edgegate/edgegate/daemon/pid1"
)

// Policy is what a unit's failure does to the run.
type Policy int

const (
	// EndRun: an error or a panic ends the whole run (under PID 1 the supervisor then
	// restarts the daemon, and the kernel's rules stay meanwhile). For the units whose Run
	// owns state a second Run cannot take up: informers started once, sockets closed when
	// Run ends, the sync loop and what it feeds.
	EndRun Policy = iota
	// Restart: an error, a panic or a return before the run ends restarts the unit alone,
	// with backoff (pid1.Supervisor's), while the others go on. For units that hold nothing
	// but what their Run opens, such as a listener.
	Restart
)

// Unit is one long-running component of the daemon, named in its log lines and errors.
type Unit struct {
	Name   string
	Policy Policy
	Run    func(ctx context.Context) error
}

// units starts the daemon's units and follows them until the run ends.
type units struct {
	// restarts restarts the units of policy Restart; its Wait can be a fake's.
	restarts *pid1.Supervisor

	wg   sync.WaitGroup
	errc chan error
}

func newUnits(log *slog.Logger) *units {
	return &units{restarts: &pid1.Supervisor{Log: log}, errc: make(chan error, 1)}
}

// start runs u until ctx ends, by its policy.
func (s *units) start(ctx context.Context, u Unit) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if u.Policy == Restart {
			s.restarts.Run(ctx, pid1.Component{Name: u.Name, Run: u.Run})
			return
		}
		// A panic ends the run with an error instead of ending the process.
		err := pid1.Protect(func() error { return u.Run(ctx) })
		if err == nil || ctx.Err() != nil {
			return
		}
		select {
		case s.errc <- fmt.Errorf("%s: %w", u.Name, err):
		default: // another unit's error already ends the run
		}
	}()
}

// failed delivers the first error of a unit of policy EndRun.
func (s *units) failed() <-chan error { return s.errc }

// wait returns once every unit has returned (their context ended).
func (s *units) wait() { s.wg.Wait() }
