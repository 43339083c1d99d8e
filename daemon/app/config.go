package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/edgegate/edgegate/daemon/dashboard"
	"github.com/edgegate/edgegate/daemon/kernel/conntrack"
	"github.com/edgegate/edgegate/daemon/lb/member"
	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/plan"
	"github.com/edgegate/edgegate/daemon/plan/ipvs"
	"github.com/edgegate/edgegate/daemon/plan/nft"
	"github.com/edgegate/edgegate/daemon/source/cluster"
	"github.com/edgegate/edgegate/daemon/update"
	"github.com/edgegate/edgegate/daemon/update/rollout"
)

// Config is the daemon's configuration. Flags use kube-proxy's spelling where the meaning is
// the same; --config reads the same fields from a YAML file (camelCase keys), and flags given
// on the command line win over the file.
type Config struct {
	ProxyMode          plan.Mode `json:"proxyMode"`
	HostnameOverride   string    `json:"hostnameOverride"`
	NodeIPs            []string  `json:"nodeIPs"`
	Zone               string    `json:"zone"`
	HealthzBindAddress string    `json:"healthzBindAddress"`
	MetricsBindAddress string    `json:"metricsBindAddress"`
	NodePortAddresses  []string  `json:"nodePortAddresses"`
	ClusterCIDRs       []string  `json:"clusterCIDR"`
	MasqueradeAll      bool      `json:"masqueradeAll"`
	MasqueradeBit      int       `json:"masqueradeBit"`
	Manifests          string    `json:"manifests"`
	SyncPeriod         Duration  `json:"syncPeriod"`
	MinSyncPeriod      Duration  `json:"minSyncPeriod"`
	FullSyncPeriod     Duration  `json:"fullSyncPeriod"`
	LogLevel           string    `json:"logLevel"`
	// EnableProfiling serves Go's /debug/pprof on the metrics address, as kube-proxy's does.
	EnableProfiling bool `json:"enableProfiling"`
	// IPVS is the ipvs mode's part, kube-proxy's KubeProxyConfiguration.ipvs.
	IPVS IPVSConfiguration `json:"ipvs"`
	// NFTables is the nftables mode's part (kube-proxy's KubeProxyConfiguration.nftables
	// has none of these fields).
	NFTables NFTablesConfiguration `json:"nftables"`
	// FastPath offloads established connections to Services to an nftables flowtable on
	// the gateway's interfaces (package daemon/kernel/fastpath), in nftables and iptables
	// modes.
	FastPath bool `json:"fastPath"`
	// Conntrack sizes the connection tracking table and sets its timeouts, kube-proxy's
	// KubeProxyConfiguration.conntrack.
	Conntrack ConntrackConfiguration `json:"conntrack"`
	// LoadBalancer announces, and may allocate, LoadBalancer IPs on the site's segment.
	LoadBalancer LoadBalancerConfiguration `json:"loadBalancer"`
	// Update is how the firmware tries a new slot after an update (firmware only).
	Update UpdateConfiguration `json:"update"`

	// The cluster: a kubeconfig, or the API server with a bearer token file and its CA.
	Kubeconfig   string  `json:"kubeconfig"`
	APIServer    string  `json:"apiServer"`
	TokenFile    string  `json:"tokenFile"`
	CAFile       string  `json:"caFile"`
	KubeAPIQPS   float32 `json:"kubeAPIQPS"`
	KubeAPIBurst int     `json:"kubeAPIBurst"`
	// StateDir keeps the last synced cluster state for starts without the API server.
	StateDir string `json:"stateDir"`
	Region   string `json:"region"`

	// The dashboard and operator API: where it listens (empty disables it; host "node-ip"
	// stands for each NodeIPs address) and the file of its access token (default: one
	// generated in StateDir at first start).
	DashboardBindAddress string `json:"dashboardBindAddress"`
	DashboardTokenFile   string `json:"dashboardTokenFile"`
	// Listeners caps the connections of each HTTP listener: healthz, metrics, the
	// dashboard, and the health-check node ports together.
	Listeners ListenerConfiguration `json:"listeners"`
	// Its TLS certificate and key (PEM); default: a pair generated in StateDir at first
	// start. Every address but loopback speaks TLS only.
	DashboardTLSCertFile       string `json:"dashboardTLSCertFile"`
	DashboardTLSPrivateKeyFile string `json:"dashboardTLSPrivateKeyFile"`
	// DashboardAllowedCIDRs are the sources it answers (besides loopback and the gateway
	// itself), enforced in the kernel and in the daemon.
	DashboardAllowedCIDRs []string `json:"dashboardAllowedCIDRs"`
	// DashboardOnLBInterfaces lets "node-ip" include a node IP on an interface that carries
	// LoadBalancer pools (the client side), which it otherwise leaves out.
	DashboardOnLBInterfaces bool `json:"dashboardOnLBInterfaces"`

	Cleanup bool `json:"-"`
	Version bool `json:"-"`
}

