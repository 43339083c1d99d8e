package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"

	"github.com/edgegate/edgegate/daemon/update"
)

// gatewayAnnotation marks a Node as an edgegate gateway: daemon/node registers it with the
// firmware's version (node.VersionAnnotation), and a rollout selects among those Nodes.
const gatewayAnnotation = "edgegate.dev/version"

// report writes this gateway's entry of r's status (a JSON merge patch of
// status.nodes.<node>: gateways never conflict), its Node's update annotation, and then
// the rollout's summary. An entry that would not change is not written. It returns the
// rollout as the API server has it afterwards.
func (c *Controller) report(ctx context.Context, r *FirmwareRollout, phase NodePhase, msg, attempt string) (*FirmwareRollout, error) {
	return c.write(ctx, r, phase, msg, attempt, "")
}

// reportHalt reports Failed and halts the rollout in the same write, so that neither is
// written without the other: no other gateway starts after the failure.
func (c *Controller) reportHalt(ctx context.Context, r *FirmwareRollout, reason, attempt string) (*FirmwareRollout, error) {
	return c.write(ctx, r, NodeFailed, reason, attempt, fmt.Sprintf("halted: gateway %s failed: %s", c.NodeName, reason))
}

// write is report and, when halt is not empty, a halt with that message. A halt is never
// undone by a gateway, so it needs no resourceVersion.
func (c *Controller) write(ctx context.Context, r *FirmwareRollout, phase NodePhase, msg, attempt, halt string) (*FirmwareRollout, error) {
	cur, ok := r.Status.Nodes[c.NodeName]
	from := c.Updater.Status().Version
	if ok && cur.To == r.Spec.Version && cur.From != "" {
		from = cur.From
	}
	e := NodeStatus{Phase: phase, From: from, To: r.Spec.Version, Message: msg, Attempt: attempt, Updated: metav1.NewTime(c.Now())}
	if ok && cur.Phase == e.Phase && cur.From == e.From && cur.To == e.To && cur.Message == e.Message && cur.Attempt == e.Attempt &&
		(halt == "" || r.Status.Phase == PhaseHalted) {
		return r, c.annotate(ctx, r.Name, phase)
	}
	status := map[string]any{"nodes": map[string]any{c.NodeName: e}}
	if halt != "" {
		status["phase"], status["message"] = PhaseHalted, halt
	}
	patch := map[string]any{
		// The UID cannot change: a rollout deleted and created again refuses the write.
		"metadata": map[string]any{"uid": r.UID},
		"status":   status,
	}
	nr, err := c.patchStatus(ctx, r.Name, patch)
	if err != nil {
		return r, fmt.Errorf("FirmwareRollout %s: status.nodes.%s: %w", r.Name, c.NodeName, err)
	}
	c.Log.Info("rollout", "rollout", r.Name, "phase", phase, "version", r.Spec.Version, "message", msg)
	if halt != "" {
		c.Log.Error("rollout halted", "rollout", r.Name, "message", halt)
	}
	if err := c.annotate(ctx, r.Name, phase); err != nil {
		return nr, err
	}
	return nr, c.summarize(ctx, nr)
}

// reportInvalid puts a malformed rollout's problem on its status message; the rollout is
// otherwise ignored.
func (c *Controller) reportInvalid(ctx context.Context, name string, uid types.UID, current, problem string) error {
	msg := "invalid: " + problem
	if current == msg {
		return nil
	}
	patch := map[string]any{"metadata": map[string]any{"uid": uid}, "status": map[string]any{"message": msg}}
	// Not decoded: the rollout may be one that does not decode.
	if _, err := c.patchStatusRaw(ctx, name, patch); err != nil {
		return fmt.Errorf("FirmwareRollout %s: status.message: %w", name, err)
	}
	c.Log.Warn("rollout ignored", "rollout", name, "problem", problem)
	return nil
}

// summary is the rollout's summary as this gateway computes it from the entries and the
// gateways' Nodes: the counts, and Complete once every selected gateway is updated. Halted
// stays.
func summary(r *FirmwareRollout, gateways []*v1.Node) Status {
	s := Status{Phase: PhaseProgressing, ObservedGeneration: r.Generation}
	for _, n := range gateways {
		if !r.selects(n.Labels) {
			continue
		}
		s.SelectedNodes++
		e, ok := r.Status.Nodes[n.Name]
		if !ok || e.To != r.Spec.Version {
			continue
		}
		switch {
		case e.Phase == NodeUpdated:
			s.UpdatedNodes++
		case e.Phase == NodeFailed:
			s.FailedNodes++
		case e.Phase.updating():
			s.UpdatingNodes++
		}
	}
	switch {
	case r.Status.Phase == PhaseHalted:
		s.Phase, s.Message = PhaseHalted, r.Status.Message
	case s.SelectedNodes > 0 && s.UpdatedNodes == s.SelectedNodes:
		s.Phase, s.Message = PhaseComplete, fmt.Sprintf("all %d selected gateways run %s", s.SelectedNodes, r.Spec.Version)
	default:
		s.Message = fmt.Sprintf("%d of %d selected gateways updated", s.UpdatedNodes, s.SelectedNodes)
		if s.UpdatingNodes > 0 {
			s.Message += fmt.Sprintf(", %d updating", s.UpdatingNodes)
		}
		if s.FailedNodes > 0 {
			s.Message += fmt.Sprintf(", %d failed", s.FailedNodes)
		}
	}
	return s
}

