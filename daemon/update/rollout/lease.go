package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/edgegate/edgegate/daemon/internal/fault"
)

// A rollout's slots are maxUnavailable Leases, edgegate-rollout-<rollout>-<i>: a gateway
// updates only while it holds one, so no more than maxUnavailable update at once. The
// holder is the Node's name, so that the firmware that boots after the switch recognises
// the slot as its own, and the Lease lasts long enough (LeaseDuration) to outlive the
// reboot; the Lease is renewed while held. The labels and annotation let an operator find
// them and tell one rollout from a later one of the same name, whose slots start free.
const (
	// LeaseRolloutLabel is the rollout's name on its slot Leases:
	// kubectl -n kube-node-lease get leases -l edgegate.dev/rollout=<name>.
	LeaseRolloutLabel = "edgegate.dev/rollout"
	// leaseUIDAnnotation is the rollout's UID.
	leaseUIDAnnotation = "edgegate.dev/rollout-uid"
)

// slotState describes one slot Lease as this gateway sees it.
type slotState int

const (
	slotFree slotState = iota
	slotMine
	slotTaken
)

// classify says whose the Lease is.
func (c *Controller) classify(l *coordinationv1.Lease, r *FirmwareRollout, now time.Time) slotState {
	h := ptr.Deref(l.Spec.HolderIdentity, "")
	switch {
	case h == "" || l.Annotations[leaseUIDAnnotation] != string(r.UID):
		return slotFree
	case h == c.NodeName:
		return slotMine
	case l.Spec.RenewTime == nil:
		return slotFree
	}
	// An expired slot is free: its holder died. Its entry still says it is updating, which
	// update checks before it goes ahead.
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	if now.After(l.Spec.RenewTime.Add(d)) {
		return slotFree
	}
	return slotTaken
}

// acquire returns the slot Lease this gateway holds for r, taking a free one when it holds
// none; "" and the holders of the others when every slot is taken.
func (c *Controller) acquire(ctx context.Context, r *FirmwareRollout) (string, []string, error) {
	leases := c.Client.CoordinationV1().Leases(c.LeaseNamespace)
	now := c.Now()
	n := r.maxUnavailable()
	found := make([]*coordinationv1.Lease, n)
	// Its own slot first: after a reboot the gateway carries on with the slot it took.
	for i := range n {
		l, err := leases.Get(ctx, leaseName(r.Name, i), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return "", nil, fmt.Errorf("FirmwareRollout %s: slot Lease %s/%s: %w", r.Name, c.LeaseNamespace, leaseName(r.Name, i), err)
		}
		if c.classify(l, r, now) == slotMine {
			c.renew(r.Name, l.Name)
			return l.Name, nil, nil
		}
		found[i] = l
	}
	var holders []string
	for i, l := range found {
		name := leaseName(r.Name, i)
		if l != nil {
			h := ptr.Deref(l.Spec.HolderIdentity, "")
			switch {
			case c.classify(l, r, now) == slotTaken:
				holders = append(holders, h)
				continue
			case l.Annotations[leaseUIDAnnotation] == string(r.UID) && c.stillUpdating(r, h):
				// Expired, but its holder is not done (a slow reboot): taking the slot
				// would only have mayGo give it back.
				holders = append(holders, fmt.Sprintf("%s (expired; its entry says %s)", h, r.Status.Nodes[h].Phase))
				continue
			}
		}
		took, err := c.take(ctx, r, name, l, now)
		if err != nil {
			return "", nil, err
		}
		if took {
			c.Log.Info("took a rollout slot", "rollout", r.Name, "lease", c.LeaseNamespace+"/"+name)
			c.renew(r.Name, name)
			return name, nil, nil
		}
		holders = append(holders, c.holder(ctx, name))
	}
	return "", holders, nil
}

// take creates the slot Lease, or takes over l (free) with its resourceVersion: when
// another gateway was faster, the API server refuses and take reports false.
func (c *Controller) take(ctx context.Context, r *FirmwareRollout, name string, l *coordinationv1.Lease, now time.Time) (bool, error) {
	leases := c.Client.CoordinationV1().Leases(c.LeaseNamespace)
	t := metav1.NewMicroTime(now)
	var err error
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.LeaseNamespace}}
		c.holdLease(l, r, t)
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		l = l.DeepCopy()
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		c.holdLease(l, r, t)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("FirmwareRollout %s: taking slot Lease %s/%s: %w", r.Name, c.LeaseNamespace, name, err)
	}
	return true, nil
}

