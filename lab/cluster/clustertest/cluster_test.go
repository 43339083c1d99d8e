package clustertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgegate/edgegate/lab/cluster"
)

const testNamespace = "edgegate-test"

// TestObjectsSurviveAPIServerRestart writes a Service and its EndpointSlice, stops the
// apiserver (requests then fail), starts it again and reads the same objects back.
func TestObjectsSurviveAPIServerRestart(t *testing.T) {
	c := Start(t, cluster.Options{})
	ctx := t.Context()

	want := writeService(t, c.Client)
	if got := readService(t, c.Client); !cmp.Equal(got, want) {
		t.Fatalf("read back differs from what was written (-got +want):\n%s", cmp.Diff(got, want))
	}

	stopping := time.Now()
	c.Stop()
	t.Logf("apiserver stopped in %v", time.Since(stopping).Round(10*time.Millisecond))
	if c.Running() {
		t.Fatal("apiserver still running after Stop")
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Client.CoreV1().Services(testNamespace).Get(short, "web", metav1.GetOptions{}); err == nil {
		t.Fatal("Get succeeded while the apiserver was stopped")
	}

	restarted := time.Now()
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver ready again %v after restart", time.Since(restarted).Round(100*time.Millisecond))
	if got := readService(t, c.Client); !cmp.Equal(got, want) {
		t.Fatalf("objects changed across the restart (-got +want):\n%s", cmp.Diff(got, want))
	}
}

// TestGatewayIdentity checks the gateway's token and kubeconfig: it authenticates as the
// gateway user with no rights until RBAC grants some, and the kubeconfig carries it.
func TestGatewayIdentity(t *testing.T) {
	c := Start(t, cluster.Options{GatewayUser: "edgegate:gateway:gw-1"})
	ctx := t.Context()

	if !regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`).MatchString(c.GatewayToken) {
		t.Errorf("gateway token %q is not bootstrap-token shaped", c.GatewayToken)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.GatewayKubeconfig)
	if err != nil {
		t.Fatalf("load gateway kubeconfig: %v", err)
	}
	// The kubeconfig, not a config this package built, is what the gateway will be given.
	gw, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := gw.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review with the gateway kubeconfig: %v", err)
	}
	u := review.Status.UserInfo
	if u.Username != "edgegate:gateway:gw-1" || !slices.Contains(u.Groups, cluster.DefaultGatewayGroup) {
		t.Errorf("gateway authenticates as %q in %v, want edgegate:gateway:gw-1 in %s", u.Username, u.Groups, cluster.DefaultGatewayGroup)
	}
	_, err = gw.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("gateway listed Services without any RBAC binding: err = %v, want Forbidden", err)
	}
}

// TestClusterInNetNS runs the cluster inside a namespace this test creates: clients from this
// package reach it, the test's own namespace cannot.
func TestClusterInNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		unavailable(t, "needs iproute2's ip")
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	ns := "egc-" + hex.EncodeToString(suffix)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		unavailable(t, "ip netns add: "+err.Error()+": "+string(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns, err, out)
		}
	})

	c := Start(t, cluster.Options{NetNS: ns})
	want := writeService(t, c.Client)
	if got := readService(t, c.Client); !cmp.Equal(got, want) {
		t.Fatalf("read back differs (-got +want):\n%s", cmp.Diff(got, want))
	}
	addr := netip.MustParseAddrPort(c.Server[len("https://"):])
	if conn, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		conn.Close()
		t.Errorf("apiserver %s answers in the test's own namespace; want it only inside %s", addr, ns)
	}
}

// serviceState is what the tests compare across reads: the fields a gateway consumes and the
// resource versions, which a restart must not change.
type serviceState struct {
	ClusterIP, ServiceRV, SliceRV string
	Ports                         []v1.ServicePort
	Endpoints                     []discovery.Endpoint
	SlicePorts                    []discovery.EndpointPort
}

func writeService(t *testing.T, cs kubernetes.Interface) serviceState {
	t.Helper()
	ctx := t.Context()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	svc, err := cs.CoreV1().Services(testNamespace).Create(ctx, &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{
			Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service: %v", err)
	}
	if !netip.MustParsePrefix(cluster.ServiceCIDR).Contains(netip.MustParseAddr(svc.Spec.ClusterIP)) {
		t.Errorf("ClusterIP %s outside %s", svc.Spec.ClusterIP, cluster.ServiceCIDR)
	}
	ready, port, name, proto := true, int32(8080), "http", v1.ProtocolTCP
	slice, err := cs.DiscoveryV1().EndpointSlices(testNamespace).Create(ctx, &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.200.2.11"}, Conditions: discovery.EndpointConditions{Ready: &ready}},
			{Addresses: []string{"10.200.2.12"}, Conditions: discovery.EndpointConditions{Ready: &ready}},
		},
		Ports: []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create endpointslice: %v", err)
	}
	return serviceState{
		ClusterIP: svc.Spec.ClusterIP, ServiceRV: svc.ResourceVersion, SliceRV: slice.ResourceVersion,
		Ports: svc.Spec.Ports, Endpoints: slice.Endpoints, SlicePorts: slice.Ports,
	}
}

func readService(t *testing.T, cs kubernetes.Interface) serviceState {
	t.Helper()
	ctx := t.Context()
	svc, err := cs.CoreV1().Services(testNamespace).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service: %v", err)
	}
	list, err := cs.DiscoveryV1().EndpointSlices(testNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: discovery.LabelServiceName + "=web",
	})
	if err != nil {
		t.Fatalf("list endpointslices: %v", err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d EndpointSlices for web, want 1", len(list.Items))
	}
	s := list.Items[0]
	return serviceState{
		ClusterIP: svc.Spec.ClusterIP, ServiceRV: svc.ResourceVersion, SliceRV: s.ResourceVersion,
		Ports: svc.Spec.Ports, Endpoints: s.Endpoints, SlicePorts: s.Ports,
	}
}
