package services

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"

	"github.com/edgegate/edgegate/daemon/source/manifests"
)

// TestWriteLoads feeds what Write produces to the daemon's own manifests loader: every
// Service and EndpointSlice decodes without a problem, with the ClusterIPs, ports and
// endpoints the Spec says, the target's endpoints on the real backends.
func TestWriteLoads(t *testing.T) {
	backends := []netip.Addr{netip.MustParseAddr("10.240.2.2"), netip.MustParseAddr("10.240.2.3")}
	const n = 300
	dir := t.TempDir()
	lb := LoadBalancer{IP: netip.MustParseAddr("203.0.113.80"), NodePort: 30080}
	path, err := WriteDir(dir, Spec{Count: n, Endpoints: 3, Target: map[int][]netip.Addr{n - 1: backends},
		LoadBalancer: map[int]LoadBalancer{n - 1: lb}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svcs, eps, problems := manifests.NewLoader(fstest.MapFS{filepath.Base(path): {Data: data}}).Load()
	for _, p := range problems {
		t.Errorf("loader problem: %v", p)
	}
	if len(svcs) != n || len(eps) != n {
		t.Fatalf("loaded %d Services and %d EndpointSlices, want %d of each", len(svcs), len(eps), n)
	}
	seen := map[string]bool{}
	for _, s := range svcs {
		seen[s.Name] = true
		if s.Namespace != Namespace || len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Port != Port || s.Spec.Ports[0].TargetPort.IntValue() != TargetPort {
			t.Errorf("Service %s/%s: ports %+v", s.Namespace, s.Name, s.Spec.Ports)
		}
	}
	for _, i := range []int{0, 1, n - 1} {
		if !seen[Name(i)] {
			t.Errorf("no Service %s", Name(i))
		}
	}
	var filler []string
	for _, es := range eps {
		var addrs []string
		for _, e := range es.Endpoints {
			if e.Conditions.Ready == nil || !*e.Conditions.Ready {
				t.Errorf("EndpointSlice %s: endpoint %v not ready", es.Name, e.Addresses)
			}
			addrs = append(addrs, e.Addresses...)
		}
		if len(addrs) != 3 {
			t.Fatalf("EndpointSlice %s: %d endpoints, want 3", es.Name, len(addrs))
		}
		if es.Name == Name(n-1)+"-0" {
			if want := []string{"10.240.2.2", "10.240.2.3", "10.240.2.2"}; !slices.Equal(addrs, want) {
				t.Errorf("target EndpointSlice %s: endpoints %v, want %v", es.Name, addrs, want)
			}
			continue
		}
		filler = append(filler, addrs...)
	}
	slices.Sort(filler)
	if len(slices.Compact(filler)) != 3*(n-1) {
		t.Errorf("filler endpoints are not all distinct")
	}
	if got := ClusterIP(n - 1).String(); got != "10.96.1.44" {
		t.Errorf("ClusterIP(%d) = %s, want 10.96.1.44", n-1, got)
	}
	for _, s := range svcs {
		if s.Name == Name(n-1) && s.Spec.ClusterIP != "10.96.1.44" {
			t.Errorf("Service %s: clusterIP %s, want 10.96.1.44", s.Name, s.Spec.ClusterIP)
		}
		ing := s.Status.LoadBalancer.Ingress
		switch {
		case s.Name == Name(n-1) && (s.Spec.Type != "LoadBalancer" || s.Spec.Ports[0].NodePort != 30080 || len(ing) != 1 || ing[0].IP != "203.0.113.80"):
			t.Errorf("Service %s: type %s, node port %d, ingress %+v; want LoadBalancer 203.0.113.80, node port 30080",
				s.Name, s.Spec.Type, s.Spec.Ports[0].NodePort, ing)
		case s.Name != Name(n-1) && (s.Spec.Type != "ClusterIP" || len(ing) != 0):
			t.Errorf("Service %s: type %s, ingress %+v", s.Name, s.Spec.Type, ing)
		}
	}
}

func TestSpecRefused(t *testing.T) {
	for name, s := range map[string]Spec{
		"no services":        {Count: 0},
		"too many":           {Count: MaxCount + 1},
		"target outside":     {Count: 2, Target: map[int][]netip.Addr{2: {netip.MustParseAddr("10.0.0.1")}}},
		"target empty":       {Count: 2, Target: map[int][]netip.Addr{1: nil}},
		"target not IPv4":    {Count: 2, Target: map[int][]netip.Addr{1: {netip.MustParseAddr("fd00::1")}}},
		"too many endpoints": {Count: 2, Endpoints: MaxEndpoints + 1},
	} {
		if err := Write(io.Discard, s); err == nil {
			t.Errorf("%s: Write accepted %+v", name, s)
		}
	}
}
