package model

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// MaxAffinityTimeout is the longest ClientIP affinity timeout Kubernetes accepts (one day).
const MaxAffinityTimeout = 86400

const portRange = "must be between 1 and 65535"

var (
	serviceTypes        = []v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer, v1.ServiceTypeExternalName}
	protocols           = []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}
	affinities          = []v1.ServiceAffinity{v1.ServiceAffinityNone, v1.ServiceAffinityClientIP}
	externalPolicies    = []v1.ServiceExternalTrafficPolicy{v1.ServiceExternalTrafficPolicyCluster, v1.ServiceExternalTrafficPolicyLocal}
	internalPolicies    = []v1.ServiceInternalTrafficPolicy{v1.ServiceInternalTrafficPolicyCluster, v1.ServiceInternalTrafficPolicyLocal}
	familyPolicies      = []v1.IPFamilyPolicy{v1.IPFamilyPolicySingleStack, v1.IPFamilyPolicyPreferDualStack, v1.IPFamilyPolicyRequireDualStack}
	ipFamilies          = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	ipModes             = []v1.LoadBalancerIPMode{v1.LoadBalancerIPModeVIP, v1.LoadBalancerIPModeProxy}
	trafficDistribution = []string{v1.ServiceTrafficDistributionPreferClose, v1.ServiceTrafficDistributionPreferSameZone, v1.ServiceTrafficDistributionPreferSameNode}
	addressTypes        = []discovery.AddressType{discovery.AddressTypeIPv4, discovery.AddressTypeIPv6, discovery.AddressTypeFQDN}
)

// ValidateService checks every field of a Service that ServicePorts reads, so that a Service
// that passes is turned into exactly the ServicePorts its manifest describes. It follows the
// API server's rules where they matter to the proxy, with one difference: nothing allocates
// addresses in standalone mode, so a cluster IP is required.
func ValidateService(svc *v1.Service) field.ErrorList {
	errs := validateMeta(field.NewPath("metadata"), svc.Name, svc.Namespace, validation.IsDNS1035Label)
	spec := field.NewPath("spec")
	s := &svc.Spec
	if s.Type != "" && !slices.Contains(serviceTypes, s.Type) {
		errs = append(errs, field.NotSupported(spec.Child("type"), s.Type, serviceTypes))
	}
	if s.Type == v1.ServiceTypeExternalName {
		// DNS answers for ExternalName services; the proxy reads nothing else of them.
		if s.ExternalName == "" {
			errs = append(errs, field.Required(spec.Child("externalName"), "an ExternalName service needs the name it aliases"))
		}
		return errs
	}
	errs = append(errs, validateClusterIPs(spec, s)...)
	if s.ClusterIP != v1.ClusterIPNone && len(s.Ports) == 0 {
		errs = append(errs, field.Required(spec.Child("ports"), "a service with a cluster IP needs at least one port"))
	}
	errs = append(errs, validateServicePorts(spec.Child("ports"), s)...)
	for i, a := range s.ExternalIPs {
		_, e := parseUnicast(spec.Child("externalIPs").Index(i), a)
		errs = append(errs, e...)
	}
	for i, r := range s.LoadBalancerSourceRanges {
		if _, ok := ParsePrefix(r); !ok {
			errs = append(errs, field.Invalid(spec.Child("loadBalancerSourceRanges").Index(i), r,
				"must be a CIDR (e.g. 192.0.2.0/24 or 2001:db8::/64); until it is, the LoadBalancer IPs refuse every source"))
		}
	}
	errs = append(errs, validatePolicies(spec, s)...)
	if v, ok := svc.Annotations[ProtectionAnnotation]; ok {
		if _, err := ParseProtection([]byte(v)); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations").Key(ProtectionAnnotation), v, err.Error()))
		}
	}
	return append(errs, validateIngress(field.NewPath("status", "loadBalancer", "ingress"), svc.Status.LoadBalancer.Ingress)...)
}

