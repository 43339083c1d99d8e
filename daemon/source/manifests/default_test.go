package manifests

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgegate/edgegate/daemon/model"
)

func TestDefaultLoads(t *testing.T) {
	svcs, eps, problems := NewLoader(Default()).Load()
	if len(problems) != 0 {
		t.Fatalf("embedded default has problems: %v", problems)
	}
	if diff := cmp.Diff([]string{"svc default/dns:53", "svc default/web:80",
		"eps default/dns-ipv4:10.200.2.11", "eps default/web-ipv4:10.200.2.11", "eps default/web-ipv6:fd00:200:2::11"}, state(svcs, eps)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	for _, s := range svcs {
		if errs := model.ValidateService(s); len(errs) > 0 {
			t.Errorf("Service %s: %v", s.Name, errs)
		}
	}
	for _, s := range eps {
		if errs := model.ValidateEndpointSlice(s); len(errs) > 0 {
			t.Errorf("EndpointSlice %s: %v", s.Name, errs)
		}
	}

	// What the data plane gets from it: the lab's address plan, port by port.
	tr := model.NewTracker()
	tr.Replace(svcs, eps)
	snap, _ := tr.Snapshot()
	var got []string
	for _, sp := range snap.Sorted() {
		line := sp.Name.String() + " " + string(sp.Name.Protocol) + " " + string(sp.Type)
		for _, a := range sp.ClusterIPs {
			line += " cluster=" + a.String()
		}
		for _, a := range sp.LoadBalancerIPs {
			line += " lb=" + a.Addr.String()
		}
		if sp.NodePort != 0 {
			line += fmt.Sprintf(" nodePort=%d", sp.NodePort)
		}
		for _, e := range sp.Endpoints {
			line += " ep=" + e.String() + "@" + e.NodeName
			if !e.Ready {
				line += "(not ready)"
			}
		}
		got = append(got, line)
	}
	want := []string{
		"default/dns:dns UDP ClusterIP cluster=10.96.0.53 ep=10.200.2.11:5353@backend-1 ep=10.200.2.12:5353@backend-2 ep=10.200.2.13:5353@backend-3",
		"default/web:http TCP LoadBalancer cluster=10.96.0.10 cluster=fd00:96::10 lb=203.0.113.10 lb=2001:db8:113::10 nodePort=30080" +
			" ep=10.200.2.11:8080@backend-1 ep=10.200.2.12:8080@backend-2 ep=10.200.2.13:8080@backend-3" +
			" ep=[fd00:200:2::11]:8080@backend-1 ep=[fd00:200:2::12]:8080@backend-2 ep=[fd00:200:2::13]:8080@backend-3",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("service ports (-want +got):\n%s", diff)
	}
}