// ListenerConfiguration caps the connections an HTTP listener holds open; a connection over
// a cap is closed at once. The timeouts and size limits are listener.Default's.
type ListenerConfiguration struct {
	MaxConnectionsPerSource int `json:"maxConnectionsPerSource"`
	MaxConnections          int `json:"maxConnections"`
}

// config is listener.Default with c's caps.
func (c ListenerConfiguration) config() listener.Config {
	lc := listener.Default
	lc.MaxConnsPerSource, lc.MaxConns = c.MaxConnectionsPerSource, c.MaxConnections
	return lc
}

// IPVSConfiguration is the ipvs mode's configuration.
type IPVSConfiguration struct {
	// Scheduler is the default IPVS scheduler; a Service's edgegate.dev/ipvs-scheduler
	// annotation picks another for it.
	Scheduler string `json:"scheduler"`
}

// NFTablesConfiguration is the nftables mode's configuration.
type NFTablesConfiguration struct {
	// EndpointsPerTable is how many endpoint rules one nftables table holds before the
	// Services' dispatch is split over more tables (0: never); see nft.Shards.
	EndpointsPerTable int `json:"endpointsPerTable"`
}

// ConntrackConfiguration is kube-proxy's conntrack configuration, with its defaults: zero
// leaves a setting as the kernel has it.
type ConntrackConfiguration struct {
	MaxPerCore            int      `json:"maxPerCore"`
	Min                   int      `json:"min"`
	TCPEstablishedTimeout Duration `json:"tcpEstablishedTimeout"`
	TCPCloseWaitTimeout   Duration `json:"tcpCloseWaitTimeout"`
	TCPBeLiberal          bool     `json:"tcpBeLiberal"`
	UDPTimeout            Duration `json:"udpTimeout"`
	UDPStreamTimeout      Duration `json:"udpStreamTimeout"`
}

// UpdateConfiguration is the firmware update's trial boot: how many boots a new firmware
// gets, and how long each may take to become healthy before it reboots.
type UpdateConfiguration struct {
	Tries        int      `json:"tries"`
	TrialTimeout Duration `json:"trialTimeout"`
	// DrainSettle is how long a gateway a fleet rollout updates drains (its /healthz
	// failing, its LoadBalancer IPs handed over) before it downloads and reboots.
	DrainSettle Duration `json:"drainSettle"`
	// RolloutLease is how long a fleet rollout's slot Lease stays this gateway's without
	// renewal (it renews every fifth of it). A gateway whose reboot outlasts it keeps its
	// slot all the same while its entry says it is updating.
	RolloutLease Duration `json:"rolloutLease"`
}

// LoadBalancerConfiguration is the LoadBalancer IP part: the pools, their announcement
// among the site's gateways, and their allocation to Services.
type LoadBalancerConfiguration struct {
	// Announce: answer ARP and NDP for the LoadBalancer IPs this gateway owns among the
	// gateways on the pools' interfaces.
	Announce bool `json:"announce"`
	// Allocate: hand out LoadBalancer IPs from the pools to Services (cluster mode; one
	// gateway at a time holds the allocator's Lease).
	Allocate bool `json:"allocate"`
	// DefaultClass: allocate for Services without spec.loadBalancerClass too, not only for
	// edgegate's class.
	DefaultClass bool `json:"defaultClass"`
	// PoolsFile holds the pools (pools.yaml's format) instead of the cluster's ConfigMap;
	// standalone mode needs it.
	PoolsFile         string   `json:"poolsFile"`
	HeartbeatPort     int      `json:"heartbeatPort"`
	HeartbeatInterval Duration `json:"heartbeatInterval"`
	HeartbeatTimeout  Duration `json:"heartbeatTimeout"`
	// KeyFile holds the site's heartbeat key (HMAC-SHA256). Empty: in a cluster the key of
	// the Secret kube-system/edgegate-lb-heartbeat-key (nothing is announced until it is
	// read); standalone, announcing needs it.
	KeyFile string `json:"keyFile"`
	// InsecureUnsignedHeartbeats sends and takes unsigned heartbeats, with no replay
	// protection: any host on the segment can then take LoadBalancer IPs.
	InsecureUnsignedHeartbeats bool `json:"insecureUnsignedHeartbeats"`
}

