package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/source/cluster"
	"github.com/edgegate/edgegate/lab"
	"github.com/edgegate/edgegate/lab/labtest"
)

// TestFailClosedInCluster: Services whose loadBalancerSourceRanges or other fields today's
// apiserver accepts padded, or refuses but older clusters still hold (written here straight
// into etcd), in nftables and iptables mode. Padded and leading-zero ranges admit client-1
// (10.200.1.2, inside) and refuse client-2 (10.200.3.2, outside); a range no parser accepts
// refuses both; a Service that never had a good version refuses everyone; a bad version of
// a good Service keeps the good one. Each rejection is an Event on the object and a count in
// edgegate_objects_rejected_total. On the host it runs the modes -edgegate.modes names
// (nftables and iptables); qemu's TestIPVSInCluster runs it in ipvs mode inside the firmware,
// attached to a cluster on the host.
//
// Addresses: ClusterIPs 10.96.10.120-124, node ports 30240-30249, LoadBalancer IPs
// 203.0.113.120-124.
func TestFailClosedInCluster(t *testing.T) {
	e := newEnv(t)
	l := e.lab
	lbService := func(name string, last byte, ranges ...string) *v1.Service {
		svc := service(name, fmt.Sprintf("10.96.10.%d", last), 30000+2*int32(last))
		svc.Spec.Type = v1.ServiceTypeLoadBalancer
		svc.Spec.LoadBalancerSourceRanges = ranges
		return svc
	}
	// Created through the API, as today's apiserver takes them; the status is the LB IP.
	for _, s := range []*v1.Service{
		lbService("padded", 120, " 10.200.1.0/24", "192.0.2.0/24 "),
		lbService("zeros", 121, "10.200.1.0/24"),
		lbService("unreadable", 122, "10.200.1.0/24"),
		lbService("refused", 123),
		lbService("lastgood", 124),
	} {
		e.createService(t, s, slice(s.Name+"-1", s.Name, 1, 2, 3))
		e.setIngress(t, s.Name, fmt.Sprintf("203.0.113.%s", strings.TrimPrefix(s.Spec.ClusterIP, "10.96.10.")))
	}
	// Rewritten in etcd as an older apiserver let them be stored.
	e.rewriteInEtcd(t, "zeros", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"010.200.001.000/24"} })
	e.rewriteInEtcd(t, "unreadable", func(s *v1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{"10.200.1.0/24", "10.200.1.0/33"}
	})
	e.rewriteInEtcd(t, "refused", func(s *v1.Service) { s.Spec.Ports[0].Name = "HTTP_1" })

	for mode := range strings.SplitSeq(*modes, ",") {
		t.Run(mode, func(t *testing.T) {
			args := append(e.daemonArgs(), "--proxy-mode="+mode)
			started := time.Now()
			d := labtest.StartDaemon(t, l.Gateway, args...)
			defer d.Stop(t)
			if _, ok := d.LogLine("msg=starting", "mode="+mode); !ok {
				t.Fatalf("the daemon did not start in %s mode", mode)
			}
			follows(t, l.Client, "padded ranges admit client-1", "203.0.113.120:80", "", b1, b2, b3)
			if mode == "ipvs" {
				// The insider is balanced by IPVS, and the firewall in front keeps the outsider
				// from it: the virtual servers of the closed Service exist too.
				ipvsHolds(t, l, "203.0.113.120:80", "203.0.113.122:80", "10.96.10.122:80")
			}
			unanswered(t, l.Client2, "203.0.113.120:80")
			follows(t, l.Client, "leading-zero ranges admit client-1", "203.0.113.121:80", "", b1, b2, b3)
			unanswered(t, l.Client2, "203.0.113.121:80")
			// Nobody passes a range that cannot be understood; the ClusterIP still serves.
			unanswered(t, l.Client, "203.0.113.122:80")
			unanswered(t, l.Client2, "203.0.113.122:80")
			follows(t, l.Client, "unreadable ranges leave the ClusterIP open", "10.96.10.122:80", "", b1, b2, b3)
			// No good version: its addresses refuse everyone, endpoints or not.
			outcome(t, l.Client, "203.0.113.123:80", lab.Refused)
			outcome(t, l.Client, "10.96.10.123:80", lab.Refused)
			// A bad version of a good Service keeps the good one: port 80 stays, 81 is not served.
			follows(t, l.Client, "lastgood serves", "203.0.113.124:80", "", b1, b2, b3)
			e.rewriteInEtcd(t, "lastgood", func(s *v1.Service) {
				s.Spec.Ports[0].Name = "HTTP_1"
				s.Spec.Ports[0].Port = 81
			})
			e.eventOn(t, started, "lastgood", cluster.ReasonRejected)
			follows(t, l.Client, "lastgood keeps its good version", "203.0.113.124:80", "", b1, b2, b3)
			unanswered(t, l.Client, "203.0.113.124:81")
			e.updateService(t, "lastgood", func(s *v1.Service) { s.Spec.Ports[0].Name, s.Spec.Ports[0].Port = httpPort, 80 })

			e.eventOn(t, started, "unreadable", cluster.ReasonSourcesClosed)
			e.eventOn(t, started, "refused", cluster.ReasonRefused)
			metrics := e.scrape(t)
			for _, series := range []string{
				`edgegate_objects_rejected_total{kind="Service",reason="source-ranges-closed"} 1`,
				`edgegate_objects_rejected_total{kind="Service",reason="refused"} 1`,
				`edgegate_objects_rejected_total{kind="Service",reason="kept-last-good"} 1`,
			} {
				if !strings.Contains(metrics, series+"\n") {
					t.Errorf("metrics lack %s", series)
				}
			}
			if line, ok := d.LogLine("loadBalancerSourceRanges cannot be understood", testNamespace+"/unreadable"); !ok {
				t.Errorf("the log does not say the source ranges closed the LoadBalancer IPs")
			} else {
				t.Logf("log: %s", line)
			}
		})
	}
}

