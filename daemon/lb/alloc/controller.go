// Package alloc runs edgegate's LoadBalancer IP allocation in the cluster. Every gateway
// follows the pools ConfigMap (Watcher: the announcer needs each address's interfaces); the
// one gateway holding the Lease kube-system/edgegate-lb-allocator (Controller) also follows
// the Services, decides their addresses with daemon/lb/pool's Allocate, writes
// status.loadBalancer.ingress where it changes and records an Event on the Service for each
// new outcome.
package alloc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/edgegate/edgegate/daemon/internal/fault"
	"github.com/edgegate/edgegate/daemon/lb/pool"
)

// DefaultLease is the Lease the gateways elect the allocator with, in Options.Namespace.
const DefaultLease = "edgegate-lb-allocator"

// Leader election timings (client-go's own defaults, which suit gateways on one LAN): a
// leader that stops renewing is replaced within LeaseDuration plus a RetryPeriod, about 17 s;
// one that shuts down releases the Lease and is replaced within a RetryPeriod. Allocation only
// has to be quick for new Services: addresses already assigned keep being announced, and
// their failover is daemon/lb/member's, which does not wait for this Lease.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Retries of a failed sync back off from minRetry to maxRetry.
const (
	minRetry = 500 * time.Millisecond
	maxRetry = 30 * time.Second
)

// Options configure a Controller.
type Options struct {
	// Client is the gateway's client; its requests stay within deploy/rbac.yaml.
	Client kubernetes.Interface
	// Identity is the gateway's name in the Lease (its node name); unique per gateway.
	Identity string
	// Namespace holds the Lease and the pools ConfigMap; default kube-system.
	Namespace string
	// Lease names the Lease; default DefaultLease.
	Lease string
	// Log is the component's logger; nil discards.
	Log *slog.Logger
	// DefaultClass makes edgegate the cluster's default load balancer: it also serves
	// LoadBalancer Services without a loadBalancerClass.
	DefaultClass bool
	// Recorder records the Events on Services; nil means an EventRecorder over Client.
	Recorder Recorder
	// Pools is the gateway's pools watcher, shared with the announcer; nil makes the
	// Controller run its own (reading Namespace/pool.ConfigMapName).
	Pools *Watcher
	// Leader election timings; zero means the defaults above.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Controller allocates LoadBalancer IPs while its gateway holds the Lease.
type Controller struct {
	o        Options
	log      *slog.Logger
	pools    *Watcher
	ownPools bool
	leading  atomic.Bool

	// Touched only by the leading goroutine, reset at each term.
	outcome map[string]string      // the last message recorded per Service
	written map[string]*v1.Service // what UpdateStatus returned, until the cache has it
	waiting bool                   // "no pools yet" has been logged this term
}

// New checks the options and returns a Controller; nothing is requested before Run.
func New(o Options) (*Controller, error) {
	if o.Client == nil {
		return nil, errors.New("lb allocator: no client")
	}
	if o.Identity == "" {
		return nil, errors.New("lb allocator: Identity (the node name) is required")
	}
	if o.Namespace == "" {
		o.Namespace = pool.ConfigMapNamespace
	}
	if o.Lease == "" {
		o.Lease = DefaultLease
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&o.LeaseDuration, DefaultLeaseDuration}, {&o.RenewDeadline, DefaultRenewDeadline}, {&o.RetryPeriod, DefaultRetryPeriod}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.Recorder == nil {
		o.Recorder = &EventRecorder{Client: o.Client, Identity: o.Identity, Log: o.Log, Now: time.Now}
	}
	c := &Controller{o: o, log: o.Log, pools: o.Pools}
	if c.pools == nil {
		c.pools = NewWatcher(o.Client, WatcherOptions{Namespace: o.Namespace, Log: o.Log})
		c.ownPools = true
	}
	// The elector checks the timings against each other; better here than at the first
	// election.
	if _, err := leaderelection.NewLeaderElector(c.electionConfig(func(context.Context) {}, func() {})); err != nil {
		return nil, fmt.Errorf("lb allocator: leader election: %w", err)
	}
	return c, nil
}

// Pools returns the pools in force.
func (c *Controller) Pools() pool.Pools { return c.pools.Pools() }

// Leading reports whether this gateway is the allocator now.
func (c *Controller) Leading() bool { return c.leading.Load() }

func (c *Controller) electionConfig(started func(context.Context), stopped func()) leaderelection.LeaderElectionConfig {
	return leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: c.o.Namespace, Name: c.o.Lease},
			Client:     c.o.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.o.Identity},
		},
		LeaseDuration: c.o.LeaseDuration,
		RenewDeadline: c.o.RenewDeadline,
		RetryPeriod:   c.o.RetryPeriod,
		// A gateway that stops (drain, update, shutdown) hands over at once instead of
		// making the others wait out the Lease; the elector is only stopped once the
		// allocation work has ended (see elect).
		ReleaseOnCancel: true,
		Name:            c.o.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: started,
			OnStoppedLeading: stopped,
			OnNewLeader: func(id string) {
				c.log.Info("LoadBalancer allocator elected", "leader", id, "self", id == c.o.Identity)
			},
		},
	}
}

