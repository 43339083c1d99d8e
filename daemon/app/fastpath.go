package app

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/fastpath"
	"github.com/edgegate/edgegate/daemon/plan"
)

// The fast path (--fast-path): a flowtable over the gateway's interfaces, rewritten when
// they change. Without --fast-path, or in ipvs mode, a fast path an earlier run left is
// removed at the start.

// fastPathInterval is how often the interfaces are looked at.
const fastPathInterval = 5 * time.Second

// fastPathKernel is what the fast path needs of the kernel; fastpath.Kernel implements it.
type fastPathKernel interface {
	Links() ([]fastpath.Link, error)
	Apply(devices []string) error
	Cleanup() error
}

// fastPath keeps the flowtable over the interfaces there are.
type fastPath struct {
	k   fastPathKernel
	log *slog.Logger
	// applied are the devices the kernel's flowtable covers; nil before the first apply.
	applied []string
	// unsupported: the kernel has no flowtables; nothing more is tried.
	unsupported bool
	// show, if set, gets the devices covered after each change (none when off).
	show func(devices []string)
}

// step looks at the interfaces once and rewrites the flowtable when they changed.
func (f *fastPath) step() {
	if f.unsupported {
		return
	}
	links, err := f.k.Links()
	if err != nil {
		f.log.Warn("fast path: cannot list the interfaces", "err", err)
		return
	}
	devices := fastpath.Devices(links)
	if f.applied != nil && slices.Equal(devices, f.applied) {
		return
	}
	err = f.k.Apply(devices)
	switch {
	case errors.Is(err, fastpath.ErrUnsupported):
		f.unsupported = true
		f.log.Warn("fast path unavailable: connections take the kernel's usual path", "err", err)
		return
	case err != nil:
		f.log.Warn("fast path not written; tried again at the next look", "devices", devices, "err", err)
		return
	}
	f.log.Info("fast path over the gateway's interfaces", "devices", devices)
	f.applied = devices
	if f.show != nil {
		f.show(devices)
	}
}

// fastPathUnit runs the fast path when cfg asks for it, and otherwise removes what an
// earlier run left.
func fastPathUnit(cfg Config, k fastPathKernel, log *slog.Logger, show func([]string)) Unit {
	log = log.With("component", "fast-path")
	on := cfg.FastPath && cfg.ProxyMode != plan.ModeIPVS
	return Unit{Name: "fast-path", Policy: Restart, Run: func(ctx context.Context) error {
		if !on {
			if cfg.FastPath {
				log.Warn("--fast-path is ignored in ipvs mode: IPVS must see every packet of its connections")
			}
			if err := k.Cleanup(); err != nil && !errors.Is(err, fastpath.ErrUnsupported) {
				log.Warn("removing an earlier fast path failed", "err", err)
			}
			<-ctx.Done()
			return nil
		}
		f := &fastPath{k: k, log: log, show: show}
		t := time.NewTicker(fastPathInterval)
		defer t.Stop()
		for {
			f.step()
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}}
}
