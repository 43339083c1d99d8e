package labtest

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/lab"
)

// Scenarios returns the traffic matrix. Addresses used (each scenario owns its own):
//
//	ClusterIPs 10.96.10.1-17, 10.96.10.20-22, 10.96.10.30, fd00:96::10:9; node ports 30102-30109,
//	30111-30112, health check 30205; LoadBalancer IPs 203.0.113.103-111, 2001:db8:113::109;
//	external IP 198.51.100.14. A mode's own scenarios use others (ipvs: 10.96.11.0/24; nftables and
//	iptables: 10.96.10.23-24, node port 30110).
//
// Endpoints are on nodes worker-N, never on the gateway itself (--hostname-override).
func Scenarios() []Scenario {
	return []Scenario{
		rulesetListing(),
		clusterIPSpread(),
		nodePortOnNodeIP(),
		loadBalancerSourceRanges(),
		sourceRangesReadAsKubeProxy(),
		unreadableSourceRangesRefuseEveryone(),
		externalIPsServed(),
		hairpinEndpoint(),
		sessionAffinity(),
		externalLocalDrops(),
		externalClusterMasquerades(),
		noEndpointsRejected(),
		onlyTerminatingServe(),
		dualStack(),
		udpFlowMovesOnEndpointRemoval(),
		fullResyncRepairsRules(),
		incrementalChangeKeepsConnections(),
		brokenManifestsKeepServing(),
	}
}

// TrafficRows are the matrix's rows that judge a gateway by its traffic alone: ClusterIP,
// NodePort, LoadBalancer with source ranges, and masquerading. Their checks use the lab's
// hosts and no Gateway (nil will do), so they also judge a gateway that runs elsewhere: a
// QEMU guest on a lab's taps (qemu/hardware_test.go), which reads the rows' manifests from
// an API server.
func TrafficRows() []Scenario {
	return []Scenario{clusterIPSpread(), nodePortOnNodeIP(), loadBalancerSourceRanges(), externalClusterMasquerades()}
}

// serviceIPOverNodePort: the node's own address is one Service's external IP on a port
// that another Service has as its node port. As in kube-proxy, the Service IP wins: node
// ports are looked up only after every Service IP (in nftables mode also when the dispatch
// is split over tables, whose node-port chains run after all their Service IP chains). An
// IPVS virtual server cannot tell the two apart, so ipvs mode does not run it.
func serviceIPOverNodePort() Scenario {
	byIP := service("ip-over-nodeport", []string{"10.96.10.23"}, externalIPs(lab.NodeIPv4.String()))
	byIP.Spec.Ports[0].Port = 30110
	byPort := service("nodeport-under-ip", []string{"10.96.10.24"}, nodePort(30110))
	return Scenario{
		Name: "service-ip-wins-over-node-port",
		Manifests: manifests(byIP, slice(byIP, discovery.AddressTypeIPv4, ready(2, 3)),
			byPort, slice(byPort, discovery.AddressTypeIPv4, ready(1))),
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			// The node port itself works on the Service's own ClusterIP path.
			if byBackend, _ := tally(t, l.Client, "10.96.10.24:80", 3); byBackend["backend-1"] != 3 {
				t.Fatalf("nodeport-under-ip's ClusterIP reached %s, want backend-1 only", describe(byBackend))
			}
			addr := lab.NodeIPv4.String() + ":30110"
			byBackend, _ := tally(t, l.Client, addr, 12)
			if byBackend["backend-1"] > 0 || len(byBackend) < 2 {
				t.Errorf("%s (external IP of ip-over-nodeport, node port of nodeport-under-ip) reached %s, want backend-2 and backend-3 only", addr, describe(byBackend))
			}
		},
	}
}

func rulesetListing() Scenario {
	return Scenario{
		Name: "ruleset-listing",
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			st := kernelState(t, l)
			for _, line := range g.traits.ruleset {
				if !st.Has(line) {
					t.Errorf("the gateway's kernel state lacks %q:\n%s", line, st)
				}
			}
		},
	}
}

func clusterIPSpread() Scenario {
	svc := service("spread", []string{"10.96.10.1"})
	return threeReady("clusterip-spreads-over-all-endpoints", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		byBackend, bySource := tally(t, l.Client, "10.96.10.1:80", 60)
		t.Logf("60 connections: %s", describe(byBackend))
		for _, b := range l.Backends {
			if byBackend[b.Name] == 0 {
				t.Errorf("%s got none of 60 connections: %s", b.Name, describe(byBackend))
			}
		}
		// Without --cluster-cidr or --masquerade-all, ClusterIP traffic keeps its source.
		onlySource(t, "ClusterIP", bySource, l.Client.IPv4.String())
	})
}

