// Package prereq is the one rule for a test whose prerequisite (root, a tool, a cluster,
// an emulator) is missing: it is skipped on a developer's machine, and fails under
// CI=true, where make deps-test has installed everything and a tier that cannot run must
// never pass silently. It is test support: only tests and test-support packages import it.
package prereq

import (
	"fmt"
	"os"
	"testing"
)

// Missing skips t with the reason, or fails it under CI=true.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true, so this fails)", reason)
	}
	t.Skip(reason)
}

// NoErr calls Missing with err when err is not nil: err says what is missing.
func NoErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		Missing(t, "%v", err)
	}
}

// Root calls Missing unless the test runs as root; what says what needs it.
func Root(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "%s needs root", what)
	}
}
