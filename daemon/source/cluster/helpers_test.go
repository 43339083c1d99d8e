package cluster

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
	"github.com/edgegate/edgegate/daemon/source/cache"
)

// recordingSink keeps what the source feeds it, by kind and key.
type recordingSink struct {
	mu       sync.Mutex
	svcs     map[string]*v1.Service
	eps      map[string]*discovery.EndpointSlice
	replaces int
}

func newSink() *recordingSink {
	return &recordingSink{svcs: map[string]*v1.Service{}, eps: map[string]*discovery.EndpointSlice{}}
}

// locked runs f with the sink's lock held.
func (r *recordingSink) locked(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func (r *recordingSink) UpsertService(s *v1.Service) {
	r.locked(func() { r.svcs[s.Namespace+"/"+s.Name] = s })
}

func (r *recordingSink) DeleteService(ns, name string) {
	r.locked(func() { delete(r.svcs, ns+"/"+name) })
}

func (r *recordingSink) UpsertSlice(s *discovery.EndpointSlice) {
	r.locked(func() { r.eps[s.Namespace+"/"+s.Name] = s })
}

func (r *recordingSink) DeleteSlice(ns, name string) { r.locked(func() { delete(r.eps, ns+"/"+name) }) }

func (r *recordingSink) Replace(svcs []*v1.Service, eps []*discovery.EndpointSlice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replaces++
	clear(r.svcs)
	clear(r.eps)
	for _, s := range svcs {
		r.svcs[s.Namespace+"/"+s.Name] = s
	}
	for _, s := range eps {
		r.eps[s.Namespace+"/"+s.Name] = s
	}
}

// keys lists what the sink holds as "svc ns/name" and "eps ns/name", sorted.
func (r *recordingSink) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.svcs {
		out = append(out, "svc "+k)
	}
	for k := range r.eps {
		out = append(out, "eps "+k)
	}
	slices.Sort(out)
	return out
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// outage makes every list and watch of a fake clientset fail the way an unreachable API
// server does, while it is on.
type outage struct{ on atomic.Bool }

var errRefused = fmt.Errorf("dial tcp 192.0.2.1:6443: connect: %w", syscall.ECONNREFUSED)

func (o *outage) install(c *fake.Clientset) {
	c.PrependReactor("list", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if o.on.Load() {
			return true, nil, errRefused
		}
		return false, nil, nil
	})
	c.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		if o.on.Load() {
			return true, nil, errRefused
		}
		return false, nil, nil
	})
}

// started runs a Source until the test ends.
type started struct {
	src    *Source
	sink   *recordingSink
	client *fake.Clientset
	// changed and nodesChanged count the callbacks.
	changed, nodesChanged atomic.Int32
}

func start(t *testing.T, client *fake.Clientset, opts Options, tune func(*Source)) *started {
	t.Helper()
	st := &started{sink: newSink(), client: client}
	copyWatchedObjects(client)
	opts.Changed = func() { st.changed.Add(1) }
	opts.NodesChanged = func() { st.nodesChanged.Add(1) }
	if opts.NodeName == "" {
		opts.NodeName = "gw1"
	}
	if opts.Log == nil {
		opts.Log = testLog(t)
	}
	src, err := New(client, st.sink, opts)
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(src)
	}
	st.src = src
	testkit.Go(t, src.Run)
	return st
}

// copyWatchedObjects makes the fake clientset's watches deliver copies, as a real
// apiserver's decoded objects are. client-go's fake tracker (v0.37) hands a new watch the
// very objects it stores when it replays those newer than the watch's resourceVersion
// (an update between the informer's list and its watch), and slim edits what it is given:
// a data race with the tracker's next copy of the same object, seen in TestSourceNodes.
// It replaces the default reactor, the last of the chain, so a test's own reactors still
// come first.
func copyWatchedObjects(client *fake.Clientset) {
	chain := client.WatchReactionChain
	chain[len(chain)-1] = &k8stesting.SimpleWatchReactor{Resource: "*", Reaction: func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return false, nil, err
		}
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
			if e.Object != nil {
				e.Object = e.Object.DeepCopyObject()
			}
			return e, true
		}), nil
	}}
}

func fastWriter(s *Source) {
	if s.writer != nil {
		s.writer.Settle, s.writer.MinInterval, s.writer.FirstSettle = 10*time.Millisecond, 0, 10*time.Millisecond
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, what, 10*time.Second, 10*time.Millisecond, cond)
}

func waitReady(t *testing.T, s *Source) {
	t.Helper()
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the source never became ready")
	}
}

func node(name, internalIP string, podCIDRs ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	n.Spec.PodCIDRs = podCIDRs
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR = podCIDRs[0]
	}
	n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: internalIP}}
	return n
}

func writeCache(t *testing.T, dir string, st cache.State) *cache.File {
	t.Helper()
	f := cache.NewFile(dir)
	if err := f.Save(st); err != nil {
		t.Fatal(err)
	}
	return f
}
