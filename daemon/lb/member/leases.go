package member

import (
	"context"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/edgegate/edgegate/daemon/internal/fault"
)

// NodeLeaseNamespace holds the node Leases every gateway renews (kubelet's heartbeat).
const NodeLeaseNamespace = "kube-node-lease"

// LeaseWatch remembers, on this gateway's clock, when it last saw each node Lease renewed:
// the API's view of which peers are alive, for settling a partition of the segment.
type LeaseWatch struct {
	now func() time.Time

	mu    sync.Mutex
	seen  map[string]time.Time // lease name (the node name) -> when a renewal arrived
	renew map[string]time.Time // lease name -> the renewTime last seen
}

// NewLeaseWatch returns an empty watch; Observe feeds it.
func NewLeaseWatch(now func() time.Time) *LeaseWatch {
	if now == nil {
		now = time.Now
	}
	return &LeaseWatch{now: now, seen: map[string]time.Time{}, renew: map[string]time.Time{}}
}

// Observe records a Lease as the API server sent it: a renewTime other than the last one
// seen is a renewal, seen now.
func (w *LeaseWatch) Observe(l *coordinationv1.Lease) {
	if l == nil || l.Spec.RenewTime == nil {
		return
	}
	rt := l.Spec.RenewTime.Time
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.renew[l.Name]; ok && prev.Equal(rt) {
		return
	}
	w.renew[l.Name], w.seen[l.Name] = rt, w.now()
}

// Forget drops a deleted Lease.
func (w *LeaseWatch) Forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.renew, name)
	delete(w.seen, name)
}

// View is the LeaseView of this watch.
func (w *LeaseWatch) View(name string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.seen[name]
	return t, ok
}

// Run watches the node Leases until ctx ends. The informer's first list counts as seen
// renewals: a peer is not taken for partitioned unless a renewal arrives after it fell
// silent.
func (w *LeaseWatch) Run(ctx context.Context, client kubernetes.Interface) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(NodeLeaseNamespace))
	inf := f.Coordination().V1().Leases().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.observeAny(o) },
		UpdateFunc: func(_, o any) { w.observeAny(o) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if l, ok := o.(*coordinationv1.Lease); ok {
				w.Forget(l.Name)
			}
		},
	})
	var wg sync.WaitGroup
	wg.Go(func() { inf.Run(ctx.Done()) })
	wg.Wait()
}

func (w *LeaseWatch) observeAny(o any) {
	fault.Point(fault.LBLeases)
	if l, ok := o.(*coordinationv1.Lease); ok {
		w.Observe(l)
	}
}
