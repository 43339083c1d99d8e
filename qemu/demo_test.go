package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/firmware/image"
)

// demoSteps are the lines `make demo` prints when each of its steps happened: the gateway
// provisioned and a Ready Node, traffic answered, the dashboard over pinned TLS, the live
// update's trial boot and commit on the console, both slots and the history as the updated
// gateway reports them, traffic through it, and the verdict.
var demoSteps = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^  provisioned \S+/disk\.img: partition 2 \(edgegate-data\), read back$`),
	regexp.MustCompile(`(?m)^  edgegate-gw\s+Ready\s`),
	regexp.MustCompile(`(?m)^  backend-[123]\s+[1-9]`),
	regexp.MustCompile(`(?m)^demo: the dashboard: https://127\.0\.0\.1:\d+/`),
	regexp.MustCompile(`(?m)^  trial: \S+ \(slot a\) -> v\d+\.\d+\.\d+-demo \(slot b\), \d+ bytes verified and written`),
	regexp.MustCompile(`(?m)^\s+[\d.]+s  EDGEGATE-UPDATE trial slot=b boot=1/\d$`),
	regexp.MustCompile(`(?m)^\s+[\d.]+s  EDGEGATE-UPDATE committed slot=b version=v\d+\.\d+\.\d+-demo$`),
	regexp.MustCompile(`(?m)^  running v\d+\.\d+\.\d+-demo from slot b`),
	regexp.MustCompile(`(?m)^  b\s+v\S+-demo\s+committed\s+edgegate-b\.conf\s+true$`),
	regexp.MustCompile(`(?m)^  a\s+\S+\s+committed\s+edgegate-a\.conf\s+false$`),
	regexp.MustCompile(`(?m)^    \S+\s+\S+ \(a\)\s+v\S+-demo \(b\)\s+committed\s+1\s+\d+s\s+upload from 10\.200\.1\.2:\d+$`),
	regexp.MustCompile(`(?m)^  http://203\.0\.113\.10/\s+backend-[123]$`),
	regexp.MustCompile(`(?m)^demo: every step passed, in \d+s$`),
}

// TestDemo runs `make demo` as the README tells a newcomer to, without a terminal (CI=true:
// it ends instead of keeping the lab up), so the demo and its update path cannot rot: the
// qemu-x86_64 disk image provisioned by egprovision and booted through UEFI on the lab's taps,
// joined to a real kube-apiserver, its traffic and dashboard, then the live update through
// the dashboard's API. It checks the exit status and that every step printed its line.
func TestDemo(t *testing.T) {
	t.Parallel()
	b, err := board.Load("qemu-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	RequireUEFI(t, b)
	RequireTools(t, image.Tools...)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "demo")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CI=true", fmt.Sprintf("DASHBOARD_PORT=%d", freePort(t)))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	t.Logf("make demo:\n%s", out)
	if err != nil {
		t.Fatalf("make demo: %v after %v", err, took.Round(time.Second))
	}
	for _, step := range demoSteps {
		if !step.Match(out) {
			t.Errorf("make demo printed no line matching %s", step)
		}
	}
	t.Logf("make demo took %v", took.Round(time.Second))
}