// holdLease makes l this gateway's.
func (c *Controller) holdLease(l *coordinationv1.Lease, r *FirmwareRollout, t metav1.MicroTime) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[LeaseRolloutLabel] = r.Name
	l.Annotations[leaseUIDAnnotation] = string(r.UID)
	l.Spec.HolderIdentity = ptr.To(c.NodeName)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.LeaseDuration / time.Second))
	l.Spec.AcquireTime = &t
	l.Spec.RenewTime = &t
}

// renew keeps a held slot Lease renewed until release or the end of Run. A Lease found
// taken by another gateway (it expired meanwhile) is logged and no longer renewed.
func (c *Controller) renew(rollout, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.held[name]; ok {
		return
	}
	ctx, cancel := context.WithCancel(c.runCtx)
	done := make(chan struct{})
	c.held[name] = heldLease{rollout: rollout, cancel: cancel, done: done}
	go func() {
		defer close(done)
		tick := time.NewTicker(c.RenewInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			fault.Point(fault.RolloutLease)
			if err := c.renewOnce(ctx, name); err != nil {
				if ctx.Err() != nil {
					return
				}
				c.Log.Error("renewing a rollout slot failed", "lease", c.LeaseNamespace+"/"+name, "err", err)
				if errors.Is(err, errSlotLost) {
					return
				}
			}
		}
	}()
}

// errSlotLost: the slot expired and another gateway took it.
var errSlotLost = errors.New("taken by another gateway")

// heldLease is a slot Lease being renewed.
type heldLease struct {
	rollout string
	cancel  context.CancelFunc
	done    chan struct{}
}

func (c *Controller) renewOnce(ctx context.Context, name string) error {
	leases := c.Client.CoordinationV1().Leases(c.LeaseNamespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != c.NodeName {
			return fmt.Errorf("slot Lease %s/%s: %w (%q): it expired before a renewal", c.LeaseNamespace, name, errSlotLost, h)
		}
		t := metav1.NewMicroTime(c.Now())
		l.Spec.RenewTime = &t
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
}

// stopRenewing ends a held Lease's renewal and waits for it.
func (c *Controller) stopRenewing(name string) {
	c.mu.Lock()
	h, ok := c.held[name]
	delete(c.held, name)
	c.mu.Unlock()
	if ok {
		h.cancel()
		<-h.done
	}
}

// release gives up every slot Lease of r this gateway holds: those it renews and, after
// a reboot, those the API server says are its own.
func (c *Controller) release(ctx context.Context, r *FirmwareRollout) error {
	leases := c.Client.CoordinationV1().Leases(c.LeaseNamespace)
	names := map[string]bool{}
	for i := range r.maxUnavailable() {
		names[leaseName(r.Name, i)] = true
	}
	c.mu.Lock()
	for name, h := range c.held {
		if h.rollout == r.Name {
			names[name] = true
		}
	}
	c.mu.Unlock()
	for name := range names {
		c.stopRenewing(name)
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := leases.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ptr.Deref(l.Spec.HolderIdentity, "") != c.NodeName || l.Annotations[leaseUIDAnnotation] != string(r.UID) {
				return nil
			}
			l.Spec.HolderIdentity = nil
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
			if err == nil {
				c.Log.Info("released a rollout slot", "rollout", r.Name, "lease", c.LeaseNamespace+"/"+name)
			}
			return err
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("FirmwareRollout %s: releasing slot Lease %s/%s: %w", r.Name, c.LeaseNamespace, name, err)
		}
	}
	return nil
}

// stillUpdating reports whether gateway's entry says it is updating to r's version, and
// it is still a gateway the rollout selects: removing a dead gateway's Node frees its part
// of maxUnavailable.
func (c *Controller) stillUpdating(r *FirmwareRollout, gateway string) bool {
	e, ok := r.Status.Nodes[gateway]
	if !ok || e.To != r.Spec.Version || !e.Phase.updating() {
		return false
	}
	n, err := c.nodes.Get(gateway)
	if err != nil {
		return false
	}
	_, isGateway := n.Annotations[gatewayAnnotation]
	return isGateway && r.selects(n.Labels)
}

// holder names the holder of a slot another gateway just took, for the entry's message.
func (c *Controller) holder(ctx context.Context, name string) string {
	l, err := c.Client.CoordinationV1().Leases(c.LeaseNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return "another gateway"
	}
	return *l.Spec.HolderIdentity
}