// tuning is the configuration as conntrack.Tune takes it.
func (c ConntrackConfiguration) tuning() conntrack.Tuning {
	return conntrack.Tuning{MaxPerCore: c.MaxPerCore, Min: c.Min, TCPEstablished: c.TCPEstablishedTimeout.Duration,
		TCPCloseWait: c.TCPCloseWaitTimeout.Duration, UDP: c.UDPTimeout.Duration, UDPStream: c.UDPStreamTimeout.Duration,
		TCPBeLiberal: c.TCPBeLiberal}
}

// Duration reads "30s"-style durations from YAML.
type Duration struct{ time.Duration }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := time.ParseDuration(strings.Trim(string(b), `"`))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func defaults() Config {
	return Config{
		ProxyMode:          plan.ModeNFTables,
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		MasqueradeBit:      14,
		SyncPeriod:         Duration{30 * time.Second},
		MinSyncPeriod:      Duration{time.Second},
		FullSyncPeriod:     Duration{5 * time.Minute},
		LogLevel:           "info",
		KubeAPIQPS:         cluster.DefaultQPS,
		KubeAPIBurst:       cluster.DefaultBurst,
		StateDir:           "/var/lib/edgegate",
		IPVS:               IPVSConfiguration{Scheduler: ipvs.DefaultScheduler},
		NFTables:           NFTablesConfiguration{EndpointsPerTable: nft.DefaultPerTable},
		LoadBalancer: LoadBalancerConfiguration{HeartbeatPort: member.DefaultPort,
			HeartbeatInterval: Duration{member.DefaultInterval}, HeartbeatTimeout: Duration{member.DefaultTimeout}},
		Update: UpdateConfiguration{Tries: update.DefaultTries, TrialTimeout: Duration{update.DefaultTrialTimeout},
			DrainSettle: Duration{rollout.DefaultSettle}, RolloutLease: Duration{rollout.DefaultLeaseDuration}},
		Conntrack: ConntrackConfiguration{MaxPerCore: conntrack.DefaultTuning.MaxPerCore, Min: conntrack.DefaultTuning.Min,
			TCPEstablishedTimeout: Duration{conntrack.DefaultTuning.TCPEstablished}, TCPCloseWaitTimeout: Duration{conntrack.DefaultTuning.TCPCloseWait}},

		// The node's own addresses, in TLS, answering the private ranges: never every
		// interface of a gateway whose other side is the internet.
		DashboardBindAddress: dashboard.NodeIPHost + ":443",
		// A copy: decoding a configuration file writes into the slice it finds.
		DashboardAllowedCIDRs: slices.Clone(dashboard.DefaultAllowedCIDRs),
		Listeners: ListenerConfiguration{MaxConnectionsPerSource: listener.Default.MaxConnsPerSource,
			MaxConnections: listener.Default.MaxConns},
	}
}

// flagValue is a flag over a configuration field of a type the flag package has no flag
// for. The zero flagValue, which the flag package makes to tell a default from the zero
// value, formats as "".
type flagValue[T any] struct {
	v      *T
	format func(T) string
	parse  func(string) (T, error)
}

func (f flagValue[T]) String() string {
	if f.v == nil {
		return ""
	}
	return f.format(*f.v)
}

// Set stores what parse returns, also on an error (the flag package then refuses the
// command line).
func (f flagValue[T]) Set(s string) error {
	v, err := f.parse(s)
	*f.v = v
	return err
}

// listFlag is a comma-separated list; empty items are dropped.
func listFlag(v *[]string) flagValue[[]string] {
	return flagValue[[]string]{v: v, format: func(l []string) string { return strings.Join(l, ",") }, parse: func(s string) ([]string, error) {
		var l []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				l = append(l, p)
			}
		}
		return l, nil
	}}
}