func validateMeta(meta *field.Path, name, namespace string, nameRule func(string) []string) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(meta.Child("name"), ""))
	}
	for _, msg := range nameRuleIfSet(name, nameRule) {
		errs = append(errs, field.Invalid(meta.Child("name"), name, msg))
	}
	for _, msg := range nameRuleIfSet(namespace, validation.IsDNS1123Label) {
		errs = append(errs, field.Invalid(meta.Child("namespace"), namespace, msg))
	}
	return errs
}

func nameRuleIfSet(s string, rule func(string) []string) []string {
	if s == "" || plainLabel(s) {
		return nil
	}
	return rule(s)
}

// plainLabel reports whether s passes every name rule used here (DNS-1035 label, DNS-1123
// label and subdomain) without running their regular expressions: a lowercase letter, then
// lowercase letters, digits and dashes, not ending in a dash, at most 63 bytes. Every
// Service and slice is validated, 20,000 objects at 10,000 Services.
func plainLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validateClusterIPs(spec *field.Path, s *v1.ServiceSpec) field.ErrorList {
	ipsPath := spec.Child("clusterIPs")
	switch s.ClusterIP {
	case "":
		return field.ErrorList{field.Required(spec.Child("clusterIP"),
			"set a cluster IP, or None for a headless service (standalone mode allocates no addresses)")}
	case v1.ClusterIPNone:
		if len(s.ClusterIPs) > 1 || len(s.ClusterIPs) == 1 && s.ClusterIPs[0] != v1.ClusterIPNone {
			return field.ErrorList{field.Invalid(ipsPath, s.ClusterIPs, "must be empty or [None] for a headless service")}
		}
		return nil
	}
	first, errs := parseUnicast(spec.Child("clusterIP"), s.ClusterIP)
	families := []v1.IPFamily{}
	if first.IsValid() {
		families = append(families, familyOf(first))
	}
	if len(s.ClusterIPs) > 0 && s.ClusterIPs[0] != s.ClusterIP {
		errs = append(errs, field.Invalid(ipsPath.Index(0), s.ClusterIPs[0], "must equal spec.clusterIP"))
	}
	for i := 1; i < len(s.ClusterIPs); i++ {
		a, e := parseUnicast(ipsPath.Index(i), s.ClusterIPs[i])
		errs = append(errs, e...)
		if !a.IsValid() {
			continue
		}
		if slices.Contains(families, familyOf(a)) {
			errs = append(errs, field.Invalid(ipsPath.Index(i), s.ClusterIPs[i], "may hold at most one address of each IP family"))
			continue
		}
		families = append(families, familyOf(a))
	}
	return append(errs, validateFamilies(spec, s, families)...)
}

// validateFamilies checks that ipFamilies and ipFamilyPolicy agree with the cluster IPs given,
// because no allocator will add the second address a dual-stack policy asks for.
func validateFamilies(spec *field.Path, s *v1.ServiceSpec, families []v1.IPFamily) field.ErrorList {
	var errs field.ErrorList
	for i, f := range s.IPFamilies {
		p := spec.Child("ipFamilies").Index(i)
		switch {
		case !slices.Contains(ipFamilies, f):
			errs = append(errs, field.NotSupported(p, f, ipFamilies))
		case i < len(families) && f != families[i]:
			errs = append(errs, field.Invalid(p, f, fmt.Sprintf("must match the family of the cluster IP at the same index (%s)", families[i])))
		}
	}
	if s.IPFamilyPolicy == nil {
		return errs
	}
	p := spec.Child("ipFamilyPolicy")
	switch policy := *s.IPFamilyPolicy; {
	case !slices.Contains(familyPolicies, policy):
		errs = append(errs, field.NotSupported(p, policy, familyPolicies))
	case policy == v1.IPFamilyPolicyRequireDualStack && len(families) < 2:
		errs = append(errs, field.Invalid(p, policy, "needs one cluster IP of each family in spec.clusterIPs"))
	case policy == v1.IPFamilyPolicySingleStack && len(s.ClusterIPs) > 1:
		errs = append(errs, field.Invalid(p, policy, "allows only one cluster IP"))
	}
	return errs
}

