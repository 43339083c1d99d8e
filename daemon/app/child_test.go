package app

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/edgegate/edgegate/daemon/pid1"
)

// TestExitCode: a unit's recovered panic ends the child as a panic would, for PID 1 to
// count it so; other errors exit 1, a stop 0.
func TestExitCode(t *testing.T) {
	var out strings.Builder
	panicked := pid1.Protect(func() error { panic("boom") })
	if code := exitCode(fmt.Errorf("sync: %w", panicked), &out); code != 2 {
		t.Errorf("after a panic: exit %d, want 2", code)
	}
	if got := out.String(); !strings.HasPrefix(got, "panic: sync: panic: boom\n\n") || !strings.Contains(got, "goroutine ") {
		t.Errorf("stderr after a panic:\n%s", got)
	}
	out.Reset()
	if code := exitCode(errors.New("cluster: forbidden"), &out); code != 1 || out.Len() != 0 {
		t.Errorf("after an error: exit %d, stderr %q; want 1 and nothing", code, out.String())
	}
	if code := exitCode(nil, &out); code != 0 {
		t.Errorf("after a stop: exit %d", code)
	}
}
