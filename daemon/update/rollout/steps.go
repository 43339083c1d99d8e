package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgegate/edgegate/daemon/update"
)

// The steps of reconcile that act: the update up to the switch, and its ends.

// update takes a slot and updates the gateway up to the switch; the reboot follows.
func (c *Controller) update(ctx context.Context, r *FirmwareRollout, d decision) (time.Duration, error) {
	slot, holders, err := c.acquire(ctx, r)
	if err != nil {
		return 0, err
	}
	if slot == "" {
		_, err := c.report(ctx, r, NodeWaiting, fmt.Sprintf("waiting for one of %d rollout slots (held by %v)", r.maxUnavailable(), holders), "")
		return c.Poll, err
	}
	// The slot is the lock; the API server's entries are the check on it: a gateway whose
	// slot expired while it still updates (a slow reboot) counts as well.
	if ok, err := c.mayGo(ctx, r); !ok || err != nil {
		return c.Poll, err
	}
	a := d.attempt
	if !c.isDrained(r) {
		c.drain(r, true)
		if r, err = c.report(ctx, r, NodeDraining, fmt.Sprintf("health checks fail and the LoadBalancer IPs move to a peer; %s to settle", c.Settle), ""); err != nil {
			return 0, err
		}
		if !sleep(ctx, c.Settle) {
			return 0, nil
		}
	}
	if a == nil {
		if r, err = c.report(ctx, r, NodeDownloading, "streaming "+r.Spec.BundleURL+" into the inactive slot", ""); err != nil {
			return 0, err
		}
		staged, err := c.fetch(ctx, r)
		switch {
		case ctx.Err() != nil:
			return 0, nil
		case errors.Is(err, update.ErrBusy):
			return c.Poll, c.giveUp(ctx, r, "the updater is busy: "+err.Error())
		case errors.Is(err, update.ErrUnavailable):
			return 0, c.fail(ctx, r, decision{reason: err.Error()}, false)
		case err != nil:
			return 0, c.fail(ctx, r, decision{reason: err.Error(), attempt: attemptIf(staged)}, true)
		}
		a = &staged
		msg := fmt.Sprintf("staged %s in slot %s (%d bytes, sha256 and signature verified)", a.To.Version, a.To.Slot, a.Bytes)
		if r, err = c.report(ctx, r, NodeInstalling, msg, a.ID); err != nil {
			return 0, err
		}
	}
	// A last look before the point of no return.
	fresh, err := c.get(ctx, r.Name)
	switch {
	case apierrors.IsNotFound(err):
		c.cancel(r, "the rollout was deleted")
		c.drain(r, false)
		return 0, c.release(ctx, r)
	case err != nil:
		return 0, err
	case fresh.UID != r.UID || fresh.Spec.Version != r.Spec.Version || fresh.Spec.SHA256 != r.Spec.SHA256 || fresh.Spec.BundleURL != r.Spec.BundleURL:
		return c.Poll, c.giveUp(ctx, fresh, "the rollout's spec changed before the switch")
	case fresh.Status.Phase == PhaseHalted:
		return 0, c.halted(ctx, fresh, decision{act: actHalted, attempt: a})
	}
	if _, err := c.report(ctx, fresh, NodeRebooting, fmt.Sprintf("switching to %s in slot %s and rebooting", a.To.Version, a.To.Slot), a.ID); err != nil {
		return 0, err
	}
	if _, err := c.Updater.Activate(); err != nil {
		return 0, c.fail(ctx, fresh, decision{reason: "switching to the new slot: " + err.Error(), attempt: a}, true)
	}
	c.Log.Info("switched to the new firmware; the gateway reboots", "rollout", r.Name, "version", a.To.Version)
	return c.Poll, nil
}

func attemptIf(a update.Attempt) *update.Attempt {
	if a.ID == "" {
		return nil
	}
	return &a
}

// isDrained reports whether the gateway is drained for rollout r.
func (c *Controller) isDrained(r *FirmwareRollout) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.drainedFor == r.Name
}

