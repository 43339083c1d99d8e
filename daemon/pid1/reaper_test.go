package pid1

import (
	"bufio"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReaperReapsOrphans makes the test process a child subreaper (what PID 1 is by
// nature), starts a shell that leaves a background child behind and exits, and checks that
// the orphan, re-parented to the test process, is reaped when it exits rather than left
// a zombie.
func TestReaperReapsOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("prctl(PR_SET_CHILD_SUBREAPER): %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	log := slog.New(slog.DiscardHandler)
	_, exited, err := children.spawn(log, "/bin/sh", []string{"sh", "-c", "/bin/sleep 0.2 </dev/null >/dev/null & echo $!"}, &os.ProcAttr{Files: []*os.File{nil, w, os.Stderr}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ws := <-exited:
		if code := exitCode(ws); code != 0 {
			t.Errorf("the shell exited %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the shell's exit status never arrived")
	}
	// A zombie keeps its /proc entry until it is reaped.
	waitFor(t, "the orphan to be reaped", func() bool {
		_, err := os.Stat("/proc/" + strconv.Itoa(orphan))
		return os.IsNotExist(err)
	})
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		ws   unix.WaitStatus
		want int
	}{
		{0, 0},
		{3 << 8, 3},
		{unix.WaitStatus(unix.SIGKILL), 128 + 9},
	} {
		if got := exitCode(tc.ws); got != tc.want {
			t.Errorf("exitCode(%#x) = %d, want %d", uint32(tc.ws), got, tc.want)
		}
	}
}
