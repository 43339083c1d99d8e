// Package kerneltest runs kernel adapter tests inside throwaway network namespaces.
package kerneltest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/edgegate/edgegate/internal/prereq"
)

var seq atomic.Int32

// NeedRoot skips a test that needs root, or fails it under CI=true, where a tier that
// cannot run must never pass silently.
func NeedRoot(t testing.TB) {
	t.Helper()
	prereq.Root(t, "kernel tests")
}

// NeedTool skips a test that runs a stock command (nft, iptables-nft) that is not
// installed, or fails it under CI=true (make deps-test installs them).
func NeedTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		prereq.Missing(t, "%s is not installed (make deps-test installs it)", name)
	}
}

// NFT runs nft(8) with args inside the network namespace ns and returns what it printed;
// it fails the test if nft fails.
func NFT(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// InNetns runs fn on a locked OS thread inside a new, empty, named network namespace,
// deleted afterwards, and passes fn the name so the test can inspect the namespace with
// the stock tools (ip netns exec NAME nft ...). Names are prefix plus a number unique in
// this process, so tests may nest namespaces; prefix should stay within 6 bytes.
func InNetns(t testing.TB, prefix string, fn func(name string)) {
	t.Helper()
	NeedRoot(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the namespace
		name := fmt.Sprintf("%s%d-%d", prefix, os.Getpid()%100000, seq.Add(1))
		_ = netns.DeleteNamed(name)
		ns, err := netns.NewNamed(name)
		if err != nil {
			t.Errorf("netns %s: %v", name, err)
			return
		}
		defer ns.Close()
		defer netns.DeleteNamed(name)
		fn(name)
	}()
	<-done
}
