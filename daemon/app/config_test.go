package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/daemon/listener"
	"github.com/edgegate/edgegate/daemon/plan/nft"
)

func TestConfigFileThenFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edgegate.yaml")
	yaml := "proxyMode: iptables\nnodeIPs: [192.0.2.1]\nzone: edge-a\nfullSyncPeriod: 90s\nmasqueradeAll: true\n"
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig([]string{"--config", file, "--zone", "edge-b", "--node-ip", "192.0.2.7,2001:db8::7"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ProxyMode != "iptables" || !c.MasqueradeAll || c.FullSyncPeriod.Duration != 90*time.Second {
		t.Errorf("file settings lost: %+v", c)
	}
	if c.Zone != "edge-b" || strings.Join(c.NodeIPs, ",") != "192.0.2.7,2001:db8::7" {
		t.Errorf("command-line flags must win over the file: zone %q, node IPs %v", c.Zone, c.NodeIPs)
	}
	if c.HealthzBindAddress != "0.0.0.0:10256" {
		t.Errorf("defaults lost: healthz %q", c.HealthzBindAddress)
	}
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--proxy-mode", "userspace"}, "--proxy-mode"},
		{[]string{"--node-ip", "10.0.0.300"}, "--node-ip"},
		{[]string{"--cluster-cidr", "10.244.0.0"}, "--cluster-cidr"},
		{[]string{"--masquerade-bit", "40"}, "--masquerade-bit"},
		{[]string{"--nodeport-addresses", "nonsense"}, "--nodeport-addresses"},
		{[]string{"--listener-max-connections-per-source", "0"}, "--listener-max-connections-per-source"},
		{[]string{"--listener-max-connections", "-1"}, "--listener-max-connections"},
		{[]string{"--update-trial-timeout", "2s"}, "--update-trial-timeout"},
		{[]string{"--update-rollout-lease", "5s"}, "update.rolloutLease"},
	} {
		_, err := ParseConfig(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
	file := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(file, []byte("proxyMod: nftables\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseConfig([]string{"--config", file}); err == nil || !strings.Contains(err.Error(), "proxyMod") {
		t.Errorf("a misspelt key in the config file: error %v, want one naming it", err)
	}
}

func TestIPVSConfig(t *testing.T) {
	c, err := ParseConfig([]string{"--proxy-mode", "ipvs"})
	if err != nil || c.ProxyMode != "ipvs" || c.IPVS.Scheduler != "rr" {
		t.Fatalf("--proxy-mode ipvs: %+v, %v; want the default scheduler rr", c, err)
	}
	file := filepath.Join(t.TempDir(), "edgegate.yaml")
	if err := os.WriteFile(file, []byte("proxyMode: ipvs\nipvs:\n  scheduler: sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := ParseConfig([]string{"--config", file}); err != nil || c.IPVS.Scheduler != "sh" {
		t.Errorf("ipvs.scheduler from the file: %q, %v", c.IPVS.Scheduler, err)
	}
	if c, err := ParseConfig([]string{"--config", file, "--ipvs-scheduler", "lc"}); err != nil || c.IPVS.Scheduler != "lc" || c.ProxyMode != "ipvs" {
		t.Errorf("--ipvs-scheduler must win over the file: %+v, %v", c, err)
	}
	for _, args := range [][]string{{"--ipvs-scheduler", "fastest"}, {"--ipvs-scheduler", ""}, {"--config", writeFile(t, "ipvs:\n  scheduler: RR\n")}} {
		_, err := ParseConfig(args)
		if err == nil || !strings.Contains(err.Error(), "--ipvs-scheduler (ipvs.scheduler)") || !strings.Contains(err.Error(), "wrr") {
			t.Errorf("%v: error %v, want one naming the setting and the schedulers", args, err)
		}
	}
	if _, err := ParseConfig([]string{"--proxy-mode", "kernelspace"}); err == nil || !strings.Contains(err.Error(), "nftables, iptables, ipvs") {
		t.Errorf("unknown mode: %v, want the supported ones listed", err)
	}
}

func TestNFTablesEndpointsPerTable(t *testing.T) {
	if c, err := ParseConfig(nil); err != nil || c.NFTables.EndpointsPerTable != nft.DefaultPerTable {
		t.Fatalf("default: %d, %v; want %d", c.NFTables.EndpointsPerTable, err, nft.DefaultPerTable)
	}
	if c, err := ParseConfig([]string{"--config", writeFile(t, "nftables:\n  endpointsPerTable: 0\n")}); err != nil || c.NFTables.EndpointsPerTable != 0 {
		t.Errorf("nftables.endpointsPerTable 0 from the file: %d, %v", c.NFTables.EndpointsPerTable, err)
	}
	if c, err := ParseConfig([]string{"--nftables-endpoints-per-table", "100"}); err != nil || c.NFTables.EndpointsPerTable != 100 {
		t.Errorf("--nftables-endpoints-per-table 100: %d, %v", c.NFTables.EndpointsPerTable, err)
	}
	_, err := ParseConfig([]string{"--nftables-endpoints-per-table", "-1"})
	if err == nil || !strings.Contains(err.Error(), "--nftables-endpoints-per-table (nftables.endpointsPerTable)") {
		t.Errorf("a negative size: %v, want an error naming the setting", err)
	}
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "edgegate.yaml")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestDashboardConfig(t *testing.T) {
	c, err := ParseConfig(nil)
	if err != nil || c.DashboardBindAddress != "node-ip:443" || c.DashboardTokenFile != "" || c.DashboardTLSCertFile != "" ||
		strings.Join(c.DashboardAllowedCIDRs, ",") != "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7,fe80::/10" {
		t.Fatalf("defaults: %q %q %q %v %v; want node-ip:443, a generated token and certificate, the private ranges",
			c.DashboardBindAddress, c.DashboardTokenFile, c.DashboardTLSCertFile, c.DashboardAllowedCIDRs, err)
	}
	for _, ok := range [][]string{
		{"--dashboard-bind-address", ""},
		{"--dashboard-bind-address", "10.200.1.1:8080", "--dashboard-token-file", "/etc/edgegate/token"},
		{"--dashboard-bind-address", "[fd00::1]:443"},
		{"--state-dir", ""}, // the dashboard then says at start that it has no token
		{"--config", writeFile(t, "dashboardBindAddress: 127.0.0.1:29999\n")},
		{"--dashboard-bind-address", "node-ip:8443", "--dashboard-allowed-cidrs", "192.0.2.0/24,2001:db8::/32", "--dashboard-on-lb-interfaces"},
		{"--dashboard-allowed-cidrs", ""}, // loopback only
		{"--dashboard-tls-cert-file", "/etc/edgegate/tls.crt", "--dashboard-tls-private-key-file", "/etc/edgegate/tls.key"},
		{"--config", writeFile(t, "dashboardAllowedCIDRs: [10.1.0.0/16]\ndashboardTLSCertFile: a.crt\ndashboardTLSPrivateKeyFile: a.key\ndashboardOnLBInterfaces: true\n")},
	} {
		if _, err := ParseConfig(ok); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dashboard-bind-address", ":30080"}, "port 30080 is in the NodePort range 30000-32767"},
		{[]string{"--dashboard-bind-address", "0.0.0.0:32767"}, "NodePort range"},
		{[]string{"--config", writeFile(t, "dashboardBindAddress: \":30000\"\n")}, "--dashboard-bind-address (dashboardBindAddress)"},
		{[]string{"--dashboard-bind-address", "gateway.local:80"}, "must be an IP address"},
		{[]string{"--dashboard-bind-address", "10.0.0.1"}, "--dashboard-bind-address"},
		{[]string{"--dashboard-bind-address", ":0"}, "not in 1-65535"},
		{[]string{"--dashboard-bind-address", "node-ip:31000"}, "NodePort range"},
		// An allow-list entry that does not parse stops the start: skipping it would
		// change who is let in.
		{[]string{"--dashboard-allowed-cidrs", "10.0.0.0/8,10.1.2.3"}, `--dashboard-allowed-cidrs (dashboardAllowedCIDRs): "10.1.2.3"`},
		{[]string{"--config", writeFile(t, "dashboardAllowedCIDRs: [\"010.0.0.0/8\"]\n")}, "dashboardAllowedCIDRs"},
		{[]string{"--dashboard-tls-cert-file", "/etc/edgegate/tls.crt"}, "set both or neither"},
	} {
		_, err := ParseConfig(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

// TestConntrackConfig: kube-proxy's defaults, its file keys and flags, and negative values
// refused by name.
func TestConntrackConfig(t *testing.T) {
	c, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Conntrack.tuning(); got.MaxPerCore != 32768 || got.Min != 131072 || got.TCPEstablished != 24*time.Hour ||
		got.TCPCloseWait != time.Hour || got.UDP != 0 || got.TCPBeLiberal {
		t.Errorf("defaults: %+v, want kube-proxy's", got)
	}
	file := writeFile(t, "conntrack:\n  maxPerCore: 0\n  min: 65536\n  tcpEstablishedTimeout: 2h\n  udpTimeout: 45s\n  tcpBeLiberal: true\n")
	c, err = ParseConfig([]string{"--config", file, "--conntrack-udp-timeout-stream", "3m", "--conntrack-tcp-timeout-close-wait", "0"})
	if err != nil {
		t.Fatal(err)
	}
	want := ConntrackConfiguration{Min: 65536, TCPEstablishedTimeout: Duration{2 * time.Hour}, UDPTimeout: Duration{45 * time.Second},
		UDPStreamTimeout: Duration{3 * time.Minute}, TCPBeLiberal: true}
	if c.Conntrack != want {
		t.Errorf("file and flags: %+v, want %+v", c.Conntrack, want)
	}
	for _, args := range [][]string{{"--conntrack-min", "-1"}, {"--config", writeFile(t, "conntrack:\n  udpTimeout: -5s\n")}} {
		if _, err := ParseConfig(args); err == nil || !strings.Contains(err.Error(), "conntrack") || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%v: error %v, want one naming the conntrack setting", args, err)
		}
	}
}

// TestLoadBalancerConfig: the LoadBalancer IP settings, their defaults, and the
// combinations that cannot work refused by name.
func TestLoadBalancerConfig(t *testing.T) {
	c, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if lb := c.LoadBalancer; lb.Announce || lb.Allocate || lb.HeartbeatPort != 7480 || lb.HeartbeatInterval.Duration != 100*time.Millisecond ||
		lb.HeartbeatTimeout.Duration != 400*time.Millisecond {
		t.Errorf("defaults: %+v", lb)
	}
	file := writeFile(t, "loadBalancer:\n  announce: true\n  poolsFile: /etc/edgegate/pools.yaml\n  heartbeatTimeout: 1s\n  keyFile: /etc/edgegate/lb.key\n")
	c, err = ParseConfig([]string{"--config", file, "--lb-heartbeat-port", "7999"})
	if err != nil {
		t.Fatal(err)
	}
	if lb := c.LoadBalancer; !lb.Announce || lb.PoolsFile != "/etc/edgegate/pools.yaml" || lb.HeartbeatTimeout.Duration != time.Second || lb.HeartbeatPort != 7999 {
		t.Errorf("file and flags: %+v", lb)
	}
	for _, ok := range [][]string{
		{"--lb-announce", "--lb-pools-file", "p.yaml", "--lb-key-file", "k"},
		{"--lb-announce", "--lb-pools-file", "p.yaml", "--lb-insecure-unsigned-heartbeats"},
		{"--lb-announce", "--api-server", "https://10.0.0.1:6443"}, // the key comes from the cluster's Secret
	} {
		if _, err := ParseConfig(ok); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lb-allocate"}, "--lb-allocate (loadBalancer.allocate)"},
		{[]string{"--lb-announce"}, "--lb-pools-file"},
		{[]string{"--lb-heartbeat-port", "0"}, "--lb-heartbeat-port"},
		{[]string{"--lb-heartbeat-interval", "300ms"}, "--lb-heartbeat-timeout"},
		// Standalone, announcing signs heartbeats unless the operator says it is insecure.
		{[]string{"--lb-announce", "--lb-pools-file", "p.yaml"}, "--lb-key-file (loadBalancer.keyFile), which is not set"},
		{[]string{"--lb-announce", "--lb-pools-file", "p.yaml", "--lb-key-file", "k", "--lb-insecure-unsigned-heartbeats"}, "choose one"},
		{[]string{"--lb-announce", "--lb-pools-file", "p.yaml", "--lb-key-file", "k", "--state-dir", ""}, "--state-dir (stateDir), which is empty"},
	} {
		if _, err := ParseConfig(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

func TestListenerCaps(t *testing.T) {
	c, err := ParseConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Listeners.config(); got != listener.Default {
		t.Errorf("default listener config %+v, want listener.Default %+v", got, listener.Default)
	}
	file := filepath.Join(t.TempDir(), "edgegate.yaml")
	if err := os.WriteFile(file, []byte("listeners:\n  maxConnectionsPerSource: 8\n  maxConnections: 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = ParseConfig([]string{"--config", file, "--listener-max-connections", "64"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Listeners.config(); got.MaxConnsPerSource != 8 || got.MaxConns != 64 || got.ReadHeaderTimeout != listener.Default.ReadHeaderTimeout {
		t.Errorf("listener config %+v, want 8 per source from the file, 64 in all from the flag, the default timeouts", got)
	}
}