func nodePortOnNodeIP() Scenario {
	svc := service("nodeport", []string{"10.96.10.2"}, nodePort(30102))
	return threeReady("nodeport-on-node-ip", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		byBackend, _ := tally(t, l.Client, "10.200.1.1:30102", 30)
		if len(byBackend) < 2 {
			t.Errorf("30 NodePort connections reached only %s", describe(byBackend))
		}
		tally(t, l.Client2, "10.200.1.1:30102", 3)
	})
}

func loadBalancerSourceRanges() Scenario {
	svc := service("lb-ranges", []string{"10.96.10.3"},
		loadBalancer(30103, "203.0.113.103"), sourceRanges("10.200.1.0/24"))
	return threeReady("loadbalancer-source-ranges", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		tally(t, l.Client, "203.0.113.103:80", 5)
		r := expectOutcome(t, l.Client2, "203.0.113.103:80", lab.TimedOut)
		t.Logf("client-2 (outside the source ranges) -> LB IP: %v", r)
		// The ranges guard the LoadBalancer IP only, not the ClusterIP.
		tally(t, l.Client2, "10.96.10.3:80", 3)
	})
}

// sourceRangesReadAsKubeProxy: ranges padded with spaces (the API server accepts them) and
// with leading zeros (older API servers stored them) restrict as kube-proxy reads them.
func sourceRangesReadAsKubeProxy() Scenario {
	svc := service("lb-ranges-sloppy", []string{"10.96.10.16"},
		loadBalancer(30111, "203.0.113.110"), sourceRanges(" 10.200.1.0/24", "192.000.002.000/24 "))
	return threeReady("loadbalancer-source-ranges-padded", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		tally(t, l.Client, "203.0.113.110:80", 5)
		expectOutcome(t, l.Client2, "203.0.113.110:80", lab.TimedOut)
	})
}

// unreadableSourceRangesRefuseEveryone: a range no parser accepts closes the LoadBalancer
// IP to every source, the insider too, instead of leaving it open to all.
func unreadableSourceRangesRefuseEveryone() Scenario {
	svc := service("lb-ranges-unreadable", []string{"10.96.10.17"},
		loadBalancer(30112, "203.0.113.111"), sourceRanges("10.200.1.0/24", "10.200.3.0/33"))
	return threeReady("loadbalancer-source-ranges-unreadable", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		expectOutcome(t, l.Client, "203.0.113.111:80", lab.TimedOut)
		expectOutcome(t, l.Client2, "203.0.113.111:80", lab.TimedOut)
		// Only the LoadBalancer IP is closed: the ClusterIP and node port serve.
		tally(t, l.Client, "10.96.10.17:80", 3)
		tally(t, l.Client2, "10.200.1.1:30112", 3)
	})
}

func externalIPsServed() Scenario {
	svc := service("external-ip", []string{"10.96.10.14"}, externalIPs("198.51.100.14"))
	return threeReady("external-ips", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		byBackend, bySource := tally(t, l.Client, "198.51.100.14:80", 12)
		if len(byBackend) < 2 {
			t.Errorf("12 connections to the external IP reached only %s", describe(byBackend))
		}
		// External traffic under externalTrafficPolicy Cluster is masqueraded, so that
		// the replies come back through the gateway.
		onlySource(t, "external IP", bySource, lab.BridgeIPv4.String())
		tally(t, l.Client2, "198.51.100.14:80", 3)
	})
}

// hairpinEndpoint: an endpoint on the gateway's node that reaches its own service and is
// sent to itself. That connection must be masqueraded, or the endpoint would answer itself
// directly, from an address the client never dialled. Only a local endpoint can: another
// node's pod reaches a ClusterIP through its own node (and kube-proxy's nftables and IPVS
// modes, like edgegate's, masquerade only local endpoints' hairpin). (The service has that
// one endpoint: one endpoint reaching another on the same segment would get its answer
// straight from the other, past the gateway, a matter of the lab's topology, not of the
// proxy.)
func hairpinEndpoint() Scenario {
	svc := service("hairpin", []string{"10.96.10.15"})
	local := []endpoint{{backend: 1, ready: true, serving: true, node: lab.GatewayNodeName}}
	return Scenario{
		Name:      "hairpin-endpoint-reaches-itself",
		Manifests: manifests(svc, slice(svc, discovery.AddressTypeIPv4, local)),
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			self := l.Backends[0]
			byBackend, bySource := tally(t, self, "10.96.10.15:80", 6)
			if byBackend[self.Name] != 6 {
				t.Errorf("want every answer from %s itself: %s", self.Name, describe(byBackend))
			}
			onlySource(t, self.Name+" reaching itself", bySource, lab.BridgeIPv4.String())
		},
	}
}