func float32Flag(v *float32) flagValue[float32] {
	return flagValue[float32]{v: v, format: func(f float32) string { return strconv.FormatFloat(float64(f), 'g', -1, 32) },
		parse: func(s string) (float32, error) {
			f, err := strconv.ParseFloat(s, 32)
			return float32(f), err
		}}
}

func durationFlag(d *Duration) flagValue[time.Duration] {
	return flagValue[time.Duration]{v: &d.Duration, format: time.Duration.String, parse: time.ParseDuration}
}

// ParseConfig reads defaults, then --config, then the other flags (the command line
// without the program's name).
func ParseConfig(args []string) (Config, error) {
	c := defaults()
	fs := flag.NewFlagSet("edgegate", flag.ContinueOnError)
	configFile := fs.String("config", "", "YAML configuration file (flags given on the command line win)")
	fs.StringVar((*string)(&c.ProxyMode), "proxy-mode", string(c.ProxyMode), "proxy mode: nftables, iptables or ipvs")
	fs.StringVar(&c.IPVS.Scheduler, "ipvs-scheduler", c.IPVS.Scheduler, "ipvs mode: the default IPVS scheduler ("+strings.Join(ipvs.Schedulers, ", ")+")")
	fs.IntVar(&c.NFTables.EndpointsPerTable, "nftables-endpoints-per-table", c.NFTables.EndpointsPerTable, "nftables mode: endpoint rules one table holds before the Services' NAT dispatch is split over tables edgegate-services-N (every change has the kernel re-check its whole table); 0 never splits")
	fs.BoolVar(&c.FastPath, "fast-path", c.FastPath, "nftables and iptables modes: offload established connections to Services to an nftables flowtable on the gateway's interfaces, so their packets skip the hooks (needs a kernel with flowtables; ipvs mode never)")
	fs.StringVar(&c.HostnameOverride, "hostname-override", c.HostnameOverride, "this node's name (endpoints whose nodeName matches are local); default: the hostname")
	fs.Var(listFlag(&c.NodeIPs), "node-ip", "this node's IP addresses, comma-separated (one per family)")
	fs.StringVar(&c.Zone, "zone", c.Zone, "this node's topology zone (topology-aware routing)")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "address:port of /healthz and /livez; empty disables")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "address:port of /metrics; empty disables")
	fs.BoolVar(&c.EnableProfiling, "profiling", c.EnableProfiling, "serve Go's profiles at /debug/pprof/ on the metrics address (CPU, heap: where a sync's time and memory go)")
	fs.StringVar(&c.DashboardBindAddress, "dashboard-bind-address", c.DashboardBindAddress, "address:port of the dashboard and operator API (never a NodePort-range port): TLS but on loopback; node-ip:PORT is each --node-ip not on a LoadBalancer pool's interface (none: 127.0.0.1); empty disables")
	fs.StringVar(&c.DashboardTokenFile, "dashboard-token-file", c.DashboardTokenFile, "file holding the dashboard's access token; default: generated at first start into --state-dir")
	fs.IntVar(&c.Listeners.MaxConnectionsPerSource, "listener-max-connections-per-source", c.Listeners.MaxConnectionsPerSource, "connections one source address may hold open to each HTTP listener (healthz, metrics, dashboard, the health-check node ports together); more are closed at once")
	fs.IntVar(&c.Listeners.MaxConnections, "listener-max-connections", c.Listeners.MaxConnections, "connections each HTTP listener holds open in all; more are closed at once")
	fs.StringVar(&c.DashboardTLSCertFile, "dashboard-tls-cert-file", c.DashboardTLSCertFile, "PEM certificate of the dashboard's TLS (with --dashboard-tls-private-key-file); default: a self-signed one generated at first start into --state-dir")
	fs.StringVar(&c.DashboardTLSPrivateKeyFile, "dashboard-tls-private-key-file", c.DashboardTLSPrivateKeyFile, "PEM private key of --dashboard-tls-cert-file")
	fs.Var(listFlag(&c.DashboardAllowedCIDRs), "dashboard-allowed-cidrs", "source CIDRs the dashboard answers, comma-separated, enforced in the kernel (table inet edgegate-mgmt) and the daemon; loopback and the gateway itself always; empty: those only")
	fs.BoolVar(&c.DashboardOnLBInterfaces, "dashboard-on-lb-interfaces", c.DashboardOnLBInterfaces, "with --dashboard-bind-address node-ip:PORT, also listen on a node IP of an interface that carries LoadBalancer pools")
	fs.Var(listFlag(&c.NodePortAddresses), "nodeport-addresses", "CIDRs of the local addresses node ports answer on, or \"primary\" for --node-ip; default: all but loopback")
	fs.Var(listFlag(&c.ClusterCIDRs), "cluster-cidr", "pod CIDRs, comma-separated; ClusterIP traffic from outside them is masqueraded")
	fs.BoolVar(&c.MasqueradeAll, "masquerade-all", c.MasqueradeAll, "masquerade all traffic to ClusterIPs")
	fs.IntVar(&c.MasqueradeBit, "masquerade-bit", c.MasqueradeBit, "fwmark bit (0-31) that flags traffic for masquerade")
	fs.StringVar(&c.Manifests, "manifests", c.Manifests, "standalone mode: directory of Service/EndpointSlice YAML or JSON, followed for changes; default: the embedded demo")
	fs.Var(durationFlag(&c.SyncPeriod), "sync-period", "longest time between syncs")
	fs.Var(durationFlag(&c.MinSyncPeriod), "min-sync-period", "syncs are limited to one per this period on average, with a burst of two (changes in between are batched; after a sync the proxy also rests as long as it took, up to this)")
	fs.Var(durationFlag(&c.FullSyncPeriod), "full-sync-period", "longest time between full syncs, which rewrite every rule and repair hand edits")
	fs.BoolVar(&c.LoadBalancer.Announce, "lb-announce", c.LoadBalancer.Announce, "answer ARP/NDP for the LoadBalancer IPs this gateway owns among the site's gateways")
	fs.BoolVar(&c.LoadBalancer.Allocate, "lb-allocate", c.LoadBalancer.Allocate, "allocate LoadBalancer IPs from the pools to Services (cluster mode; leader-elected)")
	fs.BoolVar(&c.LoadBalancer.DefaultClass, "lb-default-class", c.LoadBalancer.DefaultClass, "allocate for Services without spec.loadBalancerClass too")
	fs.StringVar(&c.LoadBalancer.PoolsFile, "lb-pools-file", c.LoadBalancer.PoolsFile, "LoadBalancer IP pools (pools.yaml format) instead of the cluster's ConfigMap")
	fs.IntVar(&c.LoadBalancer.HeartbeatPort, "lb-heartbeat-port", c.LoadBalancer.HeartbeatPort, "UDP port of the gateways' heartbeats (multicast "+member.DefaultGroup.String()+")")
	fs.Var(durationFlag(&c.LoadBalancer.HeartbeatInterval), "lb-heartbeat-interval", "time between heartbeats")
	fs.Var(durationFlag(&c.LoadBalancer.HeartbeatTimeout), "lb-heartbeat-timeout", "silence after which a gateway's LoadBalancer IPs move to the others")
	fs.StringVar(&c.LoadBalancer.KeyFile, "lb-key-file", c.LoadBalancer.KeyFile, "file with the site's heartbeat key (HMAC-SHA256, at least 16 bytes); default: in a cluster the Secret kube-system/edgegate-lb-heartbeat-key, standalone required with --lb-announce")
	fs.BoolVar(&c.LoadBalancer.InsecureUnsignedHeartbeats, "lb-insecure-unsigned-heartbeats", c.LoadBalancer.InsecureUnsignedHeartbeats, "INSECURE: send and take unsigned heartbeats (any host on the segment can then take LoadBalancer IPs)")
	fs.IntVar(&c.Update.Tries, "update-tries", c.Update.Tries, "firmware: boots a new firmware gets to prove healthy before the old slot comes back")
	fs.Var(durationFlag(&c.Update.TrialTimeout), "update-trial-timeout", "firmware: how long a new firmware's boot may take to become healthy (network up, source loaded, rules programmed) before it reboots")
	fs.Var(durationFlag(&c.Update.DrainSettle), "update-drain-settle", "firmware: how long a gateway drains before a fleet rollout updates it (load balancers notice its failing /healthz)")
	fs.Var(durationFlag(&c.Update.RolloutLease), "update-rollout-lease", "firmware: how long a fleet rollout's slot Lease stays this gateway's without renewal (renewed every fifth of it)")
	fs.IntVar(&c.Conntrack.MaxPerCore, "conntrack-max-per-core", c.Conntrack.MaxPerCore, "connection tracking entries per CPU (nf_conntrack_max, raised, never lowered); 0 leaves the table size alone")
	fs.IntVar(&c.Conntrack.Min, "conntrack-min", c.Conntrack.Min, "least nf_conntrack_max, whatever the CPUs")
	fs.Var(durationFlag(&c.Conntrack.TCPEstablishedTimeout), "conntrack-tcp-timeout-established", "idle timeout of established TCP connections (0 leaves the kernel's)")
	fs.Var(durationFlag(&c.Conntrack.TCPCloseWaitTimeout), "conntrack-tcp-timeout-close-wait", "timeout of TCP connections in CLOSE_WAIT (0 leaves the kernel's)")
	fs.BoolVar(&c.Conntrack.TCPBeLiberal, "conntrack-tcp-be-liberal", c.Conntrack.TCPBeLiberal, "accept out-of-window TCP packets instead of marking them invalid")
	fs.Var(durationFlag(&c.Conntrack.UDPTimeout), "conntrack-udp-timeout", "idle timeout of UDP flows seen one way (0 leaves the kernel's)")
	fs.Var(durationFlag(&c.Conntrack.UDPStreamTimeout), "conntrack-udp-timeout-stream", "idle timeout of UDP flows seen both ways (0 leaves the kernel's)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "cluster mode: kubeconfig file of the gateway's identity")
	fs.StringVar(&c.APIServer, "api-server", c.APIServer, "cluster mode: the API server's https:// URL (with --token-file and --ca-file, or overriding the kubeconfig's server)")
	fs.StringVar(&c.APIServer, "master", c.APIServer, "kube-proxy's spelling of --api-server")
	fs.StringVar(&c.TokenFile, "token-file", c.TokenFile, "cluster mode: file holding the bearer (bootstrap) token; re-read when it changes")
	fs.StringVar(&c.CAFile, "ca-file", c.CAFile, "cluster mode: PEM file of the cluster's CA")
	fs.Var(float32Flag(&c.KubeAPIQPS), "kube-api-qps", "requests per second to the API server")
	fs.IntVar(&c.KubeAPIBurst, "kube-api-burst", c.KubeAPIBurst, "burst of requests to the API server")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "cluster mode: directory of the last synced state, used when the API server does not answer at start; also the LoadBalancer heartbeats' replay marks; empty disables")
	fs.StringVar(&c.Region, "region", c.Region, "cluster mode: this node's topology region label")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.BoolVar(&c.Cleanup, "cleanup", false, "remove every rule edgegate programmed, then exit")
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *configFile != "" {
		fromFile := defaults()
		b, err := os.ReadFile(*configFile)
		if err != nil {
			return c, fmt.Errorf("--config: %w", err)
		}
		if err := yaml.UnmarshalStrict(b, &fromFile); err != nil {
			return c, fmt.Errorf("--config %s: %w", *configFile, err)
		}
		// The flags given on the command line win: remember their values, load the file
		// into the same variables, then set them again.
		given := map[string]string{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
		cleanup, version := c.Cleanup, c.Version
		c = fromFile
		c.Cleanup, c.Version = cleanup, version
		for name, v := range given {
			if name == "config" {
				continue
			}
			if err := fs.Set(name, v); err != nil {
				return c, fmt.Errorf("--%s: %w", name, err)
			}
		}
	}
	return c, c.validate()
}

