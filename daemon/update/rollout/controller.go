// Package rollout is the gateway's part of a fleet rollout through the Kubernetes API:
// no update server, only a FirmwareRollout object (deploy/firmwarerollout-crd.yaml) that
// names a version, a bundle URL and its digest, which gateways (a Node selector) and how
// many may update at once (maxUnavailable).
//
// Every gateway runs a Controller. For each rollout that selects it and names a version it
// does not run, the gateway takes one of maxUnavailable slot Leases, drains (its health
// checks fail and its LoadBalancer IPs move to a peer), streams the bundle into the
// updater's inactive slot while it checks the digest, switches and reboots. The firmware
// that comes up carries on from the state the API server and the updater keep: once the
// updater committed the new firmware (it proved healthy), the gateway reports Updated,
// undrains and gives the slot back. When the old firmware comes back instead, the gateway
// reports Failed and halts the rollout, and no other gateway starts. Each gateway reports
// on its own entry of the rollout's status and on its own Node.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/edgegate/edgegate/daemon/update"
)

// Updater is what a rollout needs of the A/B updater; *update.Manager is one.
type Updater interface {
	Status() update.Status
	Install(ctx context.Context, r io.Reader, req update.Request) (update.Attempt, error)
	Activate() (update.Attempt, error)
	Cancel(source string) (update.Attempt, error)
}

var _ Updater = (*update.Manager)(nil)

// Defaults of the Controller's fields.
const (
	// DefaultSettle lets load balancers see the failing health checks and the peers take
	// over the LoadBalancer IPs before the gateway goes down.
	DefaultSettle = 20 * time.Second
	// DefaultLeaseDuration outlives the reboot of a slow gateway and its trial boot's
	// start, so that the firmware that comes up still holds its slot.
	DefaultLeaseDuration = 5 * time.Minute
	// DefaultPoll is how often a waiting gateway looks again (for a free slot, for the
	// updater's commit).
	DefaultPoll = 5 * time.Second
	// DefaultDownloadTimeout bounds one download of a bundle.
	DefaultDownloadTimeout = 15 * time.Minute
	// DefaultMaxBundleSize bounds a bundle: a kernel and an initramfs.
	DefaultMaxBundleSize = 1 << 30
	// DefaultLeaseNamespace holds the slot Leases: the gateway renews its node Lease there
	// already and may read and write every Lease in it (deploy/rbac.yaml), so the slots
	// open nothing more, whereas their changing names could only be granted in
	// kube-system with every other Lease there (the controllers' leader election).
	DefaultLeaseNamespace = v1.NamespaceNodeLease
)

// crdRetry is how often Run looks for the FirmwareRollout API while it is not installed.
const crdRetry = 30 * time.Second

// Controller is one gateway's rollout controller. The fields up to Updater are required.
type Controller struct {
	// NodeName is this gateway's Node.
	NodeName string
	// Client reads Nodes and writes the own Node and the slot Leases.
	Client kubernetes.Interface
	// Dynamic reads FirmwareRollouts and writes their status.
	Dynamic dynamic.Interface
	// Updater is the A/B updater of this boot.
	Updater Updater

	// Drain turns the gateway's drain for the rollout on or off: /healthz fails and the
	// LoadBalancer IPs go to a peer. It is called with false after every update this
	// gateway ends (Updated, Failed, given up), also in the firmware that booted since.
	Drain func(on bool)
	// Settle is the wait between draining and the download; 0 means DefaultSettle.
	Settle time.Duration
	// HTTPClient downloads bundles; nil means one with http.DefaultTransport's settings.
	// The firmware carries no system CA bundle: an https bundle URL needs a client whose
	// transport trusts the server's CA.
	HTTPClient *http.Client
	// DownloadTimeout bounds one download; 0 means DefaultDownloadTimeout.
	DownloadTimeout time.Duration
	// MaxBundleSize bounds a bundle; 0 means DefaultMaxBundleSize.
	MaxBundleSize int64
	// LeaseNamespace holds the slot Leases; "" means DefaultLeaseNamespace.
	LeaseNamespace string
	// LeaseDuration and RenewInterval are the slot Leases' (defaults DefaultLeaseDuration
	// and a fifth of it).
	LeaseDuration, RenewInterval time.Duration
	// Poll is how often a waiting gateway looks again; 0 means DefaultPoll.
	Poll time.Duration
	Log  *slog.Logger
	// Now is the clock of the Leases and the status times; nil means time.Now.
	Now func() time.Time

	runCtx   context.Context
	queue    workqueue.TypedRateLimitingInterface[string]
	rollouts cache.Indexer
	nodes    listersv1.NodeLister

	mu         sync.Mutex
	held       map[string]heldLease // slot Leases being renewed, by name
	drainedFor string               // the rollout Drain(true) was called for and not undone
}

