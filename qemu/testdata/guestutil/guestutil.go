// Package guestutil holds what the guest test programs (testdata/guesttest,
// testdata/firmwaretest) read from the guest the same way.
package guestutil

import (
	"os"
	"strings"
	"testing"
)

// LoadedModules reads /proc/modules: the names of the modules the guest kernel has loaded.
func LoadedModules(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("/proc/modules")
	if err != nil {
		t.Fatal(err)
	}
	loaded := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if name, _, ok := strings.Cut(line, " "); ok {
			loaded[name] = true
		}
	}
	return loaded
}
