// Package lb is the cluster tier's LoadBalancer IP test: two edgegate gateways joined to a
// real kube-apiserver on a site's segment (lab.NewSite; the apiserver runs in the site's
// upstream namespace, on the front segment), with nothing but deploy/rbac.yaml's
// permissions. One of them allocates a Service's address from the pools ConfigMap; the
// owner among them announces it; killing the owner moves it; heartbeats blocked between
// the gateways (a partition of the segment, the apiserver still reachable) is settled by
// the node Leases so that only one gateway answers for it.
package lb

import (
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/daemon/lb/member"
	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
	"github.com/edgegate/edgegate/lab/labtest"
)

func TestMain(m *testing.M) { labtest.Main(m) }

const namespace = "lbtest"

var apiServerAddr = netip.MustParseAddr("10.210.0.250")

// poll calls cond every 50ms until it is done or within passed.
func poll(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
	}
	t.Fatalf("%s: not within %v: %s", what, within, last)
}

// startCluster starts an apiserver on site's front segment with deploy/rbac.yaml, the
// pools ConfigMap and the test's namespace, and returns it with gateway i's daemon flags
// (joined as the gateway group, nothing but the RBAC's permissions).
func startCluster(t *testing.T, site *lab.Site) (*cluster.Cluster, func(i int) []string) {
	c := clustertest.Start(t, cluster.Options{NetNS: site.Upstream.NS, Address: apiServerAddr,
		GatewayGroups: []string{"system:bootstrappers:edgegate"}})
	ctx := t.Context()
	if _, err := cluster.ApplyFile(ctx, c.Client, "../../../deploy/rbac.yaml"); err != nil {
		t.Fatalf("apply deploy/rbac.yaml: %v", err)
	}
	pools := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "edgegate-lb-pools", Namespace: "kube-system"},
		Data: map[string]string{"pools.yaml": lab.SitePoolsYAML}}
	if _, err := c.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, pools, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string][]byte{"token": []byte(c.GatewayToken + "\n"), "ca.crt": c.CAPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := func(i int) []string {
		return []string{"--proxy-mode=nftables", "--api-server", c.Server,
			"--token-file", filepath.Join(dir, "token"), "--ca-file", filepath.Join(dir, "ca.crt"),
			"--hostname-override", fmt.Sprintf("gw-%d", i+1), "--node-ip", site.Gateways[i].IPv4.String(),
			"--healthz-bind-address", "0.0.0.0:10256", "--metrics-bind-address", "127.0.0.1:10249",
			"--lb-announce"}
	}
	// The gateways must be allowed what they ask before they start (the bindings reach the
	// authorizer's cache a moment after they are created).
	poll(t, 30*time.Second, "deploy/rbac.yaml in effect", func() (bool, string) {
		gw, err := kubernetes.NewForConfig(c.GatewayConfig())
		if err != nil {
			return false, err.Error()
		}
		_, err = gw.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, fmt.Sprint(err)
	})
	return c, args
}

