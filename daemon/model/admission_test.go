package model_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// Addresses: cluster IP 10.96.0.10, LoadBalancer IP 203.0.113.10, endpoint 10.200.2.11:8080.

// admitted is an Admission in front of a fresh Tracker that collects its reports.
type admitted struct {
	t       *model.Tracker
	a       *model.Admission
	reports []string
}

func newAdmitted() *admitted {
	ad := &admitted{t: model.NewTracker()}
	ad.a = model.NewAdmission(ad.t, func(r model.Rejection) {
		var fields []string
		for _, e := range r.Errs {
			fields = append(fields, e.Field)
		}
		ad.reports = append(ad.reports, fmt.Sprintf("%s %s %s %s", r.Kind(), r.Object(), r.Outcome, strings.Join(fields, ",")))
	})
	return ad
}

// port is what the snapshot holds of web's http port: its LoadBalancer IPs, whether the
// source ranges closed them, and its endpoints; "absent" without one.
func (ad *admitted) port() string {
	s, _ := ad.t.Snapshot()
	sp := s.Port(model.ServicePortName{ServiceName: model.ServiceName{Namespace: "default", Name: "web"}, Port: "http", Protocol: model.TCP})
	if sp == nil {
		return "absent"
	}
	return fmt.Sprintf("lb=%d closed=%v endpoints=%v", len(sp.LoadBalancerIPs), sp.SourcesClosed, sp.Endpoints)
}

func admissionWeb(version string, mods ...func(*v1.Service)) *v1.Service {
	svc := mt.Service("default", "web", "10.96.0.10", append([]func(*v1.Service){
		mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080), mt.Type(v1.ServiceTypeLoadBalancer), mt.LoadBalancerIPs("203.0.113.10"),
	}, mods...)...)
	svc.ResourceVersion = version
	return svc
}

func admissionSlice(version, addr string) *discovery.EndpointSlice {
	s := mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.200.2.11"))
	s.Endpoints[0].Addresses = []string{addr}
	s.ResourceVersion = version
	return s
}

// badPort is a field the API server refuses today but an object stored earlier, or a
// manifest, may hold.
func badPort(s *v1.Service) { s.Spec.Ports[0].Name = "HTTP_1" }

func TestAdmissionKeepsTheLastGoodService(t *testing.T) {
	ad := newAdmitted()
	ad.a.UpsertSlice(admissionSlice("1", "10.200.2.11"))
	ad.a.UpsertService(admissionWeb("2"))
	if got := ad.port(); got != "lb=1 closed=false endpoints=[10.200.2.11:8080]" {
		t.Fatalf("good version: %s", got)
	}
	// A bad version keeps the good one, and is reported once however often it comes.
	ad.a.UpsertService(admissionWeb("3", badPort, mt.LoadBalancerIPs("203.0.113.11")))
	ad.a.UpsertService(admissionWeb("3", badPort, mt.LoadBalancerIPs("203.0.113.11")))
	ad.a.Replace([]*v1.Service{admissionWeb("3", badPort, mt.LoadBalancerIPs("203.0.113.11"))},
		[]*discovery.EndpointSlice{admissionSlice("1", "10.200.2.11")})
	if got := ad.port(); got != "lb=1 closed=false endpoints=[10.200.2.11:8080]" {
		t.Errorf("after a bad version: %s", got)
	}
	want := []string{"Service default/web kept-last-good spec.ports[0].name"}
	if !slices.Equal(ad.reports, want) {
		t.Errorf("reports %q, want %q", ad.reports, want)
	}
	// The next good version is taken.
	ad.a.UpsertService(admissionWeb("4", mt.LoadBalancerIPs("203.0.113.11")))
	if got := ad.port(); got != "lb=2 closed=false endpoints=[10.200.2.11:8080]" {
		t.Errorf("after a good version: %s", got)
	}
}

func TestAdmissionRefusesAServiceWithoutAGoodVersion(t *testing.T) {
	ad := newAdmitted()
	ad.a.UpsertSlice(admissionSlice("1", "10.200.2.11"))
	ad.a.UpsertService(admissionWeb("2", badPort))
	// Not skipped: its addresses are programmed without endpoints, so they refuse everyone.
	s, _ := ad.t.Snapshot()
	sps := s.Sorted()
	if len(sps) != 1 || len(sps[0].Endpoints) != 0 || len(sps[0].LoadBalancerIPs) != 1 || len(sps[0].ClusterIPs) != 1 {
		t.Fatalf("refused Service: %+v", sps)
	}
	if want := []string{"Service default/web refused spec.ports[0].name"}; !slices.Equal(ad.reports, want) {
		t.Errorf("reports %q, want %q", ad.reports, want)
	}
	// Fixed, it gets its endpoints.
	ad.a.UpsertService(admissionWeb("3"))
	if got := ad.port(); got != "lb=1 closed=false endpoints=[10.200.2.11:8080]" {
		t.Errorf("fixed: %s", got)
	}
	// Deleted and created again broken, it has no good version to fall back on.
	ad.a.DeleteService("default", "web")
	ad.a.UpsertService(admissionWeb("5", badPort))
	s, _ = ad.t.Snapshot()
	if sps := s.Sorted(); len(sps) != 1 || len(sps[0].Endpoints) != 0 {
		t.Errorf("recreated broken: %+v", sps)
	}
}