// Run takes part in the election until ctx ends, allocating while it leads, and runs the
// pools watcher when the Controller owns it.
func (c *Controller) Run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(c.log.Handler()))
	var wg sync.WaitGroup
	defer wg.Wait()
	if c.ownPools {
		wg.Go(func() {
			if err := c.pools.Run(ctx); err != nil {
				c.log.Error("LoadBalancer pools watcher stopped", "err", err)
			}
		})
	}
	for ctx.Err() == nil {
		if err := c.elect(ctx); err != nil {
			return err
		}
	}
	return nil
}

// elect runs one election: it returns when ctx ends or when leadership is lost, and only
// after the allocation work of the term has stopped, so that the Lease is released (or
// expires) with no status write of this gateway still in flight.
func (c *Controller) elect(ctx context.Context) error {
	// The elector's own context ends only after the work has: cancelling it releases the
	// Lease.
	electCtx, stopElect := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElect()
	var (
		mu      sync.Mutex
		working bool
		over    bool
		work    sync.WaitGroup
	)
	stopIdle := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !working {
			stopElect()
		}
	})
	defer stopIdle()
	started := func(leadCtx context.Context) {
		mu.Lock()
		if over || ctx.Err() != nil {
			mu.Unlock()
			stopElect()
			return
		}
		working = true
		work.Add(1)
		mu.Unlock()
		defer work.Done()
		workCtx, cancel := context.WithCancel(leadCtx)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		c.lead(workCtx)
		stopElect()
	}
	le, err := leaderelection.NewLeaderElector(c.electionConfig(started, func() {}))
	if err != nil {
		return fmt.Errorf("lb allocator: leader election: %w", err)
	}
	le.Run(electCtx)
	mu.Lock()
	over = true
	mu.Unlock()
	work.Wait()
	return nil
}

// lead allocates until ctx ends: a Services informer, and one sync per batch of changes to
// the Services or the pools, retried with backoff when a write fails.
func (c *Controller) lead(ctx context.Context) {
	c.leading.Store(true)
	defer c.leading.Store(false)
	c.outcome, c.written, c.waiting = map[string]string{}, map[string]*v1.Service{}, false
	c.log.Info("LoadBalancer allocator: leading", "lease", c.o.Namespace+"/"+c.o.Lease, "self", c.o.Identity)
	defer c.log.Info("LoadBalancer allocator: no longer leading", "self", c.o.Identity)

	svcs := c.o.Client.CoreV1().Services(metav1.NamespaceAll)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return svcs.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return svcs.Watch(ctx, opts)
		},
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(toolscache.ToListWatcherWithWatchListSemantics(lw, c.o.Client), &v1.Service{},
		toolscache.SharedIndexInformerOptions{ObjectDescription: "services (lb allocator)"})
	trigger := make(chan struct{}, 1)
	poke := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	})
	if err != nil {
		c.log.Error("LoadBalancer allocator: services informer", "err", err)
		return
	}
	// The informer stops before the wait for it, also when a panic unwinds this function:
	// waiting first would hold the panic, and a dead allocator would keep the Lease.
	infCtx, stopInformer := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopInformer()
	wg.Go(func() { inf.RunWithContext(infCtx) })
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return
	}
	retry := time.NewTimer(maxRetry)
	retry.Stop()
	delay := time.Duration(0)
	for {
		fault.Point(fault.LBAlloc)
		st := c.pools.State()
		if err := c.sync(ctx, inf.GetStore(), st); err != nil && ctx.Err() == nil {
			delay = min(max(2*delay, minRetry), maxRetry)
			c.log.Warn("LoadBalancer allocation incomplete; retrying", "in", delay, "err", err)
			retry.Reset(delay)
		} else {
			delay = 0
			retry.Stop()
		}
		select {
		case <-ctx.Done():
			retry.Stop()
			return
		case <-trigger:
		case <-st.Changed:
		case <-retry.C:
		}
	}
}

