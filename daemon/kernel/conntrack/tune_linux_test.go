package conntrack

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/kernel/kerneltest"
)

// TestTuneInNamespace runs Tune on the real kernel inside a throwaway network namespace:
// the table size is global and read-only there (ErrNotHere, naming the setting), the
// timeouts are the namespace's own and are set, and the initial namespace's stay as they
// were.
func TestTuneInNamespace(t *testing.T) {
	kerneltest.NeedRoot(t)
	const established = "net/netfilter/nf_conntrack_tcp_timeout_established"
	rootValue := read(t, Host.ProcSys, established)
	kerneltest.InNetns(t, "egtune", func(string) {
		if _, err := os.Stat(Host.ProcSys + "/" + maxFile); err != nil {
			t.Fatalf("nf_conntrack is not loaded on this host: %v", err)
		}
		cur, err := readInt(Host.ProcSys + "/" + maxFile)
		if err != nil {
			t.Fatal(err)
		}
		want := Tuning{Min: cur + 1024, TCPEstablished: 7 * time.Hour}
		changes, err := Tune(Host, want, 2)
		if !errors.Is(err, ErrNotHere) || !strings.Contains(err.Error(), "nf_conntrack_max stays "+strconv.Itoa(cur)) {
			t.Errorf("table size in a namespace: %v, want ErrNotHere naming nf_conntrack_max", err)
		}
		if v := read(t, Host.ProcSys, established); v != "25200" || len(changes) != 1 {
			t.Errorf("established timeout %s (changes %v), want 25200 set in the namespace", v, changes)
		}
	})
	if v := read(t, Host.ProcSys, established); v != rootValue {
		t.Errorf("the initial namespace's timeout changed: %s, was %s", v, rootValue)
	}
}