func (c *Config) validate() error {
	var errs []error
	if _, err := plan.ParseMode(string(c.ProxyMode)); err != nil {
		errs = append(errs, fmt.Errorf("--proxy-mode: %w", err))
	}
	if !ipvs.ValidScheduler(c.IPVS.Scheduler) {
		errs = append(errs, fmt.Errorf("--ipvs-scheduler (ipvs.scheduler): %q is not an IPVS scheduler (%s)", c.IPVS.Scheduler, strings.Join(ipvs.Schedulers, ", ")))
	}
	if c.NFTables.EndpointsPerTable < 0 {
		errs = append(errs, fmt.Errorf("--nftables-endpoints-per-table (nftables.endpointsPerTable): %d is negative (0 never splits)", c.NFTables.EndpointsPerTable))
	}
	for _, ip := range c.NodeIPs {
		if _, err := netip.ParseAddr(ip); err != nil {
			errs = append(errs, fmt.Errorf("--node-ip: %w", err))
		}
	}
	for _, p := range c.NodePortAddresses {
		if _, err := netip.ParsePrefix(p); err != nil && p != "primary" {
			errs = append(errs, fmt.Errorf("--nodeport-addresses: %w", err))
		}
	}
	for _, p := range c.ClusterCIDRs {
		if _, err := netip.ParsePrefix(p); err != nil {
			errs = append(errs, fmt.Errorf("--cluster-cidr: %w", err))
		}
	}
	if c.Update.Tries < 1 || c.Update.Tries > 9 {
		errs = append(errs, fmt.Errorf("--update-tries (update.tries): %d, want 1 to 9", c.Update.Tries))
	}
	if c.Update.DrainSettle.Duration < 0 {
		errs = append(errs, fmt.Errorf("--update-drain-settle (update.drainSettle): must not be negative"))
	}
	if c.Update.RolloutLease.Duration < 10*time.Second {
		errs = append(errs, fmt.Errorf("--update-rollout-lease (update.rolloutLease): %s, want at least 10s", c.Update.RolloutLease))
	}
	if c.Update.TrialTimeout.Duration < 10*time.Second {
		errs = append(errs, fmt.Errorf("--update-trial-timeout (update.trialTimeout): %s, want at least 10s (a boot takes seconds)", c.Update.TrialTimeout))
	}
	if err := validDashboardAddress(c.DashboardBindAddress); err != nil {
		errs = append(errs, fmt.Errorf("--dashboard-bind-address (dashboardBindAddress): %w", err))
	}
	if _, err := dashboard.ParseCIDRs("--dashboard-allowed-cidrs (dashboardAllowedCIDRs)", c.DashboardAllowedCIDRs); err != nil {
		errs = append(errs, err)
	}
	if (c.DashboardTLSCertFile == "") != (c.DashboardTLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("--dashboard-tls-cert-file (dashboardTLSCertFile) and --dashboard-tls-private-key-file (dashboardTLSPrivateKeyFile): set both or neither"))
	}
	for _, v := range []struct {
		name string
		bad  bool
	}{
		{"--conntrack-max-per-core (conntrack.maxPerCore)", c.Conntrack.MaxPerCore < 0},
		{"--conntrack-min (conntrack.min)", c.Conntrack.Min < 0},
		{"--conntrack-tcp-timeout-established (conntrack.tcpEstablishedTimeout)", c.Conntrack.TCPEstablishedTimeout.Duration < 0},
		{"--conntrack-tcp-timeout-close-wait (conntrack.tcpCloseWaitTimeout)", c.Conntrack.TCPCloseWaitTimeout.Duration < 0},
		{"--conntrack-udp-timeout (conntrack.udpTimeout)", c.Conntrack.UDPTimeout.Duration < 0},
		{"--conntrack-udp-timeout-stream (conntrack.udpStreamTimeout)", c.Conntrack.UDPStreamTimeout.Duration < 0},
	} {
		if v.bad {
			errs = append(errs, fmt.Errorf("%s: must not be negative", v.name))
		}
	}
	if l := c.Listeners; l.MaxConnectionsPerSource < 1 || l.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("--listener-max-connections-per-source and --listener-max-connections (listeners.maxConnectionsPerSource, listeners.maxConnections): %d and %d, want at least 1 each",
			l.MaxConnectionsPerSource, l.MaxConnections))
	}
	errs = append(errs, c.validLoadBalancer()...)
	if c.MasqueradeBit < 0 || c.MasqueradeBit > 31 {
		errs = append(errs, fmt.Errorf("--masquerade-bit: %d is not in 0-31", c.MasqueradeBit))
	}
	if c.MinSyncPeriod.Duration < 0 || c.SyncPeriod.Duration <= 0 || c.FullSyncPeriod.Duration <= 0 {
		errs = append(errs, errors.New("--sync-period and --full-sync-period must be positive, --min-sync-period not negative"))
	}
	if c.inCluster() && c.Manifests != "" {
		errs = append(errs, errors.New("--manifests: standalone mode cannot be combined with a cluster (--kubeconfig or --api-server)"))
	}
	if c.KubeAPIQPS <= 0 || c.KubeAPIBurst <= 0 {
		errs = append(errs, errors.New("--kube-api-qps and --kube-api-burst must be positive"))
	}
	return errors.Join(errs...)
}