// sync allocates from the Services in store and writes what changed.
func (c *Controller) sync(ctx context.Context, store toolscache.Store, st PoolState) error {
	if !st.Loaded {
		if st.Synced && !c.waiting {
			c.log.Warn("LoadBalancer allocator: no address pools configured; Services are left as they are", "err", st.Err)
			c.waiting = true
		}
		return nil
	}
	c.waiting = false
	svcs, byName := c.services(store)
	var errs []error
	for _, a := range pool.Allocate(st.Pools, svcs, pool.Options{DefaultClass: c.o.DefaultClass}) {
		if err := c.apply(ctx, byName[a.Service], a); err != nil {
			errs = append(errs, err)
		}
	}
	for name := range c.outcome {
		if _, ok := byName[name]; !ok {
			delete(c.outcome, name)
		}
	}
	return errors.Join(errs...)
}

// services lists the cached Services, each replaced by what this gateway wrote last while
// the cache has not caught up with it: a sync between a write and its watch event would
// otherwise see the old status, and write again or hand the address out twice.
func (c *Controller) services(store toolscache.Store) ([]*v1.Service, map[string]*v1.Service) {
	objs := store.List()
	svcs := make([]*v1.Service, 0, len(objs))
	byName := make(map[string]*v1.Service, len(objs))
	for _, o := range objs {
		svc, ok := o.(*v1.Service)
		if !ok {
			continue
		}
		name := svc.Namespace + "/" + svc.Name
		if w, ok := c.written[name]; ok {
			if w.UID == svc.UID && newer(w.ResourceVersion, svc.ResourceVersion) {
				svc = w
			} else {
				delete(c.written, name)
			}
		}
		svcs = append(svcs, svc)
		byName[name] = svc
	}
	for name := range c.written {
		if _, ok := byName[name]; !ok {
			delete(c.written, name)
		}
	}
	return svcs, byName
}

// newer compares resource versions as etcd's integers (as client-go's mutation cache
// does); anything else counts as not newer, which falls back to the cache.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// apply writes one Service's outcome when its status differs, and records an Event when
// the outcome is new.
func (c *Controller) apply(ctx context.Context, svc *v1.Service, a pool.Assignment) error {
	name := a.Service
	typ, reason, msg := v1.EventTypeNormal, ReasonAllocated, describe(a)
	if a.Err != nil {
		typ, reason = v1.EventTypeWarning, ReasonFailed
	}
	want := pool.Ingress(a.IPs)
	if pool.IngressEqual(svc.Status.LoadBalancer.Ingress, want) {
		// Nothing to write. A failure nobody was told of this term is told once; a
		// success was announced when it was written.
		if a.Err != nil && c.outcome[name] != msg {
			c.log.Warn("LoadBalancer allocation failed", "service", name, "reason", a.Err.Detail)
			c.o.Recorder.Event(ctx, svc, typ, reason, msg)
		}
		c.outcome[name] = msg
		return nil
	}
	released := ingressIPs(svc.Status.LoadBalancer.Ingress)
	upd := svc.DeepCopy()
	upd.Status.LoadBalancer.Ingress = want
	got, err := c.o.Client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil // gone meanwhile: its delete event brings the next sync
	}
	if err != nil {
		return fmt.Errorf("service %s: write status.loadBalancer.ingress: %w", name, err)
	}
	c.written[name] = got
	if a.Err != nil {
		if released != "" {
			msg += "; released " + released
		}
		c.log.Warn("LoadBalancer allocation failed", "service", name, "reason", a.Err.Detail, "released", released)
	} else {
		c.log.Info("LoadBalancer IPs allocated", "service", name, "ips", ipList(a), "pools", strings.Join(a.Pools, ","), "previous", released)
	}
	c.o.Recorder.Event(ctx, got, typ, reason, msg)
	c.outcome[name] = describe(a)
	return nil
}

// describe is the Event message of an outcome.
func describe(a pool.Assignment) string {
	if a.Err != nil {
		return a.Err.Error()
	}
	parts := make([]string, len(a.IPs))
	for i, ip := range a.IPs {
		parts[i] = fmt.Sprintf("%s (pool %s)", ip, a.Pools[i])
	}
	msg := "assigned " + strings.Join(parts, ", ")
	if a.Note != "" {
		msg += "; " + a.Note
	}
	return msg
}

func ipList(a pool.Assignment) string {
	s := make([]string, len(a.IPs))
	for i, ip := range a.IPs {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}

func ingressIPs(ing []v1.LoadBalancerIngress) string {
	var s []string
	for _, i := range ing {
		if i.IP != "" {
			s = append(s, i.IP)
		}
	}
	return strings.Join(s, ",")
}