var everything = labels.Everything()

func (c *Controller) defaults() error {
	switch {
	case c.NodeName == "":
		return errors.New("rollout controller: no NodeName")
	case c.Client == nil || c.Dynamic == nil:
		return errors.New("rollout controller: no API clients")
	case c.Updater == nil:
		return errors.New("rollout controller: no Updater")
	}
	if c.Settle == 0 {
		c.Settle = DefaultSettle
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if c.DownloadTimeout == 0 {
		c.DownloadTimeout = DefaultDownloadTimeout
	}
	if c.MaxBundleSize == 0 {
		c.MaxBundleSize = DefaultMaxBundleSize
	}
	if c.LeaseNamespace == "" {
		c.LeaseNamespace = DefaultLeaseNamespace
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.LeaseDuration / 5
	}
	if c.Poll == 0 {
		c.Poll = DefaultPoll
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Run watches the rollouts and acts on them until ctx ends; it returns an error only when
// the Controller is misconfigured. Slot Leases stay held when it returns: a gateway that
// stops to reboot into its new firmware keeps its slot. Run is called once per Controller.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.defaults(); err != nil {
		return err
	}
	defer c.HTTPClient.CloseIdleConnections()
	c.runCtx = ctx
	c.held = map[string]heldLease{}
	if !c.waitForAPI(ctx) {
		return nil
	}
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, 2*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "firmware-rollouts"})

	nf := informers.NewSharedInformerFactory(c.Client, 0)
	ni := nf.Core().V1().Nodes()
	c.nodes = ni.Lister()
	if _, err := ni.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueueAll() },
		DeleteFunc: func(any) { c.enqueueAll() },
		UpdateFunc: func(o, n any) {
			if nodeChanged(o, n) {
				c.enqueueAll()
			}
		},
	}); err != nil {
		return fmt.Errorf("rollout controller: %w", err)
	}
	rf := dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	ri := rf.ForResource(GVR).Informer()
	c.rollouts = ri.GetIndexer()
	enqueue := func(o any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := ri.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, DeleteFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) },
	}); err != nil {
		return fmt.Errorf("rollout controller: %w", err)
	}
	nf.Start(ctx.Done())
	rf.Start(ctx.Done())
	defer func() {
		c.queue.ShutDown()
		nf.Shutdown()
		rf.Shutdown()
		c.stopAll()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), ni.Informer().HasSynced, ri.HasSynced) {
		return nil
	}
	c.Log.Info("watching firmware rollouts", "node", c.NodeName, "version", c.Updater.Status().Version)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.next(ctx) {
	}
	return nil
}

// waitForAPI waits until the FirmwareRollout API answers: the CRD may be installed after
// the gateways start. False when ctx ended first.
func (c *Controller) waitForAPI(ctx context.Context) bool {
	logged := false
	for {
		_, err := c.Dynamic.Resource(GVR).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if !logged {
			hint := ""
			switch {
			case apierrors.IsNotFound(err):
				hint = " (kubectl apply -f deploy/firmwarerollout-crd.yaml)"
			case apierrors.IsForbidden(err):
				hint = " (kubectl apply -f deploy/rbac.yaml)"
			}
			c.Log.Warn("firmware rollouts unavailable until the API answers"+hint, "resource", GVR.String(), "err", err)
			logged = true
		}
		if !sleep(ctx, crdRetry) {
			return false
		}
	}
}

// nodeChanged reports a change that matters to a rollout: labels (selection) and whether
// the Node is a gateway; Node status updates do not.
func nodeChanged(o, n any) bool {
	a, ok1 := o.(*v1.Node)
	b, ok2 := n.(*v1.Node)
	if !ok1 || !ok2 {
		return true
	}
	_, ga := a.Annotations[gatewayAnnotation]
	_, gb := b.Annotations[gatewayAnnotation]
	return ga != gb || !labels.Equals(a.Labels, b.Labels)
}

func (c *Controller) enqueueAll() {
	for _, key := range c.rollouts.ListKeys() {
		c.queue.Add(key)
	}
}

