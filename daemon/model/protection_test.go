package model

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseProtection(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		mss4     uint16
		mss6     uint16
		wscale   uint8
		burst    uint32
	}{
		{in: "{synProxy: true}", want: "{synProxy: true}", mss4: 1460, mss6: 1440, wscale: 7},
		{in: `{"synProxy": true, "synProxyMSS": 1400, "synProxyWindowScale": 0}`,
			want: "{synProxy: true, synProxyMSS: 1400, synProxyWindowScale: 0}", mss4: 1400, mss6: 1400, wscale: 0},
		{in: "maxConnsPerSource: 64\nnewConnsPerSecond: 20", want: "{maxConnsPerSource: 64, newConnsPerSecond: 20}",
			mss4: 1460, mss6: 1440, wscale: 7, burst: 20},
		{in: "{newConnsPerSecond: 5, newConnsBurst: 50}", want: "{newConnsPerSecond: 5, newConnsBurst: 50}",
			mss4: 1460, mss6: 1440, wscale: 7, burst: 50},
	} {
		p, err := ParseProtection([]byte(tc.in))
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if got := p.String(); got != tc.want {
			t.Errorf("%q: String() = %q, want %q", tc.in, got, tc.want)
		}
		if p.MSS(IPv4) != tc.mss4 || p.MSS(IPv6) != tc.mss6 || p.WindowScale() != tc.wscale || p.Burst() != tc.burst {
			t.Errorf("%q: mss %d/%d wscale %d burst %d", tc.in, p.MSS(IPv4), p.MSS(IPv6), p.WindowScale(), p.Burst())
		}
		// The string form reads back as the same protection.
		if again, err := ParseProtection([]byte(p.String())); err != nil || again.String() != p.String() {
			t.Errorf("%q: String() %q does not read back: %v", tc.in, p.String(), err)
		}
	}
}

func TestParseProtectionRefuses(t *testing.T) {
	for in, want := range map[string]string{
		"{synCookies: true}":                 `unknown field "synCookies"`,
		"{}":                                 "sets nothing",
		"{synProxy: false}":                  "sets nothing",
		"{synProxyMSS: 1400}":                "synProxyMSS and synProxyWindowScale: only with synProxy: true",
		"{synProxy: true, synProxyMSS: 100}": "synProxyMSS: 100 is not between 536 and 65495",
		"{synProxy: true, synProxyWindowScale: 15}":     "synProxyWindowScale: 15 is above 14",
		"{maxConnsPerSource: -1}":                       "maxConnsPerSource",
		"{maxConnsPerSource: 99999999}":                 "maxConnsPerSource: 99999999 is above 16777216",
		"{newConnsBurst: 10}":                           "newConnsBurst: only with newConnsPerSecond",
		"{newConnsPerSecond: 1, newConnsBurst: 1e9}":    "newConnsBurst",
		"synProxy: [true]":                              "synProxy",
		"{maxConnsPerSource: 10, maxConnsPerSource: 1}": "already set",
	} {
		_, err := ParseProtection([]byte(in))
		if err == nil {
			t.Errorf("%q: accepted", in)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %q does not contain %q", in, err, want)
		}
	}
}

// A Service whose protection annotation cannot be read is rejected, the annotation named
// as the field; a good one reaches every port of an exposed Service and none of a
// ClusterIP Service.
func TestProtectionAnnotation(t *testing.T) {
	svc := func(typ v1.ServiceType, protection string) *v1.Service {
		s := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Annotations: map[string]string{ProtectionAnnotation: protection}},
			Spec: v1.ServiceSpec{Type: typ, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080},
					{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053}}},
		}
		if typ == v1.ServiceTypeClusterIP {
			for i := range s.Spec.Ports {
				s.Spec.Ports[i].NodePort = 0
			}
		}
		return s
	}
	errs := ValidateService(svc(v1.ServiceTypeNodePort, "{synProxy: yes please}"))
	if len(errs) != 1 || errs[0].Field != "metadata.annotations[edgegate.dev/protection]" {
		t.Fatalf("errors %v, want one naming metadata.annotations[edgegate.dev/protection]", errs)
	}
	good := svc(v1.ServiceTypeNodePort, "{synProxy: true, maxConnsPerSource: 8}")
	if errs := ValidateService(good); len(errs) > 0 {
		t.Fatalf("errors %v", errs)
	}
	for _, sp := range ServicePorts(good, nil) {
		if got := sp.Protection.String(); got != "{synProxy: true, maxConnsPerSource: 8}" {
			t.Errorf("%s: protection %q", sp.Name, got)
		}
	}
	for _, sp := range ServicePorts(svc(v1.ServiceTypeClusterIP, "{synProxy: true}"), nil) {
		if sp.Protection != nil {
			t.Errorf("%s: a ClusterIP Service's port is protected: %v", sp.Name, sp.Protection)
		}
	}
}
