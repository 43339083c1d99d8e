// Package gateway is the end-to-end cluster tier: the real edgegate binary, in the lab's
// gateway namespace, joined to a real kube-apiserver that runs in the lab's upstream namespace
// (so the gateway reaches it over the lab network, through its uplink, as a real gateway
// reaches its control plane), with nothing but deploy/rbac.yaml's permissions, and real TCP
// and UDP from the lab's client through the gateway to the lab's backends.
//
// Address plan (lab's, plus what this package adds):
//
//	client-1  10.200.1.2 ── gateway 10.200.1.1 (node IP, --node-ip) ── br0 10.200.2.1 ── backend-1..3 10.200.2.11..13
//	                        uplink 10.200.9.1 ── upstream 10.200.9.2: etcd (loopback) + kube-apiserver
//	Services   10.96.10.0/24 (cluster.ServiceCIDR is 10.96.0.0/16), node ports 30080..30099
//	pod CIDRs  10.244.<n>.0/24 and fd00:244:<n>::/64 of fake Nodes whose InternalIPs are backends
package gateway

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
	"github.com/edgegate/edgegate/lab/labtest"
)

// In a QEMU guest (qemu/cluster_test.go) this package's tests use the host's cluster, which
// the guest reaches through QEMU's guestfwd, and the firmware's own binary as the daemon.
var (
	attach = flag.String("edgegate.attach", "", "use this cluster (cluster.Remote.Encode) instead of starting one")
	bin    = flag.String("edgegate.bin", "", "the edgegate binary to test (default $EDGEGATE_BIN, or ./daemon built)")
	modes  = flag.String("edgegate.modes", "nftables,iptables", "the proxy modes TestFailClosedInCluster runs")
)

func TestMain(m *testing.M) {
	flag.Parse()
	if *bin != "" {
		os.Setenv("EDGEGATE_BIN", *bin)
	}
	if *attach != "" {
		// A guest has every prerequisite: a lab that cannot be built fails.
		os.Setenv("CI", "true")
	}
	labtest.Main(m)
}

// The gateway's identity: the group deploy/bootstrap-token.yaml gives a gateway's token and
// deploy/rbac.yaml binds, and a user name that no other client of the test uses, so the audit
// log tells the gateway's requests apart.
const (
	gatewayUser  = cluster.DefaultGatewayUser
	gatewayGroup = "system:bootstrappers:edgegate"
)

// apiServerAddr is the upstream namespace's address: the apiserver listens there.
var apiServerAddr = netip.MustParseAddr("10.200.9.2")

// gatewayUplink is the gateway's address towards upstream: the source of its API requests.
const gatewayUplink = "10.200.9.1"

// testUserAgent marks the requests the test itself makes with the gateway's token, so the
// audit check can tell them from the daemon's (edgegate/<version>).
const testUserAgent = "edgegate-lab-test"

// env is one lab with a cluster in its upstream namespace and the gateway's credentials.
type env struct {
	lab   *lab.Lab
	c     *cluster.Cluster
	admin kubernetes.Interface
	// gw is a client with the gateway's token (and testUserAgent).
	gw       kubernetes.Interface
	bin      string // the edgegate binary
	version  string // what it reports as its version
	dir      string // token, CA, state directory
	stateDir string
	audit    *auditLog
}