func sessionAffinity() Scenario {
	svc := service("affinity", []string{"10.96.10.4"}, clientIPAffinity(300))
	return threeReady("session-affinity-clientip", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		byBackend, _ := tally(t, l.Client, "10.96.10.4:80", 20)
		if len(byBackend) != 1 {
			t.Errorf("20 connections from one client went to %s; want one backend", describe(byBackend))
		}
	})
}

// healthCheckAnswer is kube-proxy's health check node port JSON.
type healthCheckAnswer struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints *int `json:"localEndpoints"`
}

func externalLocalDrops() Scenario {
	svc := service("etp-local", []string{"10.96.10.5"},
		loadBalancer(30105, "203.0.113.105"), externalLocal(30205))
	return threeReady("external-traffic-policy-local", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		// The gateway has no local endpoint: external traffic is dropped, not rejected,
		// so load balancers steer away by health check instead.
		expectOutcome(t, l.Client, "10.200.1.1:30105", lab.TimedOut)
		expectOutcome(t, l.Client, "203.0.113.105:80", lab.TimedOut)
		tally(t, l.Client, "10.96.10.5:80", 3)

		code, body, err := l.Client.Fetch("http://10.200.1.1:30205/")
		if err != nil {
			t.Fatalf("health check node port: %v", err)
		}
		if code != http.StatusServiceUnavailable {
			t.Errorf("health check node port: status %d, want 503; body %s", code, body)
		}
		var a healthCheckAnswer
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("health check node port body %q: %v", body, err)
		}
		if a.Service.Namespace != Namespace || a.Service.Name != "etp-local" || a.LocalEndpoints == nil || *a.LocalEndpoints != 0 {
			t.Errorf("health check node port body %s; want service matrix/etp-local with localEndpoints 0", body)
		}
	})
}

func externalClusterMasquerades() Scenario {
	svc := service("masquerade", []string{"10.96.10.6"}, loadBalancer(30106, "203.0.113.106"))
	return threeReady("external-traffic-policy-cluster-masquerades", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		_, bySource := tally(t, l.Client, "10.200.1.1:30106", 5)
		onlySource(t, "NodePort", bySource, lab.BridgeIPv4.String())
		_, bySource = tally(t, l.Client, "203.0.113.106:80", 5)
		onlySource(t, "LoadBalancer IP", bySource, lab.BridgeIPv4.String())
	})
}

func noEndpointsRejected() Scenario {
	svc := service("no-endpoints", []string{"10.96.10.7"}, nodePort(30107))
	return Scenario{
		Name:      "no-endpoints-rejected",
		Manifests: manifests(svc),
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			// Refused means a TCP reset came back: a black hole would time out instead.
			for _, addr := range []string{"10.96.10.7:80", "10.200.1.1:30107"} {
				expectOutcome(t, l.Client, addr, lab.Refused)
			}
		},
	}
}

func onlyTerminatingServe() Scenario {
	svc := service("terminating", []string{"10.96.10.8"})
	eps := []endpoint{
		{backend: 2, ready: false, serving: true, terminating: true, node: "worker-2"},
		{backend: 3, ready: false, serving: false, terminating: true, node: "worker-3"},
	}
	return Scenario{
		Name:      "only-terminating-endpoints-serve",
		Manifests: manifests(svc, slice(svc, discovery.AddressTypeIPv4, eps)),
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			byBackend, _ := tally(t, l.Client, "10.96.10.8:80", 10)
			if byBackend["backend-2"] != 10 {
				t.Errorf("want all 10 answers from the serving terminating backend-2 (backend-3 is not serving): %s", describe(byBackend))
			}
		},
	}
}

func dualStack() Scenario {
	svc := service("dual", []string{"fd00:96::10:9", "10.96.10.9"},
		loadBalancer(30109, "2001:db8:113::109", "203.0.113.109"))
	return Scenario{
		Name: "ipv6-and-dual-stack",
		Manifests: manifests(svc,
			slice(svc, discovery.AddressTypeIPv6, ready(1, 2, 3)),
			slice(svc, discovery.AddressTypeIPv4, ready(1, 2, 3))),
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			byBackend, bySource := tally(t, l.Client, "[fd00:96::10:9]:80", 30)
			if len(byBackend) < 2 {
				t.Errorf("30 IPv6 ClusterIP connections reached only %s", describe(byBackend))
			}
			onlySource(t, "IPv6 ClusterIP", bySource, l.Client.IPv6.String())
			_, bySource = tally(t, l.Client, "[2001:db8:113::109]:80", 5)
			onlySource(t, "IPv6 LoadBalancer IP", bySource, lab.BridgeIPv6.String())
			_, bySource = tally(t, l.Client, "[fd00:200:1::1]:30109", 5)
			onlySource(t, "IPv6 NodePort", bySource, lab.BridgeIPv6.String())
			tally(t, l.Client, "10.96.10.9:80", 5)
			tally(t, l.Client, "203.0.113.109:80", 5)
		},
	}
}

