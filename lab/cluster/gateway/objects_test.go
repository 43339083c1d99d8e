package gateway

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/edgegate/edgegate/lab"
)

// testNamespace holds the test's Services and EndpointSlices.
const testNamespace = "gateway-e2e"

// Every Service of the test has a TCP port "http" (port → the backends' HTTP port) and a UDP
// port "dns" (53 → the backends' UDP port).
const (
	httpPort = "http"
	dnsPort  = "dns"
)

// service is a Service of the test: ClusterIP ip, TCP port 80 and UDP port 53, and node
// ports for both when nodePort is not zero (UDP's is nodePort+1).
func service(name, ip string, nodePort int32) *v1.Service {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name},
		Spec: v1.ServiceSpec{
			Type:      v1.ServiceTypeClusterIP,
			ClusterIP: ip,
			Ports: []v1.ServicePort{
				{Name: httpPort, Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(lab.BackendTCPPort)},
				{Name: dnsPort, Protocol: v1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(lab.BackendUDPPort)},
			},
		},
	}
	if nodePort != 0 {
		svc.Spec.Type = v1.ServiceTypeNodePort
		svc.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
		svc.Spec.Ports[0].NodePort = nodePort
		svc.Spec.Ports[1].NodePort = nodePort + 1
	}
	return svc
}

// slice is an IPv4 EndpointSlice named name for service with ready endpoints on the given
// backends (1..3), each on its own worker node, with both of the test's ports.
func slice(name, service string, backends ...int) *discovery.EndpointSlice {
	es := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNamespace, Name: name,
			Labels: map[string]string{discovery.LabelServiceName: service},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports: []discovery.EndpointPort{
			{Name: ptr.To(httpPort), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](lab.BackendTCPPort)},
			{Name: ptr.To(dnsPort), Protocol: ptr.To(v1.ProtocolUDP), Port: ptr.To[int32](lab.BackendUDPPort)},
		},
	}
	es.Endpoints = endpoints(backends...)
	return es
}

func endpoints(backends ...int) []discovery.Endpoint {
	eps := []discovery.Endpoint{}
	for _, b := range backends {
		eps = append(eps, discovery.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.200.2.1%d", b)},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("worker-%d", b)),
		})
	}
	return eps
}

func (e *env) createService(t *testing.T, svc *v1.Service, slices ...*discovery.EndpointSlice) {
	t.Helper()
	if _, err := e.admin.CoreV1().Services(testNamespace).Create(t.Context(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s: %v", svc.Name, err)
	}
	for _, s := range slices {
		e.createSlice(t, s)
	}
}

func (e *env) createSlice(t *testing.T, s *discovery.EndpointSlice) {
	t.Helper()
	if _, err := e.admin.DiscoveryV1().EndpointSlices(testNamespace).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create endpointslice %s: %v", s.Name, err)
	}
}

// updateService and updateSlice read, change and write an object, again on a conflict.
func (e *env) updateService(t *testing.T, name string, change func(*v1.Service)) {
	t.Helper()
	update(t, e.admin.CoreV1().Services(testNamespace), "service", name, change)
}

func (e *env) updateSlice(t *testing.T, name string, change func(*discovery.EndpointSlice)) {
	t.Helper()
	update(t, e.admin.DiscoveryV1().EndpointSlices(testNamespace), "endpointslice", name, change)
}

// update reads the object name of kind through c, changes and writes it, again on a
// conflict.
func update[T any](t *testing.T, c interface {
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
}, kind, name string, change func(T)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := c.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(o)
		_, err = c.Update(t.Context(), o, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update %s %s: %v", kind, name, err)
	}
}

func (e *env) deleteSlice(t *testing.T, name string) {
	t.Helper()
	if err := e.admin.DiscoveryV1().EndpointSlices(testNamespace).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete endpointslice %s: %v", name, err)
	}
}

// workerNode is another Node of the cluster: pod CIDRs and InternalIPs (a backend's
// addresses, on the gateway's bridge), as a node IPAM controller and a kubelet set them.
func (e *env) createNode(t *testing.T, name string, podCIDRs []string, internalIPs ...string) {
	t.Helper()
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NodeSpec{PodCIDR: podCIDRs[0], PodCIDRs: podCIDRs},
	}
	created, err := e.admin.CoreV1().Nodes().Create(t.Context(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	// A step that failed half-way must not leave its Node's route to the next step.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.admin.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete node %s: %v", name, err)
		}
	})
	for _, ip := range internalIPs {
		created.Status.Addresses = append(created.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: ip})
	}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(t.Context(), created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set node %s addresses: %v", name, err)
	}
}

// updateNode changes a Node's spec and metadata (status false) or its status (status true).
func (e *env) updateNode(t *testing.T, name string, status bool, change func(*v1.Node)) {
	t.Helper()
	nodes := e.admin.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(n)
		if status {
			_, err = nodes.UpdateStatus(t.Context(), n, metav1.UpdateOptions{})
		} else {
			_, err = nodes.Update(t.Context(), n, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		t.Fatalf("update node %s: %v", name, err)
	}
}

func (e *env) deleteNode(t *testing.T, name string) {
	t.Helper()
	if err := e.admin.CoreV1().Nodes().Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete node %s: %v", name, err)
	}
}

// readyCondition returns the Node's Ready condition, or a zero one.
func readyCondition(n *v1.Node) v1.NodeCondition {
	i := slices.IndexFunc(n.Status.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady })
	if i < 0 {
		return v1.NodeCondition{}
	}
	return n.Status.Conditions[i]
}

// waitGatewayReady waits until the gateway Node's Ready condition has status and, unless
// reason is "", reason.
func (e *env) waitGatewayReady(t *testing.T, within time.Duration, what string, status v1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, within, what, func() (bool, string) {
		n, err := e.admin.CoreV1().Nodes().Get(t.Context(), lab.GatewayNodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := readyCondition(n)
		state := fmt.Sprintf("Ready=%s reason %s (%s)", c.Status, c.Reason, c.Message)
		return c.Status == status && (reason == "" || c.Reason == reason), state
	})
}