func validateServicePorts(path *field.Path, s *v1.ServiceSpec) field.ErrorList {
	type protoPort struct {
		proto v1.Protocol
		port  int32
	}
	var errs field.ErrorList
	external := s.Type == v1.ServiceTypeNodePort || s.Type == v1.ServiceTypeLoadBalancer
	names := map[string]bool{}
	ports := map[protoPort]bool{}
	nodePorts := map[protoPort]bool{}
	for i, p := range s.Ports {
		pp := path.Index(i)
		switch {
		case p.Name == "" && len(s.Ports) > 1:
			errs = append(errs, field.Required(pp.Child("name"), "required when a service has more than one port"))
		case names[p.Name]:
			errs = append(errs, field.Duplicate(pp.Child("name"), p.Name))
		}
		for _, msg := range nameRuleIfSet(p.Name, validation.IsDNS1123Label) {
			errs = append(errs, field.Invalid(pp.Child("name"), p.Name, msg))
		}
		names[p.Name] = true
		proto := p.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		} else if !slices.Contains(protocols, proto) {
			errs = append(errs, field.NotSupported(pp.Child("protocol"), p.Protocol, protocols))
		}
		if p.Port < 1 || p.Port > 65535 {
			errs = append(errs, field.Invalid(pp.Child("port"), p.Port, portRange))
		} else if ports[protoPort{proto, p.Port}] {
			errs = append(errs, field.Duplicate(pp.Child("port"), p.Port))
		}
		ports[protoPort{proto, p.Port}] = true
		switch {
		case p.NodePort == 0:
		case !external:
			errs = append(errs, field.Forbidden(pp.Child("nodePort"), "may only be set for NodePort and LoadBalancer services"))
		case p.NodePort < 1 || p.NodePort > 65535:
			errs = append(errs, field.Invalid(pp.Child("nodePort"), p.NodePort, portRange))
		case nodePorts[protoPort{proto, p.NodePort}]:
			errs = append(errs, field.Duplicate(pp.Child("nodePort"), p.NodePort))
		}
		nodePorts[protoPort{proto, p.NodePort}] = true
		errs = append(errs, validateTargetPort(pp.Child("targetPort"), p.TargetPort)...)
	}
	return errs
}

// validateTargetPort catches typos in targetPort even though the proxy takes backend ports
// from the EndpointSlices: the two must agree for a cluster to serve the same manifest.
func validateTargetPort(p *field.Path, tp intstr.IntOrString) field.ErrorList {
	if tp.Type == intstr.String {
		var errs field.ErrorList
		for _, msg := range validation.IsValidPortName(tp.StrVal) {
			errs = append(errs, field.Invalid(p, tp.StrVal, msg))
		}
		return errs
	}
	if tp.IntVal < 0 || tp.IntVal > 65535 {
		return field.ErrorList{field.Invalid(p, tp.IntVal, portRange)}
	}
	return nil
}

func validatePolicies(spec *field.Path, s *v1.ServiceSpec) field.ErrorList {
	var errs field.ErrorList
	switch s.SessionAffinity {
	case "", v1.ServiceAffinityNone:
		if c := s.SessionAffinityConfig; c != nil && c.ClientIP != nil {
			errs = append(errs, field.Forbidden(spec.Child("sessionAffinityConfig"), "may only be set when sessionAffinity is ClientIP"))
		}
	case v1.ServiceAffinityClientIP:
		if c := s.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			if t := *c.ClientIP.TimeoutSeconds; t < 1 || t > MaxAffinityTimeout {
				errs = append(errs, field.Invalid(spec.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds"), t,
					fmt.Sprintf("must be between 1 and %d", MaxAffinityTimeout)))
			}
		}
	default:
		errs = append(errs, field.NotSupported(spec.Child("sessionAffinity"), s.SessionAffinity, affinities))
	}
	if s.ExternalTrafficPolicy != "" && !slices.Contains(externalPolicies, s.ExternalTrafficPolicy) {
		errs = append(errs, field.NotSupported(spec.Child("externalTrafficPolicy"), s.ExternalTrafficPolicy, externalPolicies))
	}
	if p := s.InternalTrafficPolicy; p != nil && !slices.Contains(internalPolicies, *p) {
		errs = append(errs, field.NotSupported(spec.Child("internalTrafficPolicy"), *p, internalPolicies))
	}
	if hc := s.HealthCheckNodePort; hc != 0 {
		p := spec.Child("healthCheckNodePort")
		if s.Type != v1.ServiceTypeLoadBalancer || s.ExternalTrafficPolicy != v1.ServiceExternalTrafficPolicyLocal {
			errs = append(errs, field.Forbidden(p, "may only be set for LoadBalancer services with externalTrafficPolicy Local"))
		} else if hc < 1 || hc > 65535 {
			errs = append(errs, field.Invalid(p, hc, portRange))
		}
	}
	if td := s.TrafficDistribution; td != nil && !slices.Contains(trafficDistribution, *td) {
		errs = append(errs, field.NotSupported(spec.Child("trafficDistribution"), *td, trafficDistribution))
	}
	return errs
}

