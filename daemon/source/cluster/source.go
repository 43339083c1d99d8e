// Package cluster is the gateway's desired state from a Kubernetes API server: shared
// informers over Services, EndpointSlices and Nodes feed the proxy's tracker and the node
// membership, report the state of the link to the API server, and keep the last synced state
// in a cache file that programs the gateway after a reboot without the API (offline first).
package cluster

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/source/cache"
)

// DefaultSyncTimeout bounds the wait for the API server at start before the gateway programs
// from its cache: long enough for a reachable API server to list a large cluster, short
// enough that a gateway rebooting into an outage forwards again quickly.
const DefaultSyncTimeout = 10 * time.Second

// Sink receives Services and EndpointSlices: the proxy's tracker.
type Sink interface {
	UpsertService(*v1.Service)
	DeleteService(namespace, name string)
	UpsertSlice(*discovery.EndpointSlice)
	DeleteSlice(namespace, name string)
	Replace([]*v1.Service, []*discovery.EndpointSlice)
}

var _ Sink = (*model.Tracker)(nil)

// Options configure a Source.
type Options struct {
	// NodeName is this gateway's Node.
	NodeName string
	// Changed is called after the sink's contents changed.
	Changed func()
	// NodesChanged is called after what Nodes or OwnNode return changed.
	NodesChanged func()
	// Cache, when set, is loaded when the API server does not answer in time and saved after
	// changes once synced.
	Cache *cache.File
	// SyncTimeout bounds the wait for the first sync before the cache is used; zero means
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
	// Log is the component's logger; nil discards. client-go's own messages go to it too.
	Log *slog.Logger
	// Now is the clock of the link state; nil means time.Now.
	Now func() time.Time
}

// Source follows the API server. Its methods are safe for concurrent use.
type Source struct {
	sink   Sink
	opts   Options
	log    *slog.Logger
	inf    informers
	link   *linkState
	writer *cache.Writer // nil without a cache file
	// regs are the handlers' registrations, synced once a handler has seen every object of
	// the first list.
	regs  map[toolscache.SharedIndexInformer]toolscache.ResourceEventHandlerRegistration
	ready chan struct{}

	mu           sync.Mutex
	live         bool // the sink follows the informers
	nodesLive    bool // Nodes answers from the informer
	fromCache    bool
	cacheSince   time.Time
	cacheSavedAt time.Time
	cachedNodes  []*v1.Node
	readyClosed  bool
}

// New returns a Source reading through client and feeding sink. Nothing is requested before
// Run.
func New(client kubernetes.Interface, sink Sink, opts Options) (*Source, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.SyncTimeout == 0 {
		opts.SyncTimeout = DefaultSyncTimeout
	}
	for _, f := range []*func(){&opts.Changed, &opts.NodesChanged} {
		if *f == nil {
			*f = func() {}
		}
	}
	s := &Source{sink: sink, opts: opts, log: opts.Log, ready: make(chan struct{})}
	s.link = newLinkState(opts.Now, opts.Log)
	var err error
	if s.inf, err = newInformers(client, opts.NodeName, s.link); err != nil {
		return nil, err
	}
	if opts.Cache != nil {
		s.writer = cache.NewWriter(opts.Cache, s.cacheState, opts.Log)
	}
	handlers := []struct {
		inf toolscache.SharedIndexInformer
		h   toolscache.ResourceEventHandler
	}{
		{s.inf.services, toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { s.upsertService(o) },
			UpdateFunc: func(_, o any) { s.upsertService(o) },
			DeleteFunc: s.deleteService,
		}},
		{s.inf.slices, toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { s.upsertSlice(o) },
			UpdateFunc: func(_, o any) { s.upsertSlice(o) },
			DeleteFunc: s.deleteSlice,
		}},
		{s.inf.nodes, s.nodeHandler(func(*v1.Node) bool { return true })},
		// A fake clientset ignores field selectors; the name check keeps the own-node view
		// honest there too.
		{s.inf.ownNode, s.nodeHandler(func(n *v1.Node) bool { return n.Name == opts.NodeName })},
	}
	s.regs = map[toolscache.SharedIndexInformer]toolscache.ResourceEventHandlerRegistration{}
	for _, h := range handlers {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return nil, err
		}
		s.regs[h.inf] = reg
	}
	return s, nil
}

