// Package cluster runs a real Kubernetes control plane for edgegate's tests and demo: etcd and
// kube-apiserver, built from the versions pinned in hack/apiserver (a module of its own, so
// the product never depends on k8s.io/kubernetes). A cluster lives on loopback, or inside a
// network namespace the test made (the lab's gateway namespace, so the gateway reaches it on
// 127.0.0.1 there), with a throwaway CA, a service-account key pair, static bearer tokens for
// an admin and for the gateway, and a kubeconfig for each. The apiserver can be stopped and
// restarted on the same address to simulate an outage; etcd keeps the objects meanwhile.
//
// Nothing else runs: no controller-manager, scheduler or kubelet, so objects are exactly what
// the test writes (no EndpointSlice controller, no default ServiceAccounts).
package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ServiceCIDR and ServiceCIDR6 are the cluster's service IP ranges
// (--service-cluster-ip-range, dual-stack): a Service's ClusterIPs must come from them. The
// IPv6 range is /108, the largest the apiserver's bitmap allocator accepts.
const (
	ServiceCIDR  = "10.96.0.0/16"
	ServiceCIDR6 = "fd00:96::/108"
)

// The gateway's identity in the token file unless Options say otherwise: a dedicated user and
// group that only RBAC (deploy/'s ClusterRole, bound by the test) gives rights to. It is not
// a system:node: user, so the Node authorizer grants it nothing.
const (
	DefaultGatewayUser  = "edgegate:gateway"
	DefaultGatewayGroup = "edgegate:gateways"
)

// How long each process may take to become ready; an apiserver starting on two busy cores
// takes 10–30 s.
const (
	etcdReadyWithin      = 30 * time.Second
	apiserverReadyWithin = 2 * time.Minute
)

var loopback = netip.MustParseAddr("127.0.0.1")

// Options describe a cluster. The zero value (plus Binaries, for Launch) is a cluster on the
// caller's own loopback.
type Options struct {
	// Binaries to run; clustertest.Start fills them from clustertest.EnsureBinaries when empty.
	Binaries Binaries
	// NetNS names a network namespace (ip netns) to run etcd and the apiserver in; clients
	// from this package dial into it. Empty runs them in the caller's namespace. Needs root.
	NetNS string
	// Address is where the apiserver listens (default 127.0.0.1); it must belong to NetNS.
	// etcd always listens on 127.0.0.1.
	Address netip.Addr
	// SANs are further IPs the serving certificate is valid for; 127.0.0.1, Address and the
	// first service IP always are.
	SANs []netip.Addr
	// GatewayUser and GatewayGroups name the gateway's token in the token file (defaults
	// DefaultGatewayUser and DefaultGatewayGroup).
	GatewayUser   string
	GatewayGroups []string
	// APIServerArgs are further kube-apiserver flags (an audit policy, for example), kept
	// across restarts.
	APIServerArgs []string
	// Dir holds certificates, tokens, kubeconfigs, etcd's data and the logs. Empty makes a
	// temporary directory that Close removes; clustertest.Start uses the test's TempDir.
	Dir string
}

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	Server            string // https://address:port, as seen inside NetNS
	NetNS             string // where the processes run; "" for the caller's namespace
	CAPEM             []byte // the CA that signed the serving certificate
	AdminToken        string // user "edgegate:admin" in group system:masters
	GatewayToken      string // bootstrap-token shaped, for Options.GatewayUser
	AdminKubeconfig   string // path
	GatewayKubeconfig string // path
	Dir               string
	EtcdLog           string // path of etcd's output
	// EtcdURL is etcd's client URL on loopback inside NetNS: tests write objects the
	// apiserver's validation would refuse (older clusters still hold them) straight into it.
	EtcdURL      string
	APIServerLog string // path of kube-apiserver's output, appended to on restart
	// Client is an admin clientset; it dials into NetNS and survives restarts.
	Client kubernetes.Interface

	ns     namespace
	ownDir bool
	// attached clusters run elsewhere (Attach); dial reaches them.
	attached bool
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	apiArgs  []string
	bins     Binaries
	etcd     *process

	mu        sync.Mutex
	apiserver *process // nil while stopped
}

