package alloc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/edgegate/edgegate/daemon/lb/byname"
	"github.com/edgegate/edgegate/daemon/lb/pool"
)

// PoolState is what a Watcher knows about the pools.
type PoolState struct {
	// Pools are the pools in force: the last good configuration read.
	Pools pool.Pools
	// Loaded says a good configuration has been read since the start; until then there are
	// no pools and the allocator leaves every Service as it is.
	Loaded bool
	// Synced says the ConfigMap has been looked for at least once.
	Synced bool
	// Err says why the ConfigMap as it is now is not in force (bad document, missing key,
	// deleted); nil when it is.
	Err error
	// Changed is closed when any of the above changes.
	Changed <-chan struct{}
}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Namespace and Name of the ConfigMap; defaults pool.ConfigMapNamespace and
	// pool.ConfigMapName.
	Namespace, Name string
	// Log is the component's logger; nil discards.
	Log *slog.Logger
}

// Watcher follows the pools ConfigMap. Every gateway runs one: the announcer needs each
// address's interfaces whether or not this gateway allocates. Its methods are safe for
// concurrent use.
type Watcher struct {
	client    kubernetes.Interface
	namespace string
	name      string
	log       *slog.Logger

	mu      sync.Mutex
	state   PoolState
	changed chan struct{}
}

// NewWatcher returns a Watcher reading through client; nothing is requested before Run.
func NewWatcher(client kubernetes.Interface, o WatcherOptions) *Watcher {
	if o.Namespace == "" {
		o.Namespace = pool.ConfigMapNamespace
	}
	if o.Name == "" {
		o.Name = pool.ConfigMapName
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{client: client, namespace: o.Namespace, name: o.Name, log: o.Log, changed: make(chan struct{})}
	w.state.Changed = w.changed
	return w
}

// State returns the current state.
func (w *Watcher) State() PoolState {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state
}

// Pools returns the pools in force.
func (w *Watcher) Pools() pool.Pools { return w.State().Pools }

// update changes the state under the lock and wakes whoever waits on Changed.
func (w *Watcher) update(f func(*PoolState)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.state)
	close(w.changed)
	w.changed = make(chan struct{})
	w.state.Changed = w.changed
}

// Run watches the ConfigMap until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(w.log.Handler()))
	// Only this ConfigMap, by name: deploy/rbac.yaml grants list/watch on this name only.
	inf := byname.Informer(w.client, w.client.CoreV1().ConfigMaps(w.namespace), w.name, &v1.ConfigMap{},
		"configmap "+w.namespace+"/"+w.name)
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { w.read(o) },
		UpdateFunc: func(_, o any) { w.read(o) },
		DeleteFunc: func(any) { w.deleted() },
	})
	if err != nil {
		return fmt.Errorf("pools watcher: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { inf.RunWithContext(ctx) })
	if toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		w.update(func(s *PoolState) { s.Synced = true })
		if st := w.State(); !st.Loaded && st.Err == nil {
			w.log.Warn("no LoadBalancer address pools: the ConfigMap does not exist", "configmap", w.namespace+"/"+w.name)
		}
	}
	<-ctx.Done()
	return nil
}

// read takes in a new version of the ConfigMap; a bad one keeps the pools in force.
func (w *Watcher) read(o any) {
	cm, ok := o.(*v1.ConfigMap)
	if !ok {
		return
	}
	where := "configmap " + cm.Namespace + "/" + cm.Name
	var ps pool.Pools
	var err error
	doc, found := cm.Data[pool.ConfigMapKey]
	if !found {
		err = fmt.Errorf("%s: no key %s", where, pool.ConfigMapKey)
	} else if ps, err = pool.Parse([]byte(doc)); err != nil {
		err = fmt.Errorf("%s: %w", where, err)
	}
	if err != nil {
		w.log.Error("LoadBalancer address pools not changed: the ConfigMap is invalid", "err", err)
		w.update(func(s *PoolState) { s.Err = err })
		return
	}
	st := w.State()
	if st.Loaded && st.Err == nil && st.Pools.Equal(ps) {
		return
	}
	w.log.Info("LoadBalancer address pools", "configmap", cm.Namespace+"/"+cm.Name, "pools", ps.String())
	w.update(func(s *PoolState) { s.Pools, s.Loaded, s.Err = ps, true, nil })
}

// errDeleted is the state's Err once the ConfigMap is gone.
var errDeleted = errors.New("the ConfigMap was deleted; the last good pools stay in force (write \"pools: []\" to release every address)")

// deleted keeps the pools in force: a ConfigMap deleted by accident must not take every
// Service's address away.
func (w *Watcher) deleted() {
	w.log.Warn("LoadBalancer address pools ConfigMap deleted; keeping the last good pools", "configmap", w.namespace+"/"+w.name)
	w.update(func(s *PoolState) { s.Err = fmt.Errorf("configmap %s/%s: %w", w.namespace, w.name, errDeleted) })
}