func validateIngress(path *field.Path, ingress []v1.LoadBalancerIngress) field.ErrorList {
	var errs field.ErrorList
	for i, ing := range ingress {
		p := path.Index(i)
		if ing.IP != "" {
			_, e := parseUnicast(p.Child("ip"), ing.IP)
			errs = append(errs, e...)
		}
		if ing.IPMode == nil {
			continue
		}
		if !slices.Contains(ipModes, *ing.IPMode) {
			errs = append(errs, field.NotSupported(p.Child("ipMode"), *ing.IPMode, ipModes))
		}
		if ing.IP == "" {
			errs = append(errs, field.Required(p.Child("ip"), "required when ipMode is set"))
		}
	}
	return errs
}

// ValidateEndpointSlice checks every field of an EndpointSlice that ServicePorts reads.
func ValidateEndpointSlice(s *discovery.EndpointSlice) field.ErrorList {
	meta := field.NewPath("metadata")
	errs := validateMeta(meta, s.Name, s.Namespace, validation.IsDNS1123Subdomain)
	label := meta.Child("labels").Key(ServiceNameLabel)
	if svc := s.Labels[ServiceNameLabel]; svc == "" {
		errs = append(errs, field.Required(label, "names the Service this slice belongs to"))
	} else {
		for _, msg := range nameRuleIfSet(svc, validation.IsDNS1035Label) {
			errs = append(errs, field.Invalid(label, svc, msg))
		}
	}
	if !slices.Contains(addressTypes, s.AddressType) {
		errs = append(errs, field.NotSupported(field.NewPath("addressType"), s.AddressType, addressTypes))
	}
	// A cluster's slices hold 100,000 addresses: paths are built only for an error.
	addresses := func(i int) *field.Path { return field.NewPath("endpoints").Index(i).Child("addresses") }
	for i, e := range s.Endpoints {
		if len(e.Addresses) == 0 {
			errs = append(errs, field.Required(addresses(i), "an endpoint needs at least one address"))
		}
		for j, a := range e.Addresses {
			if !plainEndpointAddress(s.AddressType, a) {
				errs = append(errs, validateEndpointAddress(addresses(i).Index(j), s.AddressType, a)...)
			}
		}
	}
	return append(errs, validateSlicePorts(field.NewPath("ports"), s.Ports)...)
}

// plainEndpointAddress reports whether a is an IP address of typ's family in strict form
// that validateEndpointAddress would take as it is: most addresses, checked without
// allocating.
func plainEndpointAddress(typ discovery.AddressType, a string) bool {
	addr, err := netip.ParseAddr(a)
	if err != nil || addr.Zone() != "" || addr.Is4In6() || addr.IsUnspecified() || addr.IsLoopback() ||
		addr.IsLinkLocalUnicast() || addr.IsMulticast() {
		return false
	}
	return typ == discovery.AddressTypeIPv4 && addr.Is4() || typ == discovery.AddressTypeIPv6 && addr.Is6()
}

