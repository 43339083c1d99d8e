package node

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// renewLease renews the Node's Lease in kube-node-lease, creating it when missing. The node
// lifecycle controller reads a renewed Lease as the node being alive, so the status itself
// need only be posted when it changes.
func (m *Member) renewLease(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RenewInterval)
	defer cancel()
	leases := m.client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	m.mu.Lock()
	cur := m.lease
	m.mu.Unlock()
	if cur == nil {
		got, err := leases.Get(ctx, m.cfg.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: m.cfg.Name, Namespace: v1.NamespaceNodeLease}}
			m.fillLease(l)
			created, err := leases.Create(ctx, l, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create lease %s/%s: %w", v1.NamespaceNodeLease, m.cfg.Name, err)
			}
			m.leaseRenewed(created)
			return nil
		case err != nil:
			return fmt.Errorf("get lease %s/%s: %w", v1.NamespaceNodeLease, m.cfg.Name, err)
		}
		cur = got
	}
	l := cur.DeepCopy()
	m.fillLease(l)
	updated, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		// A conflict or a deleted Lease: read it again on the retry.
		m.mu.Lock()
		m.lease = nil
		m.mu.Unlock()
		return fmt.Errorf("renew lease %s/%s: %w", v1.NamespaceNodeLease, m.cfg.Name, err)
	}
	m.leaseRenewed(updated)
	return nil
}

// fillLease makes l the gateway's, renewed now, and owned by the Node so that deleting the
// Node deletes its Lease, as the kubelet does.
func (m *Member) fillLease(l *coordinationv1.Lease) {
	m.mu.Lock()
	uid := m.uid
	m.mu.Unlock()
	l.Spec.HolderIdentity = ptr.To(m.cfg.Name)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(m.cfg.LeaseDuration.Seconds()))
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(m.now()))
	if uid != "" {
		l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: m.cfg.Name, UID: uid}}
	}
}

func (m *Member) leaseRenewed(l *coordinationv1.Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lease = l
	m.status.LastLeaseRenew = l.Spec.RenewTime.Time
}
