// Command edgegate is the edge gateway's whole userland: a Kubernetes Service proxy that
// programs the gateway's kernel from a cluster or, standalone, from a directory of manifests.
// This is its entry: the flags, then PID 1 (the firmware) or a plain daemon, then the
// daemon's wiring in daemon/app.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/edgegate/edgegate/daemon/app"
	"github.com/edgegate/edgegate/daemon/pid1"
	"github.com/edgegate/edgegate/daemon/update"
)

// version is set at build time (-ldflags -X main.version=...).
var version = "dev"

func main() {
	switch {
	case os.Getpid() == 1:
		// The firmware: edgegate is the machine's init (see daemon/pid1); never returns. It
		// runs the firmware's updater and starts this binary again as the daemon.
		var cfg app.Config
		pid1.Main(pid1.Daemon{
			Check: func(m *pid1.Machine, args []string) error {
				var err error
				cfg, err = app.ParseConfig(args)
				m.SetLogLevel(cfg.LogLevel)
				return err
			},
			Updater: func(m *pid1.Machine, _ []string, err error) update.Updater {
				return app.Updater(m, cfg, err, version)
			},
		})
	case pid1.IsDaemon():
		// The daemon as PID 1's child process.
		os.Exit(app.Child(os.Args[1:], version))
	}
	cfg, err := app.ParseConfig(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "edgegate:", err)
		os.Exit(2)
	}
	if cfg.Version {
		fmt.Println("edgegate", version)
		return
	}
	log := newLogger(cfg.LogLevel)
	if cfg.Cleanup {
		if app.Cleanup(cfg, log) != nil {
			os.Exit(1)
		}
		log.Info("removed every rule edgegate programmed")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, app.Options{Config: cfg, Version: version, Log: log}); err != nil {
		log.Error("edgegate stopped", "err", err)
		os.Exit(1)
	}
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
