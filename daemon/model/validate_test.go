package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
)

// validService is a dual-stack LoadBalancer that passes every rule; each case breaks one.
// Addresses: cluster IPs 10.96.0.10 and fd00:96::10, ingress 203.0.113.10.
func validService() *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: v1.ServiceSpec{
			Type:           v1.ServiceTypeLoadBalancer,
			ClusterIP:      "10.96.0.10",
			ClusterIPs:     []string{"10.96.0.10", "fd00:96::10"},
			IPFamilies:     []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
			IPFamilyPolicy: ptr.To(v1.IPFamilyPolicyRequireDualStack),
			Ports: []v1.ServicePort{
				{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080, Protocol: v1.ProtocolTCP},
				{Name: "dns", Port: 53, TargetPort: intstr.FromString("dns"), Protocol: v1.ProtocolUDP},
			},
			ExternalIPs:              []string{"192.0.2.7"},
			LoadBalancerSourceRanges: []string{"198.51.100.0/24", "2001:db8::/32"},
			SessionAffinity:          v1.ServiceAffinityClientIP,
			SessionAffinityConfig:    &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
			ExternalTrafficPolicy:    v1.ServiceExternalTrafficPolicyLocal,
			InternalTrafficPolicy:    ptr.To(v1.ServiceInternalTrafficPolicyCluster),
			HealthCheckNodePort:      32000,
			TrafficDistribution:      ptr.To(v1.ServiceTrafficDistributionPreferClose),
		},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
			{IP: "203.0.113.10", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)},
			{Hostname: "lb.example.com"},
		}}},
	}
}

// singleClusterIP gives the Service only the one cluster IP ip, with no family settings.
func singleClusterIP(ip string) func(*v1.Service) {
	return func(s *v1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies, s.Spec.IPFamilyPolicy = ip, nil, nil, nil
	}
}

// modCase is a change to a valid object and the validation errors it must cause.
type modCase[T any] struct {
	name string
	mod  func(*T)
	want []string
}

