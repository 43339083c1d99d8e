package main

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	benchNamespace = "bench"
	// otherNode owns every endpoint, so neither proxy sees a local one.
	otherNode = "bench-backends"
	// createWorkers bounds the concurrent creates: the apiserver and etcd share two cores
	// with the harness.
	createWorkers = 16
)

// endpointBase is where endpoint addresses start: 10.64.0.0/10 holds 4M unique addresses,
// enough for 30k services × 50 endpoints.
var endpointBase = netip.MustParseAddr("10.64.0.0")

func endpointIP(n int) string {
	b := endpointBase.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}).String()
}

// createNodes creates the Node objects the proxies look up by --hostname-override (kube-proxy
// takes its node IP from it) and the backends' node.
func createNodes(ctx context.Context, c kubernetes.Interface, nodes map[string]string) error {
	for name, ip := range nodes {
		n := &v1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: ip}}},
		}
		created, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create Node %s: %w", name, err)
		}
		// Addresses are status: a create drops them.
		created.Status = n.Status
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update Node %s status.addresses: %w", name, err)
		}
	}
	return nil
}

// createServices creates services ClusterIP Services, each with one EndpointSlice of
// endpoints ready endpoints, as the EndpointSlice controller would (no controller runs).
func createServices(ctx context.Context, c kubernetes.Interface, services, endpoints int) error {
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Namespace %s: %w", benchNamespace, err)
	}
	jobs := make(chan int)
	errc := make(chan error, createWorkers)
	var wg sync.WaitGroup
	for range createWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := createService(ctx, c, i, endpoints); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var err error
feed:
	for i := range services {
		select {
		case jobs <- i:
		case err = <-errc:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errc:
		default:
		}
	}
	return err
}

func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }
func sliceName(i int) string   { return serviceName(i) + "-0" }

// The port every Service and EndpointSlice has.
const (
	portName   = "http"
	targetPort = 8080
)

// endpointsOf are Service i's endpoints as created: ready, on otherNode.
func endpointsOf(i, endpoints int) []discovery.Endpoint {
	ready, node := true, otherNode
	eps := make([]discovery.Endpoint, 0, endpoints)
	for j := range endpoints {
		eps = append(eps, discovery.Endpoint{
			Addresses:  []string{endpointIP(i*endpoints + j)},
			Conditions: discovery.EndpointConditions{Ready: &ready},
			NodeName:   &node,
		})
	}
	return eps
}

func createService(ctx context.Context, c kubernetes.Interface, i, endpoints int) error {
	name := serviceName(i)
	single := v1.IPFamilyPolicySingleStack
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
		Spec: v1.ServiceSpec{
			Type:           v1.ServiceTypeClusterIP,
			IPFamilyPolicy: &single,
			IPFamilies:     []v1.IPFamily{v1.IPv4Protocol},
			Ports: []v1.ServicePort{{
				Name: portName, Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(targetPort),
			}},
		},
	}
	if _, err := c.CoreV1().Services(benchNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Service %s/%s: %w", benchNamespace, name, err)
	}
	pn, port, proto := portName, int32(targetPort), v1.ProtocolTCP
	slice := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: sliceName(i), Namespace: benchNamespace,
			Labels: map[string]string{
				discovery.LabelServiceName: name,
				discovery.LabelManagedBy:   "edgegate-bench",
			},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &pn, Port: &port, Protocol: &proto}},
		Endpoints:   endpointsOf(i, endpoints),
	}
	if _, err := c.DiscoveryV1().EndpointSlices(benchNamespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create EndpointSlice %s/%s: %w", benchNamespace, slice.Name, err)
	}
	return nil
}

// countObjects lists what the apiserver holds, so "all objects exist" is the apiserver's
// word, not the harness's.
func countObjects(ctx context.Context, c kubernetes.Interface) (services, endpoints int, err error) {
	svcs, err := c.CoreV1().Services(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: ""})
	if err != nil {
		return 0, 0, fmt.Errorf("list Services in %s: %w", benchNamespace, err)
	}
	slices, err := c.DiscoveryV1().EndpointSlices(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: ""})
	if err != nil {
		return 0, 0, fmt.Errorf("list EndpointSlices in %s: %w", benchNamespace, err)
	}
	for _, s := range slices.Items {
		endpoints += len(s.Endpoints)
	}
	return len(svcs.Items), endpoints, nil
}

// dispatched counts the service ports a proxy dispatches from its service map or services
// chain: TCP ports of ClusterIP Services (all namespaces: the apiserver's own "kubernetes"
// Service counts) with at least one ready endpoint. The full sync is in the kernel when the
// probe counts as many.
func dispatched(ctx context.Context, c kubernetes.Interface) (int, error) {
	svcs, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list Services: %w", err)
	}
	slices, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list EndpointSlices: %w", err)
	}
	// Ready endpoints by namespace/service and port name.
	ready := map[string]bool{}
	for _, s := range slices.Items {
		has := false
		for _, e := range s.Endpoints {
			has = has || e.Conditions.Ready == nil || *e.Conditions.Ready
		}
		if !has {
			continue
		}
		for _, p := range s.Ports {
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			ready[s.Namespace+"/"+s.Labels[discovery.LabelServiceName]+":"+name] = true
		}
	}
	n := 0
	for _, s := range svcs.Items {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == v1.ClusterIPNone {
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.Protocol == v1.ProtocolTCP && ready[s.Namespace+"/"+s.Name+":"+p.Name] {
				n++
			}
		}
	}
	return n, nil
}