// setIngress writes a Service's status.loadBalancer.ingress, as a load balancer controller
// would.
func (e *env) setIngress(t *testing.T, name, ip string) {
	t.Helper()
	services := e.admin.CoreV1().Services(testNamespace)
	svc, err := services.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: ip}}
	if _, err := services.UpdateStatus(t.Context(), svc, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status of %s: %v", name, err)
	}
}

// rewriteInEtcd changes a Service where the apiserver keeps it, past its validation: the
// apiserver stores objects in protobuf under /registry, and serves what etcd holds.
func (e *env) rewriteInEtcd(t *testing.T, name string, change func(*v1.Service)) {
	t.Helper()
	svc, err := e.admin.CoreV1().Services(testNamespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	change(svc)
	svc.ResourceVersion = "" // etcd's revision is the version; stored objects carry none
	svc.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}
	var value bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(svc, &value); err != nil {
		t.Fatal(err)
	}
	key := "/registry/services/specs/" + testNamespace + "/" + name
	body, _ := json.Marshal(map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte(key)),
		"value": base64.StdEncoding.EncodeToString(value.Bytes()),
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: e.lab.Upstream.DialContext}}
	resp, err := client.Post(e.c.EtcdURL+"/v3/kv/put", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("etcd put %s: %v", key, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd put %s: %s", key, resp.Status)
	}
	// The apiserver's watch cache follows etcd: wait until it serves the change.
	eventually(t, 30*time.Second, "the apiserver serves "+name+" as written in etcd", func() (bool, string) {
		got, err := e.admin.CoreV1().Services(testNamespace).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return apiequality.Semantic.DeepEqual(got.Spec, svc.Spec), fmt.Sprintf("%+v", got.Spec)
	})
}

// eventOn waits for a Warning Event with reason on the Service name, recorded since.
func (e *env) eventOn(t *testing.T, since time.Time, name, reason string) {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("event %s on %s", reason, name), func() (bool, string) {
		evs, err := e.admin.CoreV1().Events(testNamespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, ev := range evs.Items {
			if ev.InvolvedObject.Kind == "Service" && ev.InvolvedObject.Name == name {
				if ev.Reason == reason && ev.Type == v1.EventTypeWarning && ev.ReportingInstance == lab.GatewayNodeName &&
					!ev.LastTimestamp.Time.Before(since.Truncate(time.Second)) {
					t.Logf("event on %s: %s: %s", name, ev.Reason, ev.Message)
					return true, ""
				}
				seen = append(seen, ev.Reason)
			}
		}
		return false, fmt.Sprintf("events on %s: %v", name, seen)
	})
}

// scrape returns the gateway's metrics.
func (e *env) scrape(t *testing.T) string {
	t.Helper()
	code, body, err := e.lab.Gateway.Fetch("http://127.0.0.1:10249/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("metrics: %d %v", code, err)
	}
	return body
}

// ipvsHolds checks that the gateway's IPVS table has a TCP virtual server for each address,
// each with the three backends as real servers.
func ipvsHolds(t *testing.T, l *lab.Lab, addrs ...string) {
	t.Helper()
	entries, err := l.Gateway.IPVS()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		found := false
		for _, e := range entries {
			if netip.AddrPortFrom(e.Addr, e.Port).String() == a && e.Proto == model.TCP {
				found = true
				if n := len(e.Destinations); n != 3 {
					t.Errorf("IPVS virtual server %s has %d real servers, want 3: %v", e.VSKey, n, e.RealServers())
				}
			}
		}
		if !found {
			t.Errorf("no IPVS virtual server TCP %s", a)
		}
	}
}