// Run starts the informers, waits for them (or, after SyncTimeout, programs from the cache),
// and follows the API server until ctx ends.
func (s *Source) Run(ctx context.Context) {
	// client-go logs through the context's logger: make that this component's.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(s.log.Handler()))
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, inf := range s.inf.all() {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	if s.writer != nil {
		wg.Go(func() { s.writer.Run(ctx) })
	}
	waitCtx, cancel := context.WithTimeout(ctx, s.opts.SyncTimeout)
	synced := s.waitSynced(waitCtx, s.inf.all()...)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if !synced {
		var waiting []string
		for i, inf := range s.inf.all() {
			if !s.hasSynced(inf)() {
				waiting = append(waiting, s.inf.names[i])
			}
		}
		lk := s.link.state(s.inf.names)
		s.log.Warn("the API server did not sync in time", "timeout", s.opts.SyncTimeout, "waitingFor", waiting,
			"reachable", lk.Reachable, "lastError", lk.LastError)
		// What did sync is taken from the API server, so the cache fills in only the rest.
		if s.hasSynced(s.inf.services, s.inf.slices)() {
			s.goLive()
		}
		if s.hasSynced(s.inf.nodes, s.inf.ownNode)() {
			s.nodesGoLive()
		}
		// Ready only with a whole state: the API server's (goLive marked it) or the cache's.
		// With neither, nothing is programmed until the API server answers, so a daemon
		// restarted before it ever saved a cache leaves the rules of its last run in place
		// instead of syncing them away.
		if s.loadCache() {
			s.markReady()
		}
	}
	wg.Go(func() {
		if s.waitSynced(ctx, s.inf.services, s.inf.slices) {
			s.goLive()
		}
	})
	wg.Go(func() {
		if s.waitSynced(ctx, s.inf.nodes, s.inf.ownNode) {
			s.nodesGoLive()
		}
	})
	<-ctx.Done()
}

// waitSynced waits until hasSynced holds for the informers, or ctx ends (false). It reacts
// at once: client-go's WaitForCacheSync looks every 100 ms, which cost a start 50 ms on
// average, up to 100 ms, between the lists' arrival and the first sync.
func (s *Source) waitSynced(ctx context.Context, infs ...toolscache.SharedIndexInformer) bool {
	checkers := make([]toolscache.DoneChecker, len(infs))
	for i, inf := range infs {
		checkers[i] = s.regs[inf].HasSyncedChecker()
	}
	return toolscache.WaitFor(ctx, "", checkers...)
}

// hasSynced reports whether the informers have listed and their handlers have seen the
// list: only then are later events changes rather than the first list arriving late.
func (s *Source) hasSynced(infs ...toolscache.SharedIndexInformer) toolscache.InformerSynced {
	return func() bool {
		for _, inf := range infs {
			if !s.regs[inf].HasSynced() {
				return false
			}
		}
		return true
	}
}

// Ready is closed once the sink holds a whole state to program: the API server's, the
// cache's, or, when neither came within SyncTimeout, the empty one.
func (s *Source) Ready() <-chan struct{} { return s.ready }

func (s *Source) markReady() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.readyClosed {
		s.readyClosed = true
		close(s.ready)
	}
}

// Link returns the state of the link to the API server.
func (s *Source) Link() Link {
	lk := s.link.state(s.inf.names)
	lk.Synced = s.hasSynced(s.inf.all()...)()
	s.mu.Lock()
	defer s.mu.Unlock()
	lk.FromCache, lk.CacheSince, lk.CacheSavedAt = s.fromCache, s.cacheSince, s.cacheSavedAt
	if s.writer != nil {
		var err error
		if lk.CacheWritten, err = s.writer.LastSave(); err != nil {
			lk.CacheError = err.Error()
		}
	}
	return lk
}