func TestAdmissionRefusedPortsAreOnlyWhatCanBeRead(t *testing.T) {
	ad := newAdmitted()
	ad.a.UpsertService(admissionWeb("1", func(s *v1.Service) {
		s.Spec.Ports = append(s.Spec.Ports,
			v1.ServicePort{Name: "big", Protocol: v1.ProtocolTCP, Port: 70000},
			v1.ServicePort{Name: "odd", Protocol: "ICMP", Port: 81},
			v1.ServicePort{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 99999})
	}))
	s, _ := ad.t.Snapshot()
	var got []string
	for _, sp := range s.Sorted() {
		got = append(got, fmt.Sprintf("%s/%d nodePort %d endpoints %d", sp.Name.Port, sp.Port, sp.NodePort, len(sp.Endpoints)))
	}
	want := []string{"dns/53 nodePort 0 endpoints 0", "http/80 nodePort 30080 endpoints 0"}
	if !slices.Equal(got, want) {
		t.Errorf("refused ports %q, want %q", got, want)
	}
}

func TestAdmissionClosesUnreadableSourceRanges(t *testing.T) {
	ad := newAdmitted()
	ad.a.UpsertSlice(admissionSlice("1", "10.200.2.11"))
	ad.a.UpsertService(admissionWeb("2"))
	// A range no parser accepts does not keep the open version: the IPs close.
	ad.a.UpsertService(admissionWeb("3", mt.SourceRanges("10.200.1.0/24", "10.200.1.0/33")))
	if got := ad.port(); got != "lb=1 closed=true endpoints=[10.200.2.11:8080]" {
		t.Errorf("unreadable range: %s", got)
	}
	// A padded one is read as kube-proxy reads it, and reported by nobody.
	ad.a.UpsertService(admissionWeb("4", mt.SourceRanges(" 10.200.1.0/24")))
	if got := ad.port(); got != "lb=1 closed=false endpoints=[10.200.2.11:8080]" {
		t.Errorf("padded range: %s", got)
	}
	if want := []string{"Service default/web source-ranges-closed spec.loadBalancerSourceRanges[1]"}; !slices.Equal(ad.reports, want) {
		t.Errorf("reports %q, want %q", ad.reports, want)
	}
}

func TestAdmissionEndpointSlices(t *testing.T) {
	ad := newAdmitted()
	ad.a.UpsertService(admissionWeb("1"))
	ad.a.UpsertSlice(admissionSlice("2", "127.0.0.1"))
	if got := ad.port(); got != "lb=1 closed=false endpoints=[]" {
		t.Errorf("a slice without a good version adds nothing: %s", got)
	}
	ad.a.UpsertSlice(admissionSlice("3", "10.200.2.11"))
	ad.a.UpsertSlice(admissionSlice("4", "127.0.0.1"))
	if got := ad.port(); got != "lb=1 closed=false endpoints=[10.200.2.11:8080]" {
		t.Errorf("a bad version keeps the good one: %s", got)
	}
	want := []string{
		"EndpointSlice default/web-1 skipped endpoints[0].addresses[0]",
		"EndpointSlice default/web-1 kept-last-good endpoints[0].addresses[0]",
	}
	if !slices.Equal(ad.reports, want) {
		t.Errorf("reports %q, want %q", ad.reports, want)
	}
}

func TestAdmissionReplace(t *testing.T) {
	ad := newAdmitted()
	// A cache loaded at start: the bad Service has no good version yet.
	ad.a.Replace([]*v1.Service{admissionWeb("2", badPort)}, []*discovery.EndpointSlice{admissionSlice("1", "10.200.2.11")})
	s, _ := ad.t.Snapshot()
	if sps := s.Sorted(); len(sps) != 1 || len(sps[0].Endpoints) != 0 {
		t.Fatalf("refused from the cache: %+v", sps)
	}
	// The API server's list holds a good version, then a watch brings a bad one.
	ad.a.Replace([]*v1.Service{admissionWeb("3")}, []*discovery.EndpointSlice{admissionSlice("1", "10.200.2.11")})
	ad.a.UpsertService(admissionWeb("4", badPort))
	if got := ad.port(); got != "lb=1 closed=false endpoints=[10.200.2.11:8080]" {
		t.Errorf("kept across a replace: %s", got)
	}
	// A relist without it removes it and its last good version.
	ad.a.Replace(nil, nil)
	ad.a.UpsertService(admissionWeb("6", badPort))
	s, _ = ad.t.Snapshot()
	if sps := s.Sorted(); len(sps) != 1 || len(sps[0].Endpoints) != 0 {
		t.Errorf("after a relist without it, the bad version has nothing to fall back on: %+v", sps)
	}
	want := []string{
		"Service default/web refused spec.ports[0].name",
		"Service default/web kept-last-good spec.ports[0].name",
		"Service default/web refused spec.ports[0].name",
	}
	if !slices.Equal(ad.reports, want) {
		t.Errorf("reports %q, want %q", ad.reports, want)
	}
}
