package qemu

import (
	"slices"
	"strings"
	"testing"
)

// guestOutput is -test.v output as a serial console delivers it, kernel message included.
const guestOutput = `=== RUN   TestRoutes
=== RUN   TestRoutes/10.0.0.0/8
    routes_test.go:12: checking
--- PASS: TestRoutes/10.0.0.0/8 (0.00s)
=== RUN   TestRoutes/fd00::/64
    routes_test.go:14: route missing
--- FAIL: TestRoutes/fd00::/64 (0.01s)
--- FAIL: TestRoutes (0.01s)
=== RUN   TestSkip
    skip_test.go:3: no ipvs here
--- SKIP: TestSkip (0.00s)
[    5.123456] IPVS: Registered protocols (TCP, UDP, SCTP, AH, ESP)
=== RUN   TestCrash
panic: boom

goroutine 7 [running]:
FAIL	example 0.05s`

func TestResults(t *testing.T) {
	g := GuestTest{Output: strings.Split(guestOutput, "\n"), ExitCode: 2}
	results, err := g.Results()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var order []string
	for _, r := range results {
		got[r.Name] = r.Action
		order = append(order, r.Name)
	}
	wantOrder := []string{"", "TestRoutes", "TestRoutes/10.0.0.0/8", "TestRoutes/fd00::/64", "TestSkip", "TestCrash"}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("tests = %q, want %q", order, wantOrder)
	}
	want := map[string]string{
		"": "", "TestRoutes": "fail", "TestRoutes/10.0.0.0/8": "pass", "TestRoutes/fd00::/64": "fail",
		"TestSkip": "skip", "TestCrash": "",
	}
	for name, action := range want {
		if got[name] != action {
			t.Errorf("%s: action %q, want %q", name, got[name], action)
		}
	}
	for _, r := range results {
		if r.Name == "TestCrash" && !slices.Contains(r.Output, "panic: boom") {
			t.Errorf("TestCrash output %q lacks the panic", r.Output)
		}
	}
	// Subtest names with slashes keep their parent.
	if p := parentOf("TestRoutes/fd00::/64", results[:3]); p != "TestRoutes" {
		t.Errorf("parentOf = %q, want TestRoutes", p)
	}
}

func TestExitCode(t *testing.T) {
	for line, want := range map[string]int{
		"EDGEGATE-TEST-EXIT 0":                  0,
		"EDGEGATE-TEST-EXIT 1":                  1,
		"[    9.1] x EDGEGATE-TEST-EXIT 2 tail": 2,
	} {
		if got, err := exitCode(line); err != nil || got != want {
			t.Errorf("exitCode(%q) = %d, %v; want %d", line, got, err, want)
		}
	}
	for _, line := range []string{"EDGEGATE-TEST-EXIT", "EDGEGATE-TEST-EXIT x"} {
		if _, err := exitCode(line); err == nil {
			t.Errorf("exitCode(%q) succeeded", line)
		}
	}
}