// loadCache programs the sink from the cache file, for whatever the API server has not
// delivered yet, and reports whether it did. A missing or unusable file is logged and
// otherwise ignored.
func (s *Source) loadCache() (loaded bool) {
	if s.opts.Cache == nil {
		s.log.Warn("no cluster state cache configured; nothing to program until the API server answers")
		return false
	}
	st, err := s.opts.Cache.Load()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.log.Warn("no cluster state cache yet; nothing to program until the API server answers", "file", s.opts.Cache.Path())
		return false
	case err != nil:
		s.log.Error("ignoring the cluster state cache; nothing to program until the API server answers", "file", s.opts.Cache.Path(), "err", err)
		return false
	}
	s.mu.Lock()
	svcs, nodes := !s.live, !s.nodesLive
	if svcs {
		s.sink.Replace(st.Services, st.EndpointSlices)
		s.fromCache, s.cacheSince, s.cacheSavedAt = true, s.opts.Now(), st.SavedAt
	}
	if nodes {
		s.cachedNodes = st.Nodes
	}
	s.mu.Unlock()
	s.log.Warn("serving from the cluster state cache until the API server answers", "file", s.opts.Cache.Path(),
		"savedAt", st.SavedAt, "services", len(st.Services), "endpointslices", len(st.EndpointSlices), "nodes", len(st.Nodes))
	if svcs {
		s.opts.Changed()
	}
	if nodes {
		s.opts.NodesChanged()
	}
	return true
}

// goLive makes the sink hold exactly what the API server has and follow it from then on.
// Events that arrived before are in the stores, which is what the sink is replaced with.
func (s *Source) goLive() {
	s.mu.Lock()
	if s.live {
		s.mu.Unlock()
		return
	}
	// The stores are read under the lock the handlers take, so no event slips between the
	// read and live: an event the read missed is applied by its handler afterwards.
	svcs := storeItems[*v1.Service](s.inf.services)
	eps := storeItems[*discovery.EndpointSlice](s.inf.slices)
	s.sink.Replace(svcs, eps)
	s.live = true
	wasCache := s.fromCache
	s.fromCache = false
	s.mu.Unlock()
	s.log.Info("synced with the API server", "services", len(svcs), "endpointslices", len(eps), "replacedCache", wasCache)
	s.opts.Changed()
	s.markReady()
	s.saveLater()
}

func (s *Source) nodesGoLive() {
	s.mu.Lock()
	if s.nodesLive {
		s.mu.Unlock()
		return
	}
	s.nodesLive = true
	s.cachedNodes = nil
	s.mu.Unlock()
	s.opts.NodesChanged()
	s.saveLater()
}

func (s *Source) saveLater() {
	if s.writer != nil {
		s.writer.Trigger()
	}
}

// storeItems returns an informer's objects sorted by namespace and name.
func storeItems[T interface {
	*v1.Service | *discovery.EndpointSlice | *v1.Node
	GetNamespace() string
	GetName() string
}](inf toolscache.SharedIndexInformer) []T {
	var out []T
	for _, o := range inf.GetStore().List() {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b T) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return out
}

// Nodes returns every Node (reduced to name, labels, pod CIDRs and addresses), sorted by
// name: the API server's once synced, the cache's before. The Nodes are shared: read only.
func (s *Source) Nodes() []*v1.Node {
	s.mu.Lock()
	live, cached := s.nodesLive, s.cachedNodes
	s.mu.Unlock()
	if !live {
		return slices.Clone(cached)
	}
	return storeItems[*v1.Node](s.inf.nodes)
}

// OwnNode returns this gateway's Node as the API server has it, or nil. It is shared: read
// only.
func (s *Source) OwnNode() *v1.Node {
	o, ok, _ := s.inf.ownNode.GetStore().GetByKey(s.opts.NodeName)
	if !ok {
		return nil
	}
	n, _ := o.(*v1.Node)
	return n
}

// cacheState is what the cache writer saves: everything, once everything is synced.
func (s *Source) cacheState() (cache.State, bool) {
	s.mu.Lock()
	ok := s.live && s.nodesLive
	s.mu.Unlock()
	if !ok {
		return cache.State{}, false
	}
	st := cache.State{
		Services:       storeItems[*v1.Service](s.inf.services),
		EndpointSlices: storeItems[*discovery.EndpointSlice](s.inf.slices),
	}
	for _, n := range storeItems[*v1.Node](s.inf.nodes) {
		c := *n
		// A Node's version moves with every heartbeat; the rest of what is kept does not.
		c.ResourceVersion = ""
		st.Nodes = append(st.Nodes, &c)
	}
	return st, true
}