// checkMods applies each case's change to a fresh valid object and compares what validate
// reports with the case's errors.
func checkMods[T any](t *testing.T, valid func() *T, validate func(*T) field.ErrorList, cases []modCase[T]) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := valid()
			tc.mod(obj)
			var got []string
			for _, e := range validate(obj) {
				got = append(got, e.Error())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateService(t *testing.T) {
	checkMods(t, validService, ValidateService, []modCase[v1.Service]{
		{"valid", func(*v1.Service) {}, nil},
		{"name required", func(s *v1.Service) { s.Name = "" }, []string{"metadata.name: Required value"}},
		{"name not a DNS-1035 label", func(s *v1.Service) { s.Name = "1web" },
			[]string{`metadata.name: Invalid value: "1web": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`}},
		{"namespace may be empty", func(s *v1.Service) { s.Namespace = "" }, nil},
		{"namespace invalid", func(s *v1.Service) { s.Namespace = "Prod" },
			[]string{`metadata.namespace: Invalid value: "Prod": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{"type unknown", func(s *v1.Service) { s.Spec.Type = "Internal" },
			[]string{`spec.type: Unsupported value: "Internal": supported values: "ClusterIP", "NodePort", "LoadBalancer", "ExternalName"`,
				"spec.ports[0].nodePort: Forbidden: may only be set for NodePort and LoadBalancer services",
				"spec.healthCheckNodePort: Forbidden: may only be set for LoadBalancer services with externalTrafficPolicy Local"}},
		{"type empty means ClusterIP", func(s *v1.Service) {
			s.Spec.Type = ""
			s.Spec.Ports[0].NodePort = 0
			s.Spec.HealthCheckNodePort = 0
		}, nil},
		{"ExternalName needs nothing else", func(s *v1.Service) {
			s.Spec = v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "db.example.com", Ports: []v1.ServicePort{{Port: 0}}}
		}, nil},
		{"ExternalName needs a name", func(s *v1.Service) { s.Spec = v1.ServiceSpec{Type: v1.ServiceTypeExternalName} },
			[]string{"spec.externalName: Required value: an ExternalName service needs the name it aliases"}},
		{"cluster IP required", func(s *v1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilyPolicy = "", nil, nil },
			[]string{"spec.clusterIP: Required value: set a cluster IP, or None for a headless service (standalone mode allocates no addresses)"}},
		{"headless needs no ports", func(s *v1.Service) {
			s.Spec.Type, s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.Ports = v1.ServiceTypeClusterIP, "None", []string{"None"}, nil
			s.Spec.HealthCheckNodePort = 0
		}, nil},
		{"headless with addresses", func(s *v1.Service) { s.Spec.ClusterIP = "None" },
			[]string{`spec.clusterIPs: Invalid value: ["10.96.0.10","fd00:96::10"]: must be empty or [None] for a headless service`}},
		{"cluster IP unparsable", singleClusterIP("10.96.0.256"),
			[]string{`spec.clusterIP: Invalid value: "10.96.0.256": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		// Stored before the API server refused leading zeros; kube-proxy reads them as decimal.
		{"cluster IP with leading zero", singleClusterIP("10.96.0.010"), nil},
		{"cluster IP with zone", func(s *v1.Service) { s.Spec.ClusterIPs[1] = "fd00:96::10%eth0" },
			[]string{`spec.clusterIPs[1]: Invalid value: "fd00:96::10%eth0": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`,
				`spec.ipFamilyPolicy: Invalid value: "RequireDualStack": needs one cluster IP of each family in spec.clusterIPs`}},
		{"cluster IP mapped", singleClusterIP("::ffff:10.96.0.10"),
			[]string{`spec.clusterIP: Invalid value: "::ffff:10.96.0.10": must not be an IPv4-mapped IPv6 address`}},
		{"cluster IP loopback", func(s *v1.Service) { s.Spec.ClusterIPs[1] = "::1" },
			[]string{`spec.clusterIPs[1]: Invalid value: "::1": may not be in the loopback range (127.0.0.0/8 or ::1/128)`,
				`spec.ipFamilyPolicy: Invalid value: "RequireDualStack": needs one cluster IP of each family in spec.clusterIPs`}},
		{"cluster IP unspecified", singleClusterIP("0.0.0.0"),
			[]string{`spec.clusterIP: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0 or ::)`}},
		{"clusterIPs first differs", func(s *v1.Service) { s.Spec.ClusterIPs[0] = "10.96.0.11" },
			[]string{`spec.clusterIPs[0]: Invalid value: "10.96.0.11": must equal spec.clusterIP`}},
		{"clusterIPs two of a family", func(s *v1.Service) { s.Spec.ClusterIPs[1] = "10.96.0.11" },
			[]string{`spec.clusterIPs[1]: Invalid value: "10.96.0.11": may hold at most one address of each IP family`,
				`spec.ipFamilyPolicy: Invalid value: "RequireDualStack": needs one cluster IP of each family in spec.clusterIPs`}},
		{"ipFamilies order", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol} },
			[]string{`spec.ipFamilies[0]: Invalid value: "IPv6": must match the family of the cluster IP at the same index (IPv4)`,
				`spec.ipFamilies[1]: Invalid value: "IPv4": must match the family of the cluster IP at the same index (IPv6)`}},
		{"ipFamilies unknown", func(s *v1.Service) { s.Spec.IPFamilies = []v1.IPFamily{"IPv5"} },
			[]string{`spec.ipFamilies[0]: Unsupported value: "IPv5": supported values: "IPv4", "IPv6"`}},
		{"ipFamilyPolicy unknown", func(s *v1.Service) { s.Spec.IPFamilyPolicy = ptr.To[v1.IPFamilyPolicy]("DualStack") },
			[]string{`spec.ipFamilyPolicy: Unsupported value: "DualStack": supported values: "SingleStack", "PreferDualStack", "RequireDualStack"`}},
		{"RequireDualStack with one address", func(s *v1.Service) { s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1] },
			[]string{`spec.ipFamilyPolicy: Invalid value: "RequireDualStack": needs one cluster IP of each family in spec.clusterIPs`}},
		{"SingleStack with two addresses", func(s *v1.Service) { s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicySingleStack) },
			[]string{`spec.ipFamilyPolicy: Invalid value: "SingleStack": allows only one cluster IP`}},
		{"ports required", func(s *v1.Service) { s.Spec.Ports = nil },
			[]string{"spec.ports: Required value: a service with a cluster IP needs at least one port"}},
		{"port out of range", func(s *v1.Service) { s.Spec.Ports[1].Port = 70000 },
			[]string{"spec.ports[1].port: Invalid value: 70000: must be between 1 and 65535"}},
		{"port zero", func(s *v1.Service) { s.Spec.Ports[0].Port = 0 },
			[]string{"spec.ports[0].port: Invalid value: 0: must be between 1 and 65535"}},
		{"protocol unknown", func(s *v1.Service) { s.Spec.Ports[1].Protocol = "udp" },
			[]string{`spec.ports[1].protocol: Unsupported value: "udp": supported values: "TCP", "UDP", "SCTP"`}},
		{"protocol empty is TCP", func(s *v1.Service) { s.Spec.Ports[0].Protocol = "" }, nil},
		{"same port and protocol twice", func(s *v1.Service) { s.Spec.Ports[1].Port, s.Spec.Ports[1].Protocol = 80, "" },
			[]string{"spec.ports[1].port: Duplicate value: 80"}},
		{"same port, other protocol", func(s *v1.Service) { s.Spec.Ports[1].Port = 80 }, nil},
		{"port name required with two ports", func(s *v1.Service) { s.Spec.Ports[1].Name = "" },
			[]string{"spec.ports[1].name: Required value: required when a service has more than one port"}},
		{"port name optional with one port", func(s *v1.Service) { s.Spec.Ports = s.Spec.Ports[:1]; s.Spec.Ports[0].Name = "" }, nil},
		{"port names unique", func(s *v1.Service) { s.Spec.Ports[1].Name = "http" },
			[]string{`spec.ports[1].name: Duplicate value: "http"`}},
		{"port name invalid", func(s *v1.Service) { s.Spec.Ports[1].Name = "DNS" },
			[]string{`spec.ports[1].name: Invalid value: "DNS": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{"nodePort out of range", func(s *v1.Service) { s.Spec.Ports[0].NodePort = 65536 },
			[]string{"spec.ports[0].nodePort: Invalid value: 65536: must be between 1 and 65535"}},
		{"nodePort negative", func(s *v1.Service) { s.Spec.Ports[0].NodePort = -1 },
			[]string{"spec.ports[0].nodePort: Invalid value: -1: must be between 1 and 65535"}},
		{"nodePort twice", func(s *v1.Service) { s.Spec.Ports[1].NodePort, s.Spec.Ports[1].Protocol = 30080, v1.ProtocolTCP },
			[]string{"spec.ports[1].nodePort: Duplicate value: 30080"}},
		{"nodePort on ClusterIP", func(s *v1.Service) { s.Spec.Type, s.Spec.HealthCheckNodePort = v1.ServiceTypeClusterIP, 0 },
			[]string{"spec.ports[0].nodePort: Forbidden: may only be set for NodePort and LoadBalancer services"}},
		{"nodePort on NodePort", func(s *v1.Service) { s.Spec.Type, s.Spec.HealthCheckNodePort = v1.ServiceTypeNodePort, 0 }, nil},
		{"targetPort out of range", func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(80800) },
			[]string{"spec.ports[0].targetPort: Invalid value: 80800: must be between 1 and 65535"}},
		{"targetPort name invalid", func(s *v1.Service) { s.Spec.Ports[1].TargetPort = intstr.FromString("dns_") },
			[]string{`spec.ports[1].targetPort: Invalid value: "dns_": must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)`}},
		{"externalIP invalid", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.7", "example.com"} },
			[]string{`spec.externalIPs[1]: Invalid value: "example.com": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{"externalIP link-local", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"169.254.1.1"} },
			[]string{`spec.externalIPs[0]: Invalid value: "169.254.1.1": may not be in the link-local range (169.254.0.0/16 or fe80::/10)`}},
		{"externalIP multicast", func(s *v1.Service) { s.Spec.ExternalIPs = []string{"ff02::1"} },
			[]string{`spec.externalIPs[0]: Invalid value: "ff02::1": may not be a multicast address`}},
		{"source range not a CIDR", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges[1] = "2001:db8::" },
			[]string{`spec.loadBalancerSourceRanges[1]: Invalid value: "2001:db8::": must be a CIDR (e.g. 192.0.2.0/24 or 2001:db8::/64); until it is, the LoadBalancer IPs refuse every source`}},
		{"source range padded, as the API server accepts it", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges[0] = " 198.51.100.0/24 " }, nil},
		{"source range with leading zeros, as older API servers stored it", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges[0] = "198.051.100.000/24" }, nil},
		{"source range with host bits is masked later", func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges[0] = "198.51.100.7/24" }, nil},
		{"ingress IP invalid", func(s *v1.Service) { s.Status.LoadBalancer.Ingress[0].IP = "203.0.113" },
			[]string{`status.loadBalancer.ingress[0].ip: Invalid value: "203.0.113": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{"ingress ipMode unknown", func(s *v1.Service) { s.Status.LoadBalancer.Ingress[0].IPMode = ptr.To[v1.LoadBalancerIPMode]("DSR") },
			[]string{`status.loadBalancer.ingress[0].ipMode: Unsupported value: "DSR": supported values: "VIP", "Proxy"`}},
		{"ingress ipMode without IP", func(s *v1.Service) { s.Status.LoadBalancer.Ingress[1].IPMode = ptr.To(v1.LoadBalancerIPModeProxy) },
			[]string{"status.loadBalancer.ingress[1].ip: Required value: required when ipMode is set"}},
		{"sessionAffinity unknown", func(s *v1.Service) { s.Spec.SessionAffinity = "Cookie" },
			[]string{`spec.sessionAffinity: Unsupported value: "Cookie": supported values: "None", "ClientIP"`}},
		{"affinity timeout zero", func(s *v1.Service) { s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptr.To[int32](0) },
			[]string{"spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 0: must be between 1 and 86400"}},
		{"affinity timeout over a day", func(s *v1.Service) { s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = ptr.To[int32](86401) },
			[]string{"spec.sessionAffinityConfig.clientIP.timeoutSeconds: Invalid value: 86401: must be between 1 and 86400"}},
		{"affinity config without ClientIP", func(s *v1.Service) { s.Spec.SessionAffinity = v1.ServiceAffinityNone },
			[]string{"spec.sessionAffinityConfig: Forbidden: may only be set when sessionAffinity is ClientIP"}},
		{"externalTrafficPolicy unknown", func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = "Global" },
			[]string{`spec.externalTrafficPolicy: Unsupported value: "Global": supported values: "Cluster", "Local"`,
				"spec.healthCheckNodePort: Forbidden: may only be set for LoadBalancer services with externalTrafficPolicy Local"}},
		{"internalTrafficPolicy unknown", func(s *v1.Service) { s.Spec.InternalTrafficPolicy = ptr.To[v1.ServiceInternalTrafficPolicy]("Node") },
			[]string{`spec.internalTrafficPolicy: Unsupported value: "Node": supported values: "Cluster", "Local"`}},
		{"healthCheckNodePort out of range", func(s *v1.Service) { s.Spec.HealthCheckNodePort = 70000 },
			[]string{"spec.healthCheckNodePort: Invalid value: 70000: must be between 1 and 65535"}},
		{"healthCheckNodePort with Cluster policy", func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster },
			[]string{"spec.healthCheckNodePort: Forbidden: may only be set for LoadBalancer services with externalTrafficPolicy Local"}},
		{"trafficDistribution unknown", func(s *v1.Service) { s.Spec.TrafficDistribution = ptr.To("PreferRegion") },
			[]string{`spec.trafficDistribution: Unsupported value: "PreferRegion": supported values: "PreferClose", "PreferSameZone", "PreferSameNode"`}},
		{"trafficDistribution PreferSameNode", func(s *v1.Service) { s.Spec.TrafficDistribution = ptr.To(v1.ServiceTrafficDistributionPreferSameNode) }, nil},
	})
}

// validSlice backs validService's http port from two pods, 10.200.2.11 and 10.200.2.12.
func validSlice() *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "web-ipv4",
			Labels: map[string]string{ServiceNameLabel: "web"},
		},
		AddressType: discovery.AddressTypeIPv4,
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.200.2.11"}, Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.200.2.12"}},
		},
		Ports: []discovery.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(v1.ProtocolTCP)},
			{Name: ptr.To("dns"), Port: ptr.To[int32](5353), Protocol: ptr.To(v1.ProtocolUDP)},
		},
	}
}

func TestValidateEndpointSlice(t *testing.T) {
	checkMods(t, validSlice, ValidateEndpointSlice, []modCase[discovery.EndpointSlice]{
		{"valid", func(*discovery.EndpointSlice) {}, nil},
		{"name required", func(s *discovery.EndpointSlice) { s.Name = "" }, []string{"metadata.name: Required value"}},
		{"name may be a subdomain", func(s *discovery.EndpointSlice) { s.Name = "web.ipv4" }, nil},
		{"name invalid", func(s *discovery.EndpointSlice) { s.Name = "web_ipv4" },
			[]string{`metadata.name: Invalid value: "web_ipv4": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"namespace invalid", func(s *discovery.EndpointSlice) { s.Namespace = "a.b" },
			[]string{`metadata.namespace: Invalid value: "a.b": must not contain dots`}},
		{"service label required", func(s *discovery.EndpointSlice) { s.Labels = nil },
			[]string{"metadata.labels[kubernetes.io/service-name]: Required value: names the Service this slice belongs to"}},
		{"service label not a service name", func(s *discovery.EndpointSlice) { s.Labels[ServiceNameLabel] = "Web" },
			[]string{`metadata.labels[kubernetes.io/service-name]: Invalid value: "Web": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`}},
		{"addressType unknown", func(s *discovery.EndpointSlice) { s.AddressType = "IP" },
			[]string{`addressType: Unsupported value: "IP": supported values: "IPv4", "IPv6", "FQDN"`}},
		{"addressType missing", func(s *discovery.EndpointSlice) { s.AddressType = "" },
			[]string{`addressType: Unsupported value: "": supported values: "IPv4", "IPv6", "FQDN"`}},
		{"address unparsable", func(s *discovery.EndpointSlice) { s.Endpoints[1].Addresses[0] = "10.200.2" },
			[]string{`endpoints[1].addresses[0]: Invalid value: "10.200.2": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{"address of the other family", func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses[0] = "fd00:200:2::11" },
			[]string{`endpoints[0].addresses[0]: Invalid value: "fd00:200:2::11": must be an IPv4 address (addressType IPv4)`}},
		{"IPv6 slice with IPv4 address", func(s *discovery.EndpointSlice) {
			s.AddressType = discovery.AddressTypeIPv6
			s.Endpoints[0].Addresses[0] = "fd00:200:2::11"
		}, []string{`endpoints[1].addresses[0]: Invalid value: "10.200.2.12": must be an IPv6 address (addressType IPv6)`}},
		{"mapped address in an IPv6 slice", func(s *discovery.EndpointSlice) {
			s.AddressType = discovery.AddressTypeIPv6
			s.Endpoints = s.Endpoints[:1]
			s.Endpoints[0].Addresses[0] = "::ffff:10.200.2.11"
		}, []string{`endpoints[0].addresses[0]: Invalid value: "::ffff:10.200.2.11": must not be an IPv4-mapped IPv6 address`}},
		{"loopback address", func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses[0] = "127.0.0.1" },
			[]string{`endpoints[0].addresses[0]: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8 or ::1/128)`}},
		{"second address checked too", func(s *discovery.EndpointSlice) { s.Endpoints[0].Addresses = append(s.Endpoints[0].Addresses, "x") },
			[]string{`endpoints[0].addresses[1]: Invalid value: "x": must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)`}},
		{"endpoint without address", func(s *discovery.EndpointSlice) { s.Endpoints[1].Addresses = nil },
			[]string{"endpoints[1].addresses: Required value: an endpoint needs at least one address"}},
		{"FQDN addresses", func(s *discovery.EndpointSlice) {
			s.AddressType = discovery.AddressTypeFQDN
			s.Endpoints[0].Addresses[0] = "backend-1.example.com"
			s.Endpoints[1].Addresses[0] = "backend_2"
		}, []string{`endpoints[1].addresses[0]: Invalid value: "backend_2": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"port out of range", func(s *discovery.EndpointSlice) { s.Ports[1].Port = ptr.To[int32](65536) },
			[]string{"ports[1].port: Invalid value: 65536: must be between 1 and 65535"}},
		{"port unset means all ports", func(s *discovery.EndpointSlice) { s.Ports[1].Port = nil }, nil},
		{"protocol unknown", func(s *discovery.EndpointSlice) { s.Ports[0].Protocol = ptr.To[v1.Protocol]("QUIC") },
			[]string{`ports[0].protocol: Unsupported value: "QUIC": supported values: "TCP", "UDP", "SCTP"`}},
		{"port names unique", func(s *discovery.EndpointSlice) { s.Ports[1].Name = ptr.To("http") },
			[]string{`ports[1].name: Duplicate value: "http"`}},
		{"unnamed ports unique", func(s *discovery.EndpointSlice) { s.Ports[0].Name, s.Ports[1].Name = nil, ptr.To("") },
			[]string{`ports[1].name: Duplicate value: ""`}},
		{"port name invalid", func(s *discovery.EndpointSlice) { s.Ports[0].Name = ptr.To("-http") },
			[]string{`ports[0].name: Invalid value: "-http": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
	})
}

// TestValidServiceConverts ties validation to conversion: what passes becomes ServicePorts
// carrying every address and port of the manifest.
func TestValidServiceConverts(t *testing.T) {
	svc := validService()
	eps := []*discovery.EndpointSlice{validSlice()}
	sps := ServicePorts(svc, eps)
	if len(sps) != 2 {
		t.Fatalf("got %d ServicePorts, want 2", len(sps))
	}
	for _, sp := range sps {
		if len(sp.ClusterIPs) != 2 || len(sp.ExternalIPs) != 1 || len(sp.LoadBalancerIPs) != 1 || len(sp.SourceRanges) != 2 {
			t.Errorf("%s lost addresses: %+v", sp.Name, sp)
		}
		if len(sp.Endpoints) != 2 {
			t.Errorf("%s has %d endpoints, want 2", sp.Name, len(sp.Endpoints))
		}
	}
}