func validateEndpointAddress(p *field.Path, typ discovery.AddressType, a string) field.ErrorList {
	var want v1.IPFamily
	switch typ {
	case discovery.AddressTypeFQDN:
		var errs field.ErrorList
		for _, msg := range validation.IsDNS1123Subdomain(a) {
			errs = append(errs, field.Invalid(p, a, msg))
		}
		return errs
	case discovery.AddressTypeIPv4:
		want = v1.IPv4Protocol
	case discovery.AddressTypeIPv6:
		want = v1.IPv6Protocol
	default:
		// The address type is reported by itself; an address cannot be judged without it.
		return nil
	}
	addr, errs := parseUnicast(p, a)
	if addr.IsValid() && familyOf(addr) != want {
		errs = append(errs, field.Invalid(p, a, fmt.Sprintf("must be an %s address (addressType %s)", want, typ)))
	}
	return errs
}

func validateSlicePorts(path *field.Path, ports []discovery.EndpointPort) field.ErrorList {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, p := range ports {
		pp := path.Index(i)
		var name string
		if p.Name != nil {
			name = *p.Name
		}
		for _, msg := range nameRuleIfSet(name, validation.IsDNS1123Label) {
			errs = append(errs, field.Invalid(pp.Child("name"), name, msg))
		}
		if names[name] {
			errs = append(errs, field.Duplicate(pp.Child("name"), name))
		}
		names[name] = true
		if p.Port != nil && (*p.Port < 1 || *p.Port > 65535) {
			errs = append(errs, field.Invalid(pp.Child("port"), *p.Port, portRange))
		}
		if p.Protocol != nil && !slices.Contains(protocols, *p.Protocol) {
			errs = append(errs, field.NotSupported(pp.Child("protocol"), *p.Protocol, protocols))
		}
	}
	return errs
}

// parseUnicast parses an address the proxy will use as a service VIP or a backend. Beyond
// syntax it refuses the ranges Kubernetes refuses for such addresses: rules for them would
// capture the node's own traffic or could never match.
func parseUnicast(p *field.Path, s string) (netip.Addr, field.ErrorList) {
	a, ok := ParseAddr(s)
	if !ok {
		return netip.Addr{}, field.ErrorList{field.Invalid(p, s, "must be a valid IP address (e.g. 10.9.8.7 or 2001:db8::ffff)")}
	}
	var msg string
	switch {
	case a.Is4In6():
		msg = "must not be an IPv4-mapped IPv6 address"
	case a.IsUnspecified():
		msg = "may not be unspecified (0.0.0.0 or ::)"
	case a.IsLoopback():
		msg = "may not be in the loopback range (127.0.0.0/8 or ::1/128)"
	case a.IsLinkLocalUnicast():
		msg = "may not be in the link-local range (169.254.0.0/16 or fe80::/10)"
	case a.IsMulticast():
		msg = "may not be a multicast address"
	default:
		return a, nil
	}
	return netip.Addr{}, field.ErrorList{field.Invalid(p, s, msg)}
}

// failClosedFields are the fields whose errors do not reject a Service: they restrict
// traffic, and the model reads a value it cannot understand as "refuse everyone" (see
// ServicePort.SourcesClosed). Rejecting the object instead would keep its last good version,
// which may restrict nothing at all.
var failClosedFields = []string{"spec.loadBalancerSourceRanges"}

// SplitFailClosed splits a Service's validation errors into those that reject it (it keeps
// its last good version) and those in fields that fail closed (it is taken, and refuses
// the traffic the field restricts).
func SplitFailClosed(errs field.ErrorList) (rejecting, closing field.ErrorList) {
	for _, e := range errs {
		if slices.ContainsFunc(failClosedFields, func(f string) bool { return e.Field == f || strings.HasPrefix(e.Field, f+"[") }) {
			closing = append(closing, e)
		} else {
			rejecting = append(rejecting, e)
		}
	}
	return rejecting, closing
}

func familyOf(a netip.Addr) v1.IPFamily {
	if FamilyOf(a) == IPv6 {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}