// summarize writes the summary when it differs, with the resourceVersion it was computed
// from, so that a summary from a stale view never overwrites a newer one (a halt, another
// gateway's entry): on a conflict it reads the rollout again and recomputes.
func (c *Controller) summarize(ctx context.Context, r *FirmwareRollout) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		want := summary(r, c.gateways())
		got := r.Status
		if got.Phase == want.Phase && got.Message == want.Message && got.ObservedGeneration == want.ObservedGeneration &&
			got.SelectedNodes == want.SelectedNodes && got.UpdatedNodes == want.UpdatedNodes &&
			got.UpdatingNodes == want.UpdatingNodes && got.FailedNodes == want.FailedNodes {
			return nil
		}
		patch := map[string]any{
			"metadata": map[string]any{"uid": r.UID, "resourceVersion": r.ResourceVersion},
			"status": map[string]any{"phase": want.Phase, "message": want.Message, "observedGeneration": want.ObservedGeneration,
				"selectedNodes": want.SelectedNodes, "updatedNodes": want.UpdatedNodes, "updatingNodes": want.UpdatingNodes, "failedNodes": want.FailedNodes},
		}
		_, err := c.patchStatus(ctx, r.Name, patch)
		if apierrors.IsConflict(err) {
			fresh, gerr := c.get(ctx, r.Name)
			if gerr != nil {
				return gerr
			}
			r = fresh
		}
		if err == nil && want.Phase != got.Phase {
			c.Log.Info("rollout phase", "rollout", r.Name, "phase", want.Phase, "message", want.Message)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("FirmwareRollout %s: status summary: %w", r.Name, err)
	}
	return nil
}

// gateways are the Nodes of edgegate gateways, from the informer's cache.
func (c *Controller) gateways() []*v1.Node {
	all, err := c.nodes.List(everything)
	if err != nil {
		return nil
	}
	var out []*v1.Node
	for _, n := range all {
		if _, ok := n.Annotations[gatewayAnnotation]; ok {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *v1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// patchStatus merge-patches the rollout's status subresource and returns the rollout
// as the API server has it afterwards.
func (c *Controller) patchStatus(ctx context.Context, name string, patch map[string]any) (*FirmwareRollout, error) {
	u, err := c.patchStatusRaw(ctx, name, patch)
	if err != nil {
		return nil, err
	}
	return Decode(u)
}

func (c *Controller) patchStatusRaw(ctx context.Context, name string, patch map[string]any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	return c.Dynamic.Resource(GVR).Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}, "status")
}

// get reads the rollout from the API server, for the decisions that must not rest on the
// informer's possibly older copy.
func (c *Controller) get(ctx context.Context, name string) (*FirmwareRollout, error) {
	u, err := c.Dynamic.Resource(GVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return Decode(u)
}

// annotate puts "<rollout>: <phase>" on the own Node.
func (c *Controller) annotate(ctx context.Context, rollout string, phase NodePhase) error {
	return c.patchNode(ctx, map[string]string{UpdateAnnotation: rollout + ": " + string(phase)}, nil)
}

// ensureNode keeps the running firmware's version and board on the own Node.
func (c *Controller) ensureNode(ctx context.Context, st update.Status) error {
	var lbl map[string]string
	if st.Board != "" && len(validation.IsValidLabelValue(st.Board)) == 0 {
		lbl = map[string]string{BoardLabel: st.Board}
	}
	return c.patchNode(ctx, map[string]string{VersionAnnotation: st.Version}, lbl)
}

// patchNode merge-patches annotations and labels of the own Node, unless the informer's
// copy has them already.
func (c *Controller) patchNode(ctx context.Context, annotations, lbls map[string]string) error {
	n, err := c.nodes.Get(c.NodeName)
	if err != nil {
		return nil // not registered yet: the next reconcile writes them
	}
	same := true
	for k, v := range annotations {
		if cur, ok := n.Annotations[k]; !ok || cur != v {
			same = false
		}
	}
	for k, v := range lbls {
		if cur, ok := n.Labels[k]; !ok || cur != v {
			same = false
		}
	}
	if same {
		return nil
	}
	meta := map[string]any{"annotations": annotations}
	if lbls != nil {
		meta["labels"] = lbls
	}
	b, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, c.NodeName, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("Node %s: metadata.annotations: %w", c.NodeName, err)
	}
	return nil
}