// createKeySecret creates the site's heartbeat key Secret as the deploy step does
// (deploy/lb-heartbeat-key.yaml).
func createKeySecret(t *testing.T, c *cluster.Cluster, key []byte) {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: member.KeySecretName, Namespace: member.KeySecretNamespace},
		Data: map[string][]byte{member.KeySecretKey: key}}
	if _, err := c.Client.CoreV1().Secrets(member.KeySecretNamespace).Create(t.Context(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createEndpoints gives the Service web the site's three backends.
func createEndpoints(t *testing.T, c *cluster.Cluster) {
	port, proto, name := int32(lab.BackendTCPPort), v1.ProtocolTCP, "http"
	slice := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: namespace, Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
	}
	for i := 1; i <= 3; i++ {
		ready, node := true, fmt.Sprintf("worker-%d", i)
		slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{Addresses: []string{fmt.Sprintf("10.210.1.1%d", i)},
			Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &node})
	}
	if _, err := c.Client.DiscoveryV1().EndpointSlices(namespace).Create(t.Context(), slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestLoadBalancerInCluster(t *testing.T) {
	site := labtest.NewSite(t, lab.SiteOptions{Prefix: "egq"})
	c, clusterArgs := startCluster(t, site)
	ctx := t.Context()
	createKeySecret(t, c, []byte(rand.Text()))
	args := func(i int) []string { return append(clusterArgs(i), "--lb-allocate", "--lb-default-class") }
	var daemons []*labtest.Daemon
	var macs []string
	for i, g := range site.Gateways {
		daemons = append(daemons, labtest.StartDaemon(t, g, args(i)...))
		mac, err := g.MAC("eth0")
		if err != nil {
			t.Fatal(err)
		}
		macs = append(macs, mac)
	}

	// A LoadBalancer Service without an address: the allocator gives it the pool's first.
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: namespace},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: []v1.ServicePort{{
			Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(lab.BackendTCPPort)}},
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster},
	}
	if _, err := c.Client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createEndpoints(t, c)
	var ip string
	poll(t, 30*time.Second, "the allocator writes the Service's address", func() (bool, string) {
		s, err := c.Client.CoreV1().Services(namespace).Get(ctx, "web", metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return false, fmt.Sprint(s.Status, err)
		}
		ip = s.Status.LoadBalancer.Ingress[0].IP
		return true, ""
	})
	if ip != lab.SitePool4[0].String() {
		t.Errorf("the Service got %s, want the pool's first address %s", ip, lab.SitePool4[0])
	}
	addr := ip + ":80"
	// The allocator writes the Service's status, then records the Event.
	poll(t, 30*time.Second, "an IPAllocated Event on the Service", func() (bool, string) {
		events, err := c.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web"})
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(fmt.Sprint(events.Items), "IPAllocated"), fmt.Sprint(events.Items)
	})

	// The owner answers; killing it moves the address to the other gateway.
	owner := -1
	poll(t, 30*time.Second, addr+" answers", func() (bool, string) {
		r, err := site.Client.AskOnce(addr, time.Second)
		if err != nil {
			return false, err.Error()
		}
		for i := range site.Gateways {
			if r.Reply.Source == lab.GatewayBackIPv4(i) {
				owner = i
			}
		}
		return owner >= 0, r.Reply.String()
	})
	for round := range 3 {
		if _, err := site.Through(addr, macs, owner, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		daemons[owner].Kill(t)
		killed := time.Now()
		at, err := site.Through(addr, macs, 1-owner, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("kill %d: gateway-%d killed, %s through gateway-%d after %v", round+1, owner+1, addr, 2-owner, at.Sub(killed).Round(time.Millisecond))
		daemons[owner] = labtest.StartDaemon(t, site.Gateways[owner], args(owner)...)
		if _, err := site.Through(addr, macs, owner, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}

	// A partition of the segment: heartbeats between the gateways dropped at the switch,
	// the apiserver still reachable. Each first takes the other for dead and answers for
	// the address; the node Leases, renewed by both, then settle it: one answers.
	block := "add table bridge egheartbeats\n" +
		"add chain bridge egheartbeats forward { type filter hook forward priority 0; }\n" +
		"add rule bridge egheartbeats forward udp dport 7480 drop\n"
	if out, err := site.Switch.Run("nft", block); err != nil {
		t.Fatalf("block heartbeats: %v %s", err, out)
	}
	blocked := time.Now()
	t.Cleanup(func() { _, _ = site.Switch.Run("nft", "delete", "table", "bridge", "egheartbeats") })
	watch, err := site.Client.WatchARP(netip.MustParseAddr(ip), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	var settled time.Time
	poll(t, 60*time.Second, "the partition settled (one gateway answers for the address)", func() (bool, string) {
		var states []string
		partitioned := 0
		for _, g := range site.Gateways {
			var st struct {
				LoadBalancer struct {
					Peers []struct{ Name, State string }
				}
			}
			if err := g.DashboardState(&st); err != nil {
				return false, err.Error()
			}
			for _, p := range st.LoadBalancer.Peers {
				states = append(states, g.Name+" sees "+p.Name+" "+p.State)
				if p.State == "partitioned" {
					partitioned++
				}
			}
		}
		if partitioned == 2 && settled.IsZero() {
			settled = time.Now()
		}
		return partitioned == 2, strings.Join(states, "; ")
	})
	t.Logf("heartbeats blocked: both gateways saw the other partitioned (alive by its Lease) after %v", settled.Sub(blocked).Round(time.Millisecond))
	// From a little after settling, every question is answered by one gateway only.
	time.Sleep(time.Second)
	mark := time.Now()
	time.Sleep(3 * time.Second)
	for _, d := range watch.DoubleAnswersSince(mark) {
		t.Errorf("after the partition settled, answered by both: %s", d)
	}
	if n := watch.RepliesSince(mark); n < 30 {
		t.Errorf("after the partition settled, %d ARP replies in 3 s (one request every 50 ms): the address is not answered", n)
	}
	if _, err := site.Switch.Run("nft", "delete", "table", "bridge", "egheartbeats"); err != nil {
		t.Fatal(err)
	}
}