// Launch starts etcd and kube-apiserver and returns once the apiserver is ready. Close stops
// them; on error nothing is left running.
func Launch(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Binaries.APIServer == "" || opts.Binaries.Etcd == "" {
		return nil, errors.New("launch cluster: no binaries given")
	}
	addr := opts.Address
	if !addr.IsValid() {
		addr = loopback
	}
	c := &Cluster{NetNS: opts.NetNS, ns: namespace(opts.NetNS), bins: opts.Binaries, Dir: opts.Dir}
	if c.Dir == "" {
		dir, err := os.MkdirTemp("", "edgegate-cluster-")
		if err != nil {
			return nil, fmt.Errorf("launch cluster: %w", err)
		}
		c.Dir, c.ownDir = dir, true
	}
	if err := c.launch(ctx, opts, addr); err != nil {
		err = fmt.Errorf("launch cluster: %w", err)
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	return c, nil
}

func (c *Cluster) launch(ctx context.Context, opts Options, addr netip.Addr) error {
	if c.ns != "" {
		// The processes listen on the namespace's loopback, which a new namespace has down.
		if out, err := exec.CommandContext(ctx, "ip", "-n", opts.NetNS, "link", "set", "lo", "up").CombinedOutput(); err != nil {
			return fmt.Errorf("ip -n %s link set lo up: %w: %s", opts.NetNS, err, out)
		}
	}
	c.AdminToken = rand.Text()
	c.GatewayToken = bootstrapStyleToken()
	gwUser, gwGroups := opts.GatewayUser, opts.GatewayGroups
	if gwUser == "" {
		gwUser = DefaultGatewayUser
	}
	if gwGroups == nil {
		gwGroups = []string{DefaultGatewayGroup}
	}
	tokens := []tokenEntry{
		{token: c.AdminToken, user: "edgegate:admin", groups: []string{"system:masters"}},
		{token: c.GatewayToken, user: gwUser, groups: gwGroups},
	}
	pkiDir := filepath.Join(c.Dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	p, err := writePKI(pkiDir, append([]netip.Addr{loopback, addr}, opts.SANs...), tokens)
	if err != nil {
		return err
	}
	c.CAPEM = p.caPEM

	ports, err := c.ns.freePorts(loopback, loopback, addr)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort := ports[0], ports[1], ports[2]
	c.Server = "https://" + netip.AddrPortFrom(addr, apiPort).String()

	c.EtcdLog = filepath.Join(c.Dir, "etcd.log")
	clientURL := "http://" + netip.AddrPortFrom(loopback, etcdClient).String()
	c.EtcdURL = clientURL
	peerURL := "http://" + netip.AddrPortFrom(loopback, etcdPeer).String()
	c.etcd, err = startProcess("etcd", c.ns, c.EtcdLog, c.bins.Etcd,
		"--name=edgegate-test",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=edgegate-test="+peerURL,
		// A test's objects need not survive a power cut; fsync per write slows every test.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	if err := c.waitEtcd(ctx, clientURL); err != nil {
		return err
	}

	c.APIServerLog = filepath.Join(c.Dir, "kube-apiserver.log")
	c.apiArgs = []string{
		"--etcd-servers=" + clientURL,
		"--bind-address=" + addr.String(),
		// Otherwise derived from the default route, which a test namespace lacks.
		"--advertise-address=" + addr.String(),
		"--secure-port=" + strconv.Itoa(int(apiPort)),
		"--tls-cert-file=" + p.certFile,
		"--tls-private-key-file=" + p.keyFile,
		// Nothing is generated with explicit certificates, but the default is /var/run.
		"--cert-dir=" + pkiDir,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPubFile,
		"--service-account-signing-key-file=" + p.saKeyFile,
		"--token-auth-file=" + p.tokensFile,
		// So that a test can also join the gateway with a real bootstrap-token Secret.
		"--enable-bootstrap-token-auth",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + ServiceCIDR + "," + ServiceCIDR6,
		// No controller-manager runs and the address is a test's: nobody needs the
		// "kubernetes" Service's endpoints.
		"--endpoint-reconciler-type=none",
	}
	c.apiArgs = append(c.apiArgs, opts.APIServerArgs...)
	if err := c.startAPIServer(ctx); err != nil {
		return err
	}
	if err := c.writeKubeconfigs(gwUser); err != nil {
		return err
	}
	c.Client, err = kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return fmt.Errorf("admin clientset: %w", err)
	}
	return nil
}

// AdminConfig returns a client config for the admin; it dials into NetNS.
func (c *Cluster) AdminConfig() *rest.Config { return c.restConfig(c.AdminToken) }

// GatewayConfig returns a client config with the gateway's token, for tests that check what
// the gateway's RBAC allows; it dials into NetNS.
func (c *Cluster) GatewayConfig() *rest.Config { return c.restConfig(c.GatewayToken) }

func (c *Cluster) restConfig(token string) *rest.Config {
	cfg := &rest.Config{
		Host:            c.Server,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAPEM},
		// Tests create objects in bursts; client-go's default 5 QPS would pace them.
		QPS:   100,
		Burst: 200,
	}
	switch {
	case c.dial != nil:
		cfg.Dial = c.dial
	case c.ns != "":
		cfg.Dial = c.ns.dial
	}
	return cfg
}

// Stop stops the apiserver, as an outage the gateway must ride out; etcd keeps running and
// keeps the objects. Stopping a stopped apiserver does nothing.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver != nil {
		c.apiserver.stop()
		c.apiserver = nil
	}
}

// Restart starts the apiserver again on the same address with the same certificates and
// tokens (stopping it first if it runs), so kubeconfigs and clients stay valid, and waits
// until it is ready.
func (c *Cluster) Restart(ctx context.Context) error {
	if c.attached {
		return errors.New("restart apiserver: the cluster is attached; only its owner can restart it")
	}
	c.Stop()
	if err := c.startAPIServer(ctx); err != nil {
		return fmt.Errorf("restart apiserver: %w", err)
	}
	return nil
}

// Running reports whether the apiserver process is up (not whether it is ready).
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil {
		return false
	}
	done, _ := c.apiserver.exited()
	return !done
}

// Close stops the apiserver and etcd and removes the directory Launch made.
func (c *Cluster) Close() error {
	c.Stop()
	if c.etcd != nil {
		c.etcd.stop()
	}
	if c.ownDir {
		if err := os.RemoveAll(c.Dir); err != nil {
			return fmt.Errorf("remove cluster state: %w", err)
		}
	}
	return nil
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := startProcess("kube-apiserver", c.ns, c.APIServerLog, c.bins.APIServer, c.apiArgs...)
	if err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx, p); err != nil {
		p.stop()
		return err
	}
	c.apiserver = p
	return nil
}

// LogTails returns the last lines of etcd's and kube-apiserver's logs, for a failed test's
// report.
func (c *Cluster) LogTails() string {
	return fmt.Sprintf("etcd log, last lines:\n%s\nkube-apiserver log, last lines:\n%s",
		lastLines(readFile(c.EtcdLog), 20), lastLines(readFile(c.APIServerLog), 40))
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}