// validLoadBalancer checks the LoadBalancer IP settings together.
func (c *Config) validLoadBalancer() []error {
	lb, cluster := c.LoadBalancer, c.inCluster()
	var errs []error
	if lb.Allocate && !cluster {
		errs = append(errs, errors.New("--lb-allocate (loadBalancer.allocate): allocation writes Service status, it needs a cluster (--api-server or --kubeconfig)"))
	}
	if lb.Announce && !cluster && lb.PoolsFile == "" {
		errs = append(errs, errors.New("--lb-announce (loadBalancer.announce): without a cluster the pools come from --lb-pools-file, which is not set"))
	}
	if lb.Announce && !cluster && lb.KeyFile == "" && !lb.InsecureUnsignedHeartbeats {
		errs = append(errs, errors.New("--lb-announce (loadBalancer.announce): heartbeats are signed with --lb-key-file (loadBalancer.keyFile), which is not set; "+
			"without a key any host on the segment can take LoadBalancer IPs (--lb-insecure-unsigned-heartbeats runs so anyway)"))
	}
	if lb.KeyFile != "" && lb.InsecureUnsignedHeartbeats {
		errs = append(errs, errors.New("--lb-insecure-unsigned-heartbeats (loadBalancer.insecureUnsignedHeartbeats) with --lb-key-file (loadBalancer.keyFile): choose one"))
	}
	if lb.Announce && !lb.InsecureUnsignedHeartbeats && c.StateDir == "" {
		errs = append(errs, errors.New("--lb-announce (loadBalancer.announce): the heartbeats' replay protection keeps its marks in --state-dir (stateDir), which is empty"))
	}
	if lb.HeartbeatPort < 1 || lb.HeartbeatPort > 65535 {
		errs = append(errs, fmt.Errorf("--lb-heartbeat-port (loadBalancer.heartbeatPort): %d is not in 1-65535", lb.HeartbeatPort))
	}
	if lb.HeartbeatInterval.Duration <= 0 || lb.HeartbeatTimeout.Duration < 2*lb.HeartbeatInterval.Duration {
		errs = append(errs, fmt.Errorf("--lb-heartbeat-timeout (loadBalancer.heartbeatTimeout): %v must be at least two heartbeat intervals (%v)",
			lb.HeartbeatTimeout.Duration, lb.HeartbeatInterval.Duration))
	}
	return errs
}

