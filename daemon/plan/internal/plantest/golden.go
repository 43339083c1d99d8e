package plantest

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// GoldenFixtures are the fixtures of every mode's golden dumps (the demo lab's address plan, node "gw"):
//
//	web      dual-stack LoadBalancer, TCP 80 -> 8080, node port 30080, affinity 300s
//	         cluster IPs 10.96.0.10, fd00:96::10; LoadBalancer 203.0.113.10, 2001:db8:113::10
//	         source range 10.200.1.0/24 (IPv4 only: closes the IPv6 LoadBalancer IP)
//	         endpoints 10.200.2.11-13:8080, fd00:200:2::11-12:8080
//	local    LoadBalancer with externalTrafficPolicy Local, health check port 32001,
//	         cluster IP 10.96.0.20, LoadBalancer 203.0.113.20, node port 30020;
//	         endpoints 10.200.2.21:8080 on "gw" (local) and 10.200.2.22:8080 on backend-2
//	empty    NodePort, cluster IP 10.96.0.30, port 443, node port 30443, no endpoints
//	dns      UDP ClusterIP 10.96.0.53:53 -> 5353, endpoints 10.200.2.11-13
func GoldenFixtures() map[string][]any {
	web := mt.Service("default", "web", "10.96.0.10",
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080),
		mt.DualStack("fd00:96::10"),
		mt.LoadBalancerIPs("203.0.113.10", "2001:db8:113::10"),
		mt.SourceRanges("10.200.1.0/24"),
		mt.Affinity(300))
	webV4 := mt.Slice("default", "web-v4", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.13"))
	webV6 := mt.Slice("default", "web-v6", "web", "http", v1.ProtocolTCP, 8080,
		mt.EP("fd00:200:2::11"), mt.EP("fd00:200:2::12"))

	local := mt.Service("default", "local", "10.96.0.20",
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 30020),
		mt.LoadBalancerIPs("203.0.113.20"),
		mt.ExternalLocal(32001))
	localEPs := mt.Slice("default", "local-v4", "local", "http", v1.ProtocolTCP, 8080,
		mt.EP("10.200.2.21", mt.OnNode("gw")), mt.EP("10.200.2.22", mt.OnNode("backend-2")))

	empty := mt.Service("default", "empty", "10.96.0.30",
		mt.Port("https", v1.ProtocolTCP, 443, 8443, 30443), mt.Type(v1.ServiceTypeNodePort))

	dns := mt.Service("default", "dns", "10.96.0.53", mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	dnsEPs := mt.Slice("default", "dns-v4", "dns", "dns", v1.ProtocolUDP, 5353,
		mt.EP("10.200.2.11"), mt.EP("10.200.2.12"), mt.EP("10.200.2.13"))

	return map[string][]any{
		"web":   {web, webV4, webV6},
		"local": {local, localEPs},
		"empty": {empty},
		"dns":   {dns, dnsEPs},
	}
}

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current plans")

// GoldenDumps keeps testdata/<fixture>-<family>.golden: the dump of each fixture's plan,
// in IPv4 and, for "web" and "protected", IPv6 (the other fixtures are IPv4 only), so a layout change shows
// up as a readable diff. The packet-flow tests say whether traffic still goes where it
// should; these say what the kernel is given. go test's -update flag rewrites them.
func GoldenDumps(t *testing.T, fixtures map[string][]any, dump func(t *testing.T, f model.Family, objs ...any) string) {
	for name, objs := range fixtures {
		for _, f := range []model.Family{model.IPv4, model.IPv6} {
			if f == model.IPv6 && name != "web" && name != "protected" {
				continue
			}
			file := filepath.Join("testdata", name+"-"+f.String()+".golden")
			t.Run(filepath.Base(file), func(t *testing.T) {
				got := dump(t, f, objs...)
				if *update {
					if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatalf("%v (run go test with -update to create it)", err)
				}
				if d := cmp.Diff(string(want), got); d != "" {
					t.Errorf("plan differs from %s (-want +got); if intended, run go test with -update:\n%s", file, d)
				}
			})
		}
	}
}
