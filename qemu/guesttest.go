package qemu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
)

// Console markers around a test binary's run (the firmware contract).
const (
	TestBeginMarker = "EDGEGATE-TEST-BEGIN"
	TestExitMarker  = "EDGEGATE-TEST-EXIT"
)

// GuestTest is what a Go test binary printed inside the guest, and how it ended.
type GuestTest struct {
	// Output are the console lines between the begin and exit markers: the binary's
	// -test.v output (with any kernel messages that came in between).
	Output []string
	// ExitCode is the binary's exit status as PID 1 reported it.
	ExitCode int
}

// WaitForGuestTest waits for a test image's test run (booted with edgegate.test=1) to
// begin and end, and returns its output.
func (vm *VM) WaitForGuestTest() (GuestTest, error) {
	begin, err := vm.WaitFor(TestBeginMarker)
	if err != nil {
		return GuestTest{}, err
	}
	return vm.WaitForGuestTestFrom(begin)
}

// WaitForGuestTestFrom is WaitForGuestTest for a caller that has already seen the test's
// begin marker (and waited for lines of the test's own output since).
func (vm *VM) WaitForGuestTestFrom(begin Line) (GuestTest, error) {
	end, err := vm.WaitFor(TestExitMarker)
	if err != nil {
		return GuestTest{}, err
	}
	code, err := exitCode(end.Text)
	if err != nil {
		return GuestTest{}, err
	}
	lines := vm.Lines()[begin.N+1 : end.N]
	g := GuestTest{ExitCode: code, Output: make([]string, len(lines))}
	for i, l := range lines {
		g.Output[i] = l.Text
	}
	return g, nil
}

// exitCode reads the code from an "EDGEGATE-TEST-EXIT <code>" line.
func exitCode(line string) (int, error) {
	_, after, _ := strings.Cut(line, TestExitMarker)
	fields := strings.Fields(after)
	if len(fields) == 0 {
		return 0, fmt.Errorf("qemu: %q: no exit code", line)
	}
	code, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0, fmt.Errorf("qemu: %q: %w", line, err)
	}
	return code, nil
}

// Result is one guest test's outcome.
type Result struct {
	// Name is the full test name, e.g. TestKernel/ip_vs.
	Name string
	// Action is pass, fail or skip; empty when the test never finished (the binary died).
	Action string
	// Output is what the test printed, including go test's own === and --- lines.
	Output []string
}

// Results converts the output with `go tool test2json` and returns each test in the order
// it started. Output outside any test (the final PASS/FAIL, a panic's goroutine dump
// after the last test) is returned as a Result with an empty Name.
func (g GuestTest) Results() ([]Result, error) {
	// go test puts its toolchain's bin directory first in the test's PATH.
	cmd := exec.Command("go", "tool", "test2json")
	cmd.Stdin = strings.NewReader(strings.Join(g.Output, "\n") + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go tool test2json: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return parseEvents(bytes.NewReader(out))
}

// parseEvents groups test2json's event stream by test.
func parseEvents(r io.Reader) ([]Result, error) {
	byName := map[string]*Result{}
	var order []string
	get := func(name string) *Result {
		if res, ok := byName[name]; ok {
			return res
		}
		byName[name] = &Result{Name: name}
		order = append(order, name)
		return byName[name]
	}
	get("")
	dec := json.NewDecoder(r)
	for {
		var ev struct {
			Action string
			Test   string
			Output string
		}
		if err := dec.Decode(&ev); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("test2json output: %w", err)
		}
		switch ev.Action {
		case "output":
			res := get(ev.Test)
			res.Output = append(res.Output, strings.TrimRight(ev.Output, "\n"))
		case "pass", "fail", "skip":
			if ev.Test != "" {
				get(ev.Test).Action = ev.Action
			}
		case "run":
			get(ev.Test)
		}
	}
	results := make([]Result, len(order))
	for i, name := range order {
		results[i] = *byName[name]
	}
	return results, nil
}

// parentOf returns the longest earlier test name that name is a subtest of. A child's
// name relative to its parent may itself contain a slash (t.Run("10.0.0.0/8")), so
// parents are found among the names seen, not by splitting.
func parentOf(name string, earlier []Result) string {
	parent := ""
	for _, e := range earlier {
		if strings.HasPrefix(name, e.Name+"/") && len(e.Name) > len(parent) {
			parent = e.Name
		}
	}
	return parent
}
