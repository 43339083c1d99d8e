package dashboard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
	"github.com/edgegate/edgegate/daemon/view"
)

func TestSampleWait(t *testing.T) {
	for _, tc := range []struct{ interval, took, want time.Duration }{
		{time.Second, 0, time.Second},
		{time.Second, 50 * time.Millisecond, time.Second},
		{time.Second, 100 * time.Millisecond, time.Second},
		{time.Second, 2 * time.Second, 20 * time.Second}, // 110,000 counters
	} {
		if got := sampleWait(tc.interval, tc.took); got != tc.want {
			t.Errorf("sampleWait(%v, %v) = %v, want %v", tc.interval, tc.took, got, tc.want)
		}
	}
}

// slowTraffic takes a while to read, as a kernel with 110,000 rule counters does.
type slowTraffic struct {
	reads atomic.Int32
	took  time.Duration
}

func (s *slowTraffic) Traffic(*model.Snapshot) (map[string]view.ServiceTraffic, error) {
	s.reads.Add(1)
	time.Sleep(s.took)
	return map[string]view.ServiceTraffic{}, nil
}

func (s *slowTraffic) Rules() (string, error) { return "", nil }

// TestSlowSamplesAreSpacedOut: with reads of 30 ms and an interval of 5 ms, the sampler
// waits 300 ms between samples, not 5: in 700 ms at most three reads (first at once, the
// others after 330 and 660 ms), where a fixed interval would have made twenty. Only an
// upper bound is checked, which a loaded machine cannot break.
func TestSlowSamplesAreSpacedOut(t *testing.T) {
	tr := &slowTraffic{took: 30 * time.Millisecond}
	d := New(Options{Interval: 5 * time.Millisecond, Views: tr})
	if _, err := d.Record(&fakeDataplane{}).Program(mt.Snapshot(webObjects("10.0.1.1")...), true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	d.Run(ctx)
	if n := tr.reads.Load(); n < 1 || n > 3 {
		t.Errorf("%d reads of 30 ms in 700 ms at a 5 ms interval; want 1 to 3", n)
	}
}
