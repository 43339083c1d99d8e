package qemu

import (
	"strings"
	"testing"

	"github.com/edgegate/edgegate/internal/prereq"
)

// Report replays the guest's tests as subtests of t, with the same names, output,
// passes, failures and skips (a skip fails under CI=true). A test that never finished
// fails, and so does t when the binary exited non-zero without any test failing (a crash
// between tests, a bad flag).
func (g GuestTest) Report(t *testing.T) {
	t.Helper()
	results, err := g.Results()
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	for _, r := range results {
		failed = failed || r.Action == "fail" || (r.Name != "" && r.Action == "")
	}
	top := results[0]
	for _, line := range top.Output {
		t.Log(line)
	}
	parents := map[string]string{}
	for i, r := range results[1:] {
		parents[r.Name] = parentOf(r.Name, results[1:i+1])
	}
	replay(t, "", results[1:], parents)
	if g.ExitCode != 0 && !failed {
		t.Errorf("guest test binary exited %d", g.ExitCode)
	}
}

// replay runs the results whose parent is the test named parent ("" for top level).
func replay(t *testing.T, parent string, results []Result, parents map[string]string) {
	for _, r := range results {
		if parents[r.Name] != parent {
			continue
		}
		local := r.Name
		if parent != "" {
			local = strings.TrimPrefix(r.Name, parent+"/")
		}
		t.Run(local, func(t *testing.T) {
			for _, line := range r.Output {
				t.Log(line)
			}
			replay(t, r.Name, results, parents)
			switch r.Action {
			case "fail":
				t.Error("failed in the guest")
			case "skip":
				// The guest runs with every prerequisite: under CI=true its skip is a
				// tier that did not run, which must fail, never pass silently.
				prereq.Missing(t, "skipped in the guest")
			case "":
				t.Error("never finished in the guest: the test binary died (see the output)")
			}
		})
	}
}
