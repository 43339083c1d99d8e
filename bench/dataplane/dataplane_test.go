package dataplane

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	"github.com/edgegate/edgegate/internal/prereq"
	"github.com/edgegate/edgegate/qemu"
)

func TestLatency(t *testing.T) {
	var samples []sample
	for i := 1; i <= 200; i++ {
		samples = append(samples, sample{connect: time.Duration(i) * time.Microsecond, reply: time.Duration(2*i) * time.Microsecond})
	}
	got := latency(samples, func(s sample) time.Duration { return s.connect })
	want := Latency{P50: 100 * time.Microsecond, P99: 198 * time.Microsecond, Mean: 100500 * time.Nanosecond}
	if got != want {
		t.Errorf("latency = %+v, want %+v", got, want)
	}
	if got := latency(samples[:1], func(s sample) time.Duration { return s.reply }); got != (Latency{2 * time.Microsecond, 2 * time.Microsecond, 2 * time.Microsecond}) {
		t.Errorf("latency of one sample = %+v", got)
	}
	if got := latency(nil, func(s sample) time.Duration { return s.reply }); got != (Latency{}) {
		t.Errorf("latency of none = %+v", got)
	}
}

// TestGuestResults reads Results back from console lines as the guest program prints them,
// among other lines, and refuses a mangled one.
func TestGuestResults(t *testing.T) {
	r := Result{Where: "qemu-x86_64 guest", Mode: "ipvs", Services: 1000, Conns: 500,
		VIP: Latency{P50: time.Millisecond}, Direct: Latency{P50: 900 * time.Microsecond}, Programmed: 5 * time.Second}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	lines := []qemu.Line{{Text: "guest: progress", N: 0}, {Text: ResultMarker + string(js), N: 1}, {Text: "EDGEGATE-TEST-EXIT 0", N: 2}}
	got, err := guestResults(lines)
	if err != nil || len(got) != 1 || got[0] != r {
		t.Errorf("guestResults = %+v, %v; want [%+v]", got, err, r)
	}
	lines = append(lines, qemu.Line{Text: ResultMarker + `{"Where":`, N: 3})
	if _, err := guestResults(lines); err == nil {
		t.Error("guestResults accepted a cut line")
	}
}

// TestTopology builds the namespaces and measures the two paths that need no edgegate:
// the backend through the gateway (no rule there yet) and through the router. Every
// connection must succeed and the reply must come after the handshake.
func TestTopology(t *testing.T) {
	prereq.Root(t, "the data-plane topology")
	topo, err := newTopology()
	if err != nil {
		t.Fatal(err)
	}
	defer topo.close()
	be, err := startBackend(topo.backend, 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer be.close()
	all := []*series{
		{name: "bare", dst: netip.AddrPortFrom(backendViaRouter, 8080)},
		{name: "direct", dst: netip.AddrPortFrom(backendAddrs[1], 8080)},
	}
	if err := measure(context.Background(), topo.client, all, measureOptions{conns: 50, batch: 7, warmup: 3, maxTime: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if len(s.samples) != 50 || s.failed != 0 {
			t.Errorf("%s: %d samples, %d failed (last: %v); want 50 and none", s.name, len(s.samples), s.failed, s.lastErr)
		}
		for _, sm := range s.samples {
			if sm.connect <= 0 || sm.reply < sm.connect {
				t.Errorf("%s: connect %v, reply %v", s.name, sm.connect, sm.reply)
				break
			}
		}
	}
	// Nothing answers where no backend is: a dial fails rather than hangs.
	if err := topo.client.Do(func() error {
		_, err := dial(netip.AddrPortFrom(backendViaRouter, 9))
		return err
	}); err == nil {
		t.Error("a connection to a closed port succeeded")
	}
}