func udpFlowMovesOnEndpointRemoval() Scenario {
	svc := service("udp", []string{"10.96.10.10"}, udpPort(53))
	const name = "udp-flow-moves-when-its-endpoint-goes"
	return threeReady(name, svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		flow, err := l.Client.OpenUDP(40053, "10.96.10.10:53")
		if err != nil {
			t.Fatal(err)
		}
		defer flow.Close()
		first := flow.Ask()
		if first.Outcome != lab.Answered {
			t.Fatalf("udp 10.96.10.10:53 from %v: %v", flow.LocalAddr(), first)
		}
		hit := first.Reply.Backend
		// One conntrack entry carries the flow: it stays on its endpoint.
		for range 5 {
			if r := flow.Ask(); r.Outcome != lab.Answered || r.Reply.Backend != hit {
				t.Fatalf("udp flow left %s while nothing changed: %v", hit, r)
			}
		}
		var rest []int
		for i, b := range l.Backends {
			if b.Name != hit {
				rest = append(rest, i+1)
			}
		}
		t.Logf("flow %v is on %s; removing it from the EndpointSlice", flow.LocalAddr(), hit)
		g.Manifests.Write(t, name, manifests(svc, slice(svc, discovery.AddressTypeIPv4, ready(rest...))))
		// The backend process is still alive: only a flushed conntrack entry moves the flow.
		eventually(t, 10*time.Second, "udp flow moves off the removed endpoint "+hit, func() (bool, string) {
			r := flow.Ask()
			return r.Outcome == lab.Answered && r.Reply.Backend != hit, r.String()
		})
		for range 3 {
			if r := flow.Ask(); r.Outcome != lab.Answered || r.Reply.Backend == hit {
				t.Errorf("after the move: %v", r)
			}
		}
	})
}

func fullResyncRepairsRules() Scenario {
	svc := service("resync", []string{"10.96.10.11"})
	return threeReady("full-resync-repairs-deleted-rules", svc, func(t *testing.T, l *lab.Lab, g *Gateway) {
		tally(t, l.Client, "10.96.10.11:80", 3)
		// The periodic full sync may repair the rules between breaking and probing;
		// break them again then, a few times at most.
		broken := false
		for attempt := 1; attempt <= 3 && !broken; attempt++ {
			g.BreakRules(t, l)
			r := l.Client.Probe("10.96.10.11:80")
			t.Logf("attempt %d: rules broken by hand, probe: %v", attempt, r)
			broken = r.Outcome != lab.Answered
		}
		if !broken {
			t.Fatalf("traffic still answered after the rules were deleted three times")
		}
		start := time.Now()
		eventually(t, 5*time.Second, "full resync restores the deleted rules", func() (bool, string) {
			r := l.Client.Probe("10.96.10.11:80")
			return r.Outcome == lab.Answered, r.String()
		})
		t.Logf("repaired after %v", time.Since(start).Round(10*time.Millisecond))
	})
}

func incrementalChangeKeepsConnections() Scenario {
	steady := service("steady", []string{"10.96.10.12"})
	added := service("added", []string{"10.96.10.13"})
	const extra = "incremental-extra"
	return Scenario{
		Name:      "incremental-change-keeps-established-connection",
		Manifests: manifests(steady, slice(steady, discovery.AddressTypeIPv4, ready(1, 2, 3))),
		Check: func(t *testing.T, l *lab.Lab, g *Gateway) {
			conn := openHTTP(t, l.Client, "10.96.10.12:80")
			defer conn.Close()
			first, err := conn.Ask()
			if err != nil {
				t.Fatalf("first request on the held connection: %v", err)
			}
			if r := l.Client.Probe("10.96.10.13:80"); r.Outcome == lab.Answered {
				t.Fatalf("10.96.10.13 answers before its service exists: %v", r)
			}
			g.Manifests.Write(t, extra, manifests(added, slice(added, discovery.AddressTypeIPv4, ready(1, 2, 3))))
			t.Cleanup(func() { g.Manifests.Remove(t, extra) })

			use := func(when string) {
				t.Helper()
				r, err := conn.Ask()
				if err != nil {
					t.Fatalf("held connection %s: %v", when, err)
				}
				if r.Backend != first.Backend {
					t.Fatalf("held connection moved from %s to %s %s", first.Backend, r.Backend, when)
				}
			}
			eventually(t, 10*time.Second, "the added service answers", func() (bool, string) {
				use("while the change is applied")
				r := l.Client.Probe("10.96.10.13:80")
				return r.Outcome == lab.Answered, r.String()
			})
			for range 3 {
				use("after the change")
			}
		},
	}
}