// mayGo reads the rollout again once the slot is held: a halt, a changed spec or gateways
// still updating beyond maxUnavailable (their slots expired) send the slot back.
func (c *Controller) mayGo(ctx context.Context, r *FirmwareRollout) (bool, error) {
	fresh, err := c.get(ctx, r.Name)
	if err != nil {
		return false, err
	}
	var others []string
	for name := range fresh.Status.Nodes {
		if name != c.NodeName && c.stillUpdating(fresh, name) {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	var why string
	switch {
	case fresh.UID != r.UID || fresh.Generation != r.Generation:
		why = "the rollout changed"
	case fresh.Status.Phase == PhaseHalted:
		why = "the rollout halted"
	case len(others) >= fresh.maxUnavailable():
		why = fmt.Sprintf("gateways %v are still updating though their slots expired", others)
	default:
		return true, nil
	}
	if err := c.release(ctx, r); err != nil {
		return false, err
	}
	if fresh.UID == r.UID && fresh.Status.Phase != PhaseHalted {
		_, err = c.report(ctx, fresh, NodeWaiting, why, "")
	}
	return false, err
}

// giveUp abandons this gateway's update before the switch without failing the rollout:
// the entry first (so that the cancel is not taken for a failure), then the cancel, the
// drain and the slot.
func (c *Controller) giveUp(ctx context.Context, r *FirmwareRollout, why string) error {
	_, err := c.report(ctx, r, NodeWaiting, why, "")
	if err != nil {
		return err
	}
	c.cancel(r, why)
	c.drain(r, false)
	return c.release(ctx, r)
}

// finish reports Updated, undrains and gives the slot back.
func (c *Controller) finish(ctx context.Context, r *FirmwareRollout, d decision) error {
	id := ""
	if d.attempt != nil {
		id = d.attempt.ID
	}
	if _, err := c.report(ctx, r, NodeUpdated, d.reason, id); err != nil {
		return err
	}
	c.drain(r, false)
	return c.release(ctx, r)
}

// trial waits for the updater to commit the firmware this rollout switched to, holding
// the slot meanwhile.
func (c *Controller) trial(ctx context.Context, r *FirmwareRollout, d decision, st update.Status) (time.Duration, error) {
	id := ""
	if d.attempt != nil {
		id = d.attempt.ID
	}
	if d.attempt != nil {
		// Adopt the slot this gateway took before the reboot, so that it stays renewed.
		if _, _, err := c.acquireOwn(ctx, r); err != nil {
			return 0, err
		}
	}
	msg := fmt.Sprintf("trial boot of %s: waiting for it to prove healthy", st.Version)
	_, err := c.report(ctx, r, NodeRebooting, msg, id)
	return c.Poll, err
}

// acquireOwn renews the slot this gateway holds, if any, without taking a free one.
func (c *Controller) acquireOwn(ctx context.Context, r *FirmwareRollout) (string, bool, error) {
	leases := c.Client.CoordinationV1().Leases(c.LeaseNamespace)
	for i := range r.maxUnavailable() {
		name := leaseName(r.Name, i)
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return "", false, fmt.Errorf("FirmwareRollout %s: slot Lease %s/%s: %w", r.Name, c.LeaseNamespace, name, err)
		}
		if c.classify(l, r, c.Now()) == slotMine {
			c.renew(r.Name, name)
			return name, true, nil
		}
	}
	return "", false, nil
}

// fail reports Failed and, when halt, halts the rollout in the same write, before the
// slot goes back, so that no other gateway can start in between.
func (c *Controller) fail(ctx context.Context, r *FirmwareRollout, d decision, halt bool) error {
	id := ""
	if d.attempt != nil {
		id = d.attempt.ID
	}
	var err error
	if halt {
		r, err = c.reportHalt(ctx, r, d.reason, id)
	} else {
		r, err = c.report(ctx, r, NodeFailed, d.reason, id)
	}
	if err != nil {
		return err
	}
	c.drain(r, false)
	return c.release(ctx, r)
}

// halted keeps this gateway out of a halted rollout: a staged update of it is cancelled,
// and the entry says why the gateway does not start.
func (c *Controller) halted(ctx context.Context, r *FirmwareRollout, d decision) error {
	why := "not started: the rollout is halted"
	if d.attempt != nil {
		why = "given up before the switch: the rollout halted"
	}
	if cur, ok := r.Status.Nodes[c.NodeName]; ok && cur.To == r.Spec.Version && cur.Phase == NodeWaiting && cur.Message == why && d.attempt == nil && !c.isDrained(r) {
		return nil
	}
	return c.giveUp(ctx, r, why)
}