// NodePort range: the dashboard must not take a port a Service may be given.
const nodePortMin, nodePortMax = 30000, 32767

// validDashboardAddress accepts "" (disabled) or host:port, host an IP address or
// node-ip, with a port outside the NodePort range.
func validDashboardAddress(addr string) error {
	if addr == "" {
		return nil
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host != "" && host != dashboard.NodeIPHost {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: the host must be an IP address or %s: %w", addr, dashboard.NodeIPHost, err)
		}
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("%q: port %q is not in 1-65535", addr, p)
	}
	if port >= nodePortMin && port <= nodePortMax {
		return fmt.Errorf("%q: port %d is in the NodePort range %d-%d", addr, port, nodePortMin, nodePortMax)
	}
	return nil
}

// clusterServer names the API server for the logs: the URL, or the kubeconfig file.
func (c *Config) clusterServer() string {
	if c.APIServer != "" {
		return c.APIServer
	}
	return "kubeconfig " + c.Kubeconfig
}

// clusterConfig is the cluster source's part of the configuration; version is the
// daemon's, for the user agent.
func (c *Config) clusterConfig(version string) cluster.Config {
	return cluster.Config{
		Kubeconfig: c.Kubeconfig, APIServer: c.APIServer, TokenFile: c.TokenFile, CAFile: c.CAFile,
		QPS: c.KubeAPIQPS, Burst: c.KubeAPIBurst, UserAgent: "edgegate/" + version,
	}
}

// inCluster says the configuration names a cluster (--kubeconfig or --api-server).
func (c *Config) inCluster() bool { return c.clusterConfig("").Enabled() }