// stopAll ends every renewal; the Leases stay held (see Run).
func (c *Controller) stopAll() {
	c.mu.Lock()
	names := make([]string, 0, len(c.held))
	for name := range c.held {
		names = append(names, name)
	}
	c.mu.Unlock()
	for _, name := range names {
		c.stopRenewing(name)
	}
}

// next handles one rollout; false once the queue shut down.
func (c *Controller) next(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	after, err := c.reconcile(ctx, key)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		c.Log.Error("rollout step failed; trying again", "rollout", key, "err", err)
		c.queue.AddRateLimited(key)
	default:
		c.queue.Forget(key)
		if after > 0 {
			c.queue.AddAfter(key, after)
		}
	}
	return true
}

// reconcile does this gateway's next step for one rollout and says when to look again.
func (c *Controller) reconcile(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := c.rollouts.GetByKey(key)
	if err != nil {
		return 0, err
	}
	if !exists {
		c.forget(key)
		return 0, nil
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return 0, fmt.Errorf("FirmwareRollout %s: unexpected %T in the cache", key, obj)
	}
	r, err := Decode(u)
	if err != nil {
		msg, _, _ := unstructured.NestedString(u.Object, "status", "message")
		return 0, c.reportInvalid(ctx, u.GetName(), u.GetUID(), msg, err.Error())
	}
	st := c.Updater.Status()
	n, err := c.nodes.Get(c.NodeName)
	var nodeLabels map[string]string
	if err == nil {
		nodeLabels = n.Labels
		if err := c.ensureNode(ctx, st); err != nil {
			c.Log.Warn("writing the firmware version on the Node failed", "err", err)
		}
	}
	d := decide(r, c.NodeName, nodeLabels, err == nil, st)
	if c.isDrained(r) && (d.act == actNone || d.act == actNoNode) {
		// Drained for an update that no longer applies (the gateway's labels changed
		// between two steps of it): give it up.
		if err := c.giveUp(ctx, r, "the rollout no longer selects this gateway"); err != nil {
			return 0, err
		}
	}
	switch d.act {
	case actNone:
		return 0, c.summarize(ctx, r)
	case actInvalid:
		return 0, c.reportInvalid(ctx, r.Name, r.UID, r.Status.Message, d.reason)
	case actNoNode:
		return c.Poll, nil
	case actUpdated:
		return 0, c.finish(ctx, r, d)
	case actTrial:
		return c.trial(ctx, r, d, st)
	case actRebooting:
		_, err := c.report(ctx, r, NodeRebooting, "switched to "+r.Spec.Version+"; rebooting", d.attempt.ID)
		return c.Poll, err
	case actFail:
		return 0, c.fail(ctx, r, d, true)
	case actUnavailable:
		return 0, c.fail(ctx, r, d, false)
	case actBusy:
		_, err := c.report(ctx, r, NodeWaiting, d.reason, "")
		return c.Poll, err
	case actHalted:
		return 0, c.halted(ctx, r, d)
	case actUpdate:
		return c.update(ctx, r, d)
	}
	return 0, fmt.Errorf("FirmwareRollout %s: no step for %v", r.Name, d.act)
}

// forget ends the renewal of a deleted rollout's slots; the Leases stay behind, free once
// they expire (delete them with their label, see deploy/README.md).
func (c *Controller) forget(rollout string) {
	c.mu.Lock()
	drained := c.drainedFor == rollout
	var names []string
	for name, h := range c.held {
		if h.rollout == rollout {
			names = append(names, name)
		}
	}
	c.mu.Unlock()
	for _, name := range names {
		c.stopRenewing(name)
	}
	if drained {
		// Deleted between two steps of this gateway's update (a step failed and waits
		// for its retry).
		c.Log.Warn("rollout deleted while the gateway drained for it; undraining", "rollout", rollout)
		c.drain(&FirmwareRollout{ObjectMeta: metav1.ObjectMeta{Name: rollout}}, false)
	}
}

// drain turns the drain on for rollout r, or off unless it is on for another rollout
// (whose update waits for a retry). Off is also called when no drain is known: the
// firmware that booted since the drain knows none.
func (c *Controller) drain(r *FirmwareRollout, on bool) {
	c.mu.Lock()
	switch {
	case on:
		c.drainedFor = r.Name
	case c.drainedFor == "" || c.drainedFor == r.Name:
		c.drainedFor = ""
	default:
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if c.Drain != nil {
		c.Drain(on)
	}
}
