// Package labtest runs package lab from tests, as net/http/httptest runs servers: labs and
// sites that are removed when the test ends, the daemon under test built once per test
// binary and started with its log in the test's, and the traffic matrix every proxy mode
// must pass (RunMatrix), with the tests of all of them. Where the machine cannot build a
// lab (no root), a test is skipped, except under CI=true where it fails.
package labtest

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/internal/prereq"
	"github.com/edgegate/edgegate/lab"
)

// New builds a lab and registers its removal with t.Cleanup.
func New(t testing.TB, opts lab.Options) *lab.Lab {
	t.Helper()
	l, err := lab.New(opts)
	removeAtEnd(t, l, err)
	t.Logf("lab %s*: gateway %s, clients %s %s, backends %s %s %s", strings.TrimSuffix(l.Gateway.NS, "gw"),
		l.Gateway.NS, l.Client.NS, l.Client2.NS, l.Backends[0].NS, l.Backends[1].NS, l.Backends[2].NS)
	return l
}

// NewSite builds a site and registers its removal with t.Cleanup.
func NewSite(t testing.TB, opts lab.SiteOptions) *lab.Site {
	t.Helper()
	s, err := lab.NewSite(opts)
	removeAtEnd(t, s, err)
	t.Logf("site %s*: %d gateways, client %s, upstream %s", strings.TrimSuffix(s.Switch.NS, "sw"),
		len(s.Gateways), s.Client.NS, s.Upstream.NS)
	return s
}

// removeAtEnd registers the removal of what a lab constructor built with t.Cleanup, or ends
// the test if it built nothing (err): a missing prerequisite skips it.
func removeAtEnd(t testing.TB, built io.Closer, err error) {
	t.Helper()
	if errors.Is(err, lab.ErrPrerequisite) {
		cannotBuild(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := built.Close(); err != nil {
			t.Error(err)
		}
	})
}

// cannotBuild skips, or fails under CI=true where a tier that cannot run is a failure.
func cannotBuild(t testing.TB, reason string) {
	t.Helper()
	prereq.Missing(t, "cannot build lab: %s", reason)
}

// Exec runs a program inside h's namespace (lab.Host.Run) and returns its combined output;
// an error fails the test.
func Exec(t testing.TB, h *lab.Host, argv ...string) string {
	t.Helper()
	out, err := h.Run(argv...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Forward joins connections to listen inside h's namespace to `to`, dialled from the test
// process's own namespace (lab.Host.Forward), until the test ends.
func Forward(t testing.TB, h *lab.Host, listen, to string) {
	t.Helper()
	f, err := h.Forward(listen, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Log(err)
		}
	})
}
