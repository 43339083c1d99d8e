package cluster

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeStatus says what a Node's Ready condition says: "Ready", "NotReady (<reason>)", or
// "Unknown" without the condition.
func NodeStatus(n *v1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			if c.Status == v1.ConditionTrue {
				return "Ready"
			}
			return "NotReady (" + c.Reason + ")"
		}
	}
	return "Unknown"
}

// WaitNodeReady waits until the Node called name is Ready, for up to timeout; the error says
// what the Node last looked like.
func WaitNodeReady(ctx context.Context, client kubernetes.Interface, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "not registered"
	for {
		n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil && NodeStatus(n) == "Ready":
			return nil
		case err == nil:
			last = NodeStatus(n)
		default:
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s not Ready after %v (last: %s)", name, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
