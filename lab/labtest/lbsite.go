package labtest

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

	"github.com/edgegate/edgegate/lab"
)

// siteSlice is slice() with the site's backend addresses (10.210.1.1N, fd00:210:1::1N).
func siteSlice(svc *v1.Service, family discovery.AddressType, eps []endpoint) *discovery.EndpointSlice {
	es := slice(svc, family, eps)
	for i := range es.Endpoints {
		for j, a := range es.Endpoints[i].Addresses {
			a = strings.Replace(a, "10.200.2.", "10.210.1.", 1)
			es.Endpoints[i].Addresses[j] = strings.Replace(a, "fd00:200:2::", "fd00:210:1::", 1)
		}
	}
	return es
}

// LBSite is a site whose gateways' daemons (plain daemons in standalone mode, pools from a
// file) announce one LoadBalancer IP, SiteLBAddr, of a Service with three backends. Their
// heartbeats are signed with the site's key, and each gateway keeps its state directory
// (the heartbeats' replay marks) across restarts.
type LBSite struct {
	*lab.Site
	Daemons []*Daemon
	MACs    []string             // the gateways' eth0
	Args    func(i int) []string // gateway i's daemon flags
	Key     []byte               // the site's heartbeat key (--lb-key-file)
}

// SiteLBAddr is the LoadBalancer IP:port an LBSite's Service answers on.
const SiteLBAddr = "10.210.0.200:80"

const lbAddr = SiteLBAddr

var lbIP = netip.MustParseAddrPort(SiteLBAddr).Addr()

// NewLBSite builds a site and starts its gateways' daemons in the given proxy mode.
func NewLBSite(t testing.TB, mode string) *LBSite {
	t.Helper()
	s := &LBSite{Site: NewSite(t, lab.SiteOptions{Prefix: "egf"})}
	dir := ManifestDir(t.TempDir())
	svc := service("lb-web", []string{"10.96.20.1"}, loadBalancer(30220, lbIP.String(), "fd00:210::200"))
	dir.Write(t, "lb-web", manifests(svc, siteSlice(svc, discovery.AddressTypeIPv4, ready(1, 2, 3))))
	pools := filepath.Join(t.TempDir(), "pools.yaml")
	if err := os.WriteFile(pools, []byte(lab.SitePoolsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Key = []byte(rand.Text())
	keyFile := filepath.Join(t.TempDir(), "lb.key")
	if err := os.WriteFile(keyFile, append(s.Key, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	var stateDirs []string
	for range s.Gateways {
		stateDirs = append(stateDirs, t.TempDir())
	}
	s.Args = func(i int) []string {
		return []string{"--proxy-mode=" + mode, "--manifests", string(dir),
			"--hostname-override", fmt.Sprintf("gw-%d", i+1), "--node-ip", s.Gateways[i].IPv4.String(),
			"--healthz-bind-address", "0.0.0.0:10256", "--metrics-bind-address", "127.0.0.1:10249",
			"--lb-announce", "--lb-pools-file", pools, "--lb-key-file", keyFile, "--state-dir", stateDirs[i]}
	}
	for i, g := range s.Gateways {
		s.Daemons = append(s.Daemons, StartDaemon(t, g, s.Args(i)...))
		mac, err := g.MAC("eth0")
		if err != nil {
			t.Fatal(err)
		}
		s.MACs = append(s.MACs, mac)
	}
	return s
}

// ThroughGateway waits (bounded) until new connections go through gateway i (see
// lab.Site.Through) and fails the test otherwise.
func (s *LBSite) ThroughGateway(t testing.TB, i int, within time.Duration) time.Time {
	t.Helper()
	at, err := s.Through(lbAddr, s.MACs, i, within)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// Owner finds which gateway the LoadBalancer IP goes through now.
func (s *LBSite) Owner(t testing.TB) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		r, err := s.Client.AskOnce(lbAddr, time.Second)
		if err != nil {
			continue
		}
		for i := range s.Gateways {
			if r.Reply.Source == lab.GatewayBackIPv4(i) {
				s.ThroughGateway(t, i, 5*time.Second)
				return i
			}
		}
	}
	t.Fatalf("%s never answered", lbAddr)
	return -1
}
