package qemu

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/board"
	"github.com/edgegate/edgegate/daemon/lb/member"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
)

// The cluster fault boot's data partition: the cluster (reached at fleetAPIAddr), the
// announcer and the allocator on, the pools from the cluster's ConfigMap.
const clusterFaultConfig = `apiServer: https://%s:6443
tokenFile: /var/lib/edgegate/token
caFile: /var/lib/edgegate/ca.crt
hostnameOverride: gw1
loadBalancer:
  announce: true
  allocate: true
  defaultClass: true
`

// TestClusterFaults is TestFaults for the goroutine families that run only in a cluster:
// the qemu-x86_64 firmware, built with the fault hook, joins a real kube-apiserver on the
// host (through guestfwd only) and serves testdata/firmwaretest/manifests/echo.yaml's
// Services from it; the guest test panics the cluster source's informer handlers, the
// LoadBalancer's Lease informer and its allocator's worker in turn, the host making each
// run (a Service annotated; the Leases renew by themselves), while the guest's client sends
// requests through the ClusterIP and the LoadBalancer IP the allocator gave echo-lb. qemu-arm64
// runs the same daemon code, whose standalone families TestFaults proves on both boards.
func TestClusterFaults(t *testing.T) {
	b, err := board.Load("qemu-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	Require(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := clustertest.Start(t, cluster.Options{GatewayGroups: []string{"system:bootstrappers:edgegate"},
		SANs: []netip.Addr{netip.MustParseAddr(fleetAPIAddr)}})
	if _, err := cluster.ApplyFile(ctx, c.Client, "../deploy/rbac.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "firmware-test"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ApplyFile(ctx, c.Client, "testdata/firmwaretest/manifests/echo.yaml"); err != nil {
		t.Fatal(err)
	}
	pools := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "edgegate-lb-pools", Namespace: "kube-system"},
		Data: map[string]string{"pools.yaml": faultPools}}
	if _, err := c.Client.CoreV1().ConfigMaps(pools.Namespace).Create(ctx, pools, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: member.KeySecretName, Namespace: member.KeySecretNamespace},
		Data: map[string][]byte{member.KeySecretKey: []byte(faultKey)}}
	if _, err := c.Client.CoreV1().Secrets(key.Namespace).Create(ctx, key, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRBAC(ctx, t, c)

	fw, buildTime := buildImage(ctx, t, testLog(t), TestImage{
		Board:    b,
		Init:     "github.com/edgegate/edgegate/daemon",
		Tags:     []string{"egfault"},
		Test:     "github.com/edgegate/edgegate/qemu/testdata/firmwaretest",
		TestArgs: []string{"-test.v=test2json", "-test.timeout=8m", "-test.run=^TestClusterFaults$"},
	})
	t.Logf("cluster fault image built in %v", buildTime.Round(time.Millisecond))
	disk := makeDataDiskWith(ctx, t, map[string]string{
		"config.yaml": fmt.Sprintf(clusterFaultConfig, fleetAPIAddr),
		"token":       c.GatewayToken + "\n",
		"ca.crt":      string(c.CAPEM),
	})
	relay := buildRelay(ctx, t)
	apiPort := c.Server[strings.LastIndex(c.Server, ":")+1:]
	vm := startVM(ctx, t, Options{
		Board: b, Kernel: fw.Kernel(), Initramfs: fw.Initramfs(),
		Cmdline: []string{"edgegate.test=1", "edgegate.ip=eth0:" + guestAddr, "edgegate.daemon.hang=10s"},
		// No way out: exactly the apiserver, through a relay to loopback.
		NICs:    []NIC{{Netdev: fmt.Sprintf("user,restrict=on,guestfwd=tcp:%s:6443-cmd:%s 127.0.0.1:%s", fleetAPIAddr, relay, apiPort)}},
		Disks:   []Disk{{Path: disk}},
		Timeout: 12 * time.Minute,
	})
	waitFor(t, vm, "EDGEGATE-READY")
	begin := waitFor(t, vm, TestBeginMarker)
	// The guest arms each fault, then the host makes its point run: every second until the
	// guest arms the next one, since the hook may see the armed file only after an event
	// (it looks every 100 ms), and the restarted daemon must see one too.
	stopPoking := func() {}
	for _, point := range []string{"cluster-informer", "lb-leases", "lb-alloc"} {
		waitFor(t, vm, "EGFAULT-ARMED "+point)
		stopPoking()
		stopPoking = func() {}
		switch point {
		case "cluster-informer":
			stopPoking = poke(ctx, t, c.Client, "echo")
		case "lb-alloc":
			stopPoking = poke(ctx, t, c.Client, "echo-lb")
		}
	}
	guest, err := vm.WaitForGuestTestFrom(begin)
	stopPoking()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("guest", guest.Report)
	poweredOff(t, vm)
	if got := runEnds(vm); got != "panic panic panic" {
		t.Errorf("PID 1 logged the daemon's runs ending as %q, want three panics", got)
	}
}

// poke annotates a firmware-test Service, which every informer of Services delivers, once a
// second until the returned stop is called.
func poke(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"edgegate.test/poked":"%d"}}}`, time.Now().UnixNano())
			if _, err := client.CoreV1().Services("firmware-test").Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
				t.Errorf("annotating %s: %v", name, err)
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// waitRBAC waits until the gateway's credentials are allowed what deploy/rbac.yaml grants
// (the bindings reach the authorizer's cache a moment after they are created).
func waitRBAC(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	gw, err := kubernetes.NewForConfig(c.GatewayConfig())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := gw.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("deploy/rbac.yaml not in effect after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