// newEnv builds the lab, starts the cluster in its upstream namespace with an audit log of
// the gateway's requests, and applies deploy/rbac.yaml.
func newEnv(t *testing.T) *env {
	t.Helper()
	l := labtest.New(t, lab.Options{Prefix: "egk"})
	e := &env{lab: l, dir: t.TempDir()}
	e.stateDir = filepath.Join(e.dir, "state")
	e.bin = labtest.DaemonBinary(t)
	out, err := exec.Command(e.bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", e.bin, err)
	}
	e.version = strings.TrimPrefix(strings.TrimSpace(string(out)), "edgegate ")

	if *attach != "" {
		e.attachCluster(t)
	} else {
		e.audit = newAuditLog(t, e.dir, gatewayUser)
		e.c = clustertest.Start(t, cluster.Options{
			APIServerArgs: e.audit.args(),
			NetNS:         l.Upstream.NS,
			Address:       apiServerAddr,
			GatewayUser:   gatewayUser,
			GatewayGroups: []string{gatewayGroup},
		})
	}
	e.admin = e.c.Client
	gwConfig := e.c.GatewayConfig()
	gwConfig.UserAgent = testUserAgent
	if e.gw, err = kubernetes.NewForConfig(gwConfig); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"token": []byte(e.c.GatewayToken + "\n"), "ca.crt": e.c.CAPEM} {
		if err := os.WriteFile(filepath.Join(e.dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	if *attach == "" {
		// Without deploy/rbac.yaml the gateway's token may do nothing: otherwise "works with
		// only deploy/rbac.yaml" would prove nothing. This refused request is also the audit
		// check's proof that the audit log records a refusal of this user.
		if _, err := e.gw.CoreV1().Services("").List(t.Context(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Fatalf("before deploy/rbac.yaml the gateway's token may list Services (err %v)", err)
		}
		clustertest.ApplyFile(t, e.admin, "../../../deploy/rbac.yaml")
	}
	// An attached cluster's owner applied deploy/rbac.yaml (a guest has no checkout).
	e.waitRBAC(t)
	_, err = e.admin.CoreV1().Namespaces().Create(t.Context(), &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %s: %v", testNamespace, err)
	}
	return e
}

// attachCluster uses the cluster *attach describes, as a guest reaches it: at the upstream
// namespace's address, as on the host, through a forwarder there to the guestfwd addresses
// the description names. The gateway reaches it exactly as it reaches a cluster of its own.
func (e *env) attachCluster(t *testing.T) {
	t.Helper()
	r, err := cluster.DecodeRemote(*attach)
	if err != nil {
		t.Fatal(err)
	}
	up := e.lab.Upstream
	for local, remote := range map[string]string{
		netip.AddrPortFrom(apiServerAddr, 6443).String(): r.Server,
		"127.0.0.1:2379": r.EtcdURL,
	} {
		u, err := url.Parse(remote)
		if err != nil {
			t.Fatal(err)
		}
		labtest.Forward(t, up, local, u.Host)
	}
	r.Server = "https://" + netip.AddrPortFrom(apiServerAddr, 6443).String()
	r.EtcdURL = "http://127.0.0.1:2379"
	if e.c, err = cluster.Attach(r, up.DialContext); err != nil {
		t.Fatal(err)
	}
	t.Logf("attached to the cluster at %s (etcd %s), forwarded from %s", r.Server, r.EtcdURL, up.Name)
}

// daemonArgs are the flags of a gateway joined like a real one: the API server's URL, a
// token file and the cluster's CA; its state in the test's directory, never /var/lib.
func (e *env) daemonArgs() []string {
	return []string{
		"--proxy-mode=nftables",
		"--api-server", e.c.Server,
		"--token-file", filepath.Join(e.dir, "token"),
		"--ca-file", filepath.Join(e.dir, "ca.crt"),
		"--state-dir", e.stateDir,
		"--hostname-override", lab.GatewayNodeName,
		"--node-ip", lab.NodeIPv4.String() + "," + lab.NodeIPv6.String(),
		"--zone", "lab-a",
		"--region", "lab",
		"--healthz-bind-address", "0.0.0.0:10256",
		"--metrics-bind-address", "127.0.0.1:10249",
		"--min-sync-period", "100ms",
		"--sync-period", "30s",
		"--full-sync-period", "2s",
		// The dashboard on its default address, in TLS: its fingerprints go on the Node.
		"--dashboard-bind-address", "node-ip:443",
	}
}

// waitRBAC waits until the apiserver's authorizer has the bindings just created, asked with
// the gateway's own token: a daemon started before that would be refused for a reason that
// is the test's, not deploy/rbac.yaml's.
func (e *env) waitRBAC(t *testing.T) {
	t.Helper()
	want := []authzv1.ResourceAttributes{
		{Verb: "watch", Resource: "services"},
		{Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices"},
		{Verb: "create", Resource: "nodes"},
		{Verb: "update", Resource: "nodes", Subresource: "status"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: v1.NamespaceNodeLease},
		{Verb: "create", Resource: "events", Namespace: metav1.NamespaceDefault},
	}
	eventually(t, 30*time.Second, "deploy/rbac.yaml in effect for the gateway's token", func() (bool, string) {
		for _, a := range want {
			r, err := e.gw.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(),
				&authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}}, metav1.CreateOptions{})
			if err != nil {
				return false, err.Error()
			}
			if !r.Status.Allowed {
				return false, fmt.Sprintf("%+v not allowed yet: %s", a, r.Status.Reason)
			}
		}
		return true, ""
	})
}

// partition refuses the gateway's connections to the apiserver in the upstream namespace
// (a TCP reset, as from a stopped apiserver) while the test's own clients, which dial from
// inside that namespace, still get through. It returns the heal function.
//
// It serves two purposes. The admin can change the cluster while the gateway cannot see it,
// so "the gateway resyncs to what it did not see" is certain rather than a race with the
// informers' reconnect backoff. And the gateway reaches a restarted apiserver only once it
// is ready (Cluster.Restart waits for /readyz), as behind a load balancer that checks
// /readyz: a request served while the authorizer's caches are still filling could be refused
// for a reason that is the apiserver's start, not deploy/rbac.yaml.
func (e *env) partition(t *testing.T) (heal func()) {
	t.Helper()
	port := e.c.Server[strings.LastIndex(e.c.Server, ":")+1:]
	labtest.Exec(t, e.lab.Upstream, "nft", "add table inet egpartition\n"+
		"add chain inet egpartition input { type filter hook input priority 0; }\n"+
		"add rule inet egpartition input ip saddr "+gatewayUplink+" tcp dport "+port+" reject with tcp reset")
	healed := false
	heal = func() {
		if !healed {
			healed = true
			labtest.Exec(t, e.lab.Upstream, "nft", "delete", "table", "inet", "egpartition")
		}
	}
	t.Cleanup(heal)
	return heal
}

// restartBehindPartition restarts the apiserver while the gateway cannot reach it, lets
// change run against the restarted apiserver, and returns the heal function.
func (e *env) restartBehindPartition(t *testing.T) (heal func()) {
	t.Helper()
	heal = e.partition(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	started := time.Now()
	if err := e.c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver ready again after %v", time.Since(started).Round(100*time.Millisecond))
	return heal
}
