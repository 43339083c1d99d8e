// Package ctl is the control channel between PID 1 and the daemon it runs as its child
// process: HTTP over a unix socket in PID 1's runtime directory that answers only PID 1's
// current child (checked by the connecting process's credentials). Over it the daemon says
// that it synced (PID 1 prints its readiness marker on the first), reports its liveness and
// health every second, and drives the firmware updater, which lives in PID 1 so that a trial
// boot whose daemon cannot start still ends on time.
package ctl

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/edgegate/edgegate/daemon/update"
)

// SocketEnv is the environment variable in which PID 1 gives its child the socket's path.
const SocketEnv = "EDGEGATE_PID1_SOCKET"

// ReportInterval is how often the daemon reports; PID 1 counts a child that has not
// reported for many of them as hung.
const ReportInterval = time.Second

// Report is what the daemon says of itself every ReportInterval.
type Report struct {
	// Components are the daemon's long-running parts. A part that stopped making progress
	// (a sync that never ends) reports Live false; PID 1 then restarts the daemon.
	Components []Component `json:"components"`
	// Problem is the daemon's part of a trial boot's health check: empty when the source
	// is loaded, the rules are programmed and, in a cluster, the Node is registered.
	Problem string `json:"problem,omitempty"`
}

// Component is the liveness of one long-running part of the daemon.
type Component struct {
	Name   string `json:"name"`
	Live   bool   `json:"live"`
	Detail string `json:"detail,omitempty"`
}

// Stuck returns the components that are not live, as "name (detail)".
func (r Report) Stuck() []string {
	var out []string
	for _, c := range r.Components {
		switch {
		case c.Live:
		case c.Detail == "":
			out = append(out, c.Name)
		default:
			out = append(out, c.Name+" ("+c.Detail+")")
		}
	}
	return out
}

// Child is what PID 1 knows of the daemon's runs; it answers every report, so the daemon can
// show its own restarts on the dashboard and in its metrics.
type Child struct {
	// Run counts the daemon's runs in this boot, from 1.
	Run int `json:"run"`
	// Restarts counts the runs that ended before the machine asked them to, by Reason.
	Restarts map[Reason]int `json:"restarts,omitempty"`
	// LastExit says how the previous run ended, and LastOutput holds its last lines on the
	// standard error (a panic's message and stack).
	LastExit   string   `json:"lastExit,omitempty"`
	LastOutput []string `json:"lastOutput,omitempty"`
	// MemoryMax is the daemon's cgroup memory limit in bytes; 0 without one.
	MemoryMax int64 `json:"memoryMax,omitempty"`
}

// Reason is why a run of the daemon ended early.
type Reason string

// The reasons a run ends early.
const (
	ReasonPanic Reason = "panic" // a Go panic or fatal error
	ReasonOOM   Reason = "oom"   // the kernel's OOM killer, at the cgroup's limit
	ReasonHang  Reason = "hang"  // stopped reporting, or reported a part not live; killed
	ReasonExit  Reason = "exit"  // any other exit
)

// Reasons lists every Reason, for metrics that show zeros.
var Reasons = []Reason{ReasonPanic, ReasonOOM, ReasonHang, ReasonExit}

// updateAnswer is the answer to the updater's actions: the attempt, and an error with its kind,
// so that the daemon's side can tell a busy updater from a refused bundle.
type updateAnswer struct {
	Attempt update.Attempt `json:"attempt"`
	Error   string         `json:"error,omitempty"`
	Kind    string         `json:"kind,omitempty"`
}

// statusAnswer is the updater's status with its change count, for long polls.
type statusAnswer struct {
	Version uint64        `json:"version"`
	Status  update.Status `json:"status"`
}

// updateErrors are the updater's errors that the daemon tells apart, by kind.
var updateErrors = map[string]error{
	"unavailable":    update.ErrUnavailable,
	"busy":           update.ErrBusy,
	"refused":        update.ErrRefused,
	"nothing-staged": update.ErrNothingStaged,
}

func errorKind(err error) string {
	for k, e := range updateErrors {
		if errors.Is(err, e) {
			return k
		}
	}
	return ""
}

// UpdateError is an error of PID 1's updater as the daemon sees it: the updater's message,
// and errors.Is matches the updater's error of the same kind.
type UpdateError struct {
	Msg  string
	Kind string
}

func (e *UpdateError) Error() string { return e.Msg }

func (e *UpdateError) Unwrap() error { return updateErrors[e.Kind] }

// encode is json.Marshal for the types above, which always marshal.
func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("ctl: " + err.Error())
	}
	return b
}
