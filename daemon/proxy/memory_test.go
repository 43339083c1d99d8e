package proxy

import (
	"github.com/edgegate/edgegate/daemon/plan"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// sizedDataplane reports every Program as a sync of the given size.
type sizedDataplane struct{ res Result }

func (d *sizedDataplane) Mode() plan.Mode { return "sized" }
func (d *sizedDataplane) Program(_ *model.Snapshot, full bool) (Result, error) {
	r := d.res
	r.Full = full
	return r, nil
}
func (d *sizedDataplane) Cleanup() error { return nil }

func TestLargeSyncReleasesItsMemory(t *testing.T) {
	f := newFixture()
	dp := &sizedDataplane{res: Result{Written: releaseAbove - 1}}
	f.p.Dataplane = dp
	released := make(chan struct{}, 4)
	hold := make(chan struct{})
	f.p.release.free = func() { <-hold }
	f.p.release.done = func() { released <- struct{}{} }

	sync := func(endpoint string) {
		t.Helper()
		f.p.Tracker.UpsertService(mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 0)))
		f.p.Tracker.UpsertSlice(mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP(endpoint)))
		f.now = f.now.Add(time.Second)
		f.sync(t)
	}
	sync("10.200.2.11")
	close(hold)
	select {
	case <-released:
		t.Fatalf("a sync of %d objects released memory; only syncs from %d do", releaseAbove-1, releaseAbove)
	case <-time.After(50 * time.Millisecond):
	}

	hold = make(chan struct{})
	dp.res = Result{Written: releaseAbove / 2, Elements: releaseAbove / 2, Deleted: 1}
	sync("10.200.2.12")
	sync("10.200.2.13") // while the first release still runs: not a second one
	close(hold)
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("a large sync did not release its memory")
	}
	select {
	case <-released:
		t.Fatal("a release started while one was running")
	case <-time.After(50 * time.Millisecond):
	}
	sync("10.200.2.14") // the first one ended: the next large sync releases again
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("no release after the running one ended")
	}
}
