// Package node is the gateway's membership in its cluster as a dedicated ingress node: it
// registers and keeps its own Node object (ingress role, a NoSchedule taint so no pods land
// on it, addresses, a Ready condition that means "proxy programmed"), renews its Lease in
// kube-node-lease the way a kubelet does so the node lifecycle controller sees it alive, and
// routes to the pod network: one route per other Node's pod CIDR via that Node's InternalIP.
package node

import (
	"net/netip"
	"runtime"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels, taint and annotation that make the Node a dedicated ingress node.
const (
	// RoleLabel marks the Node's role; kubectl shows it under ROLES.
	RoleLabel = "node-role.kubernetes.io/ingress"
	// TaintKey keeps pods off: a gateway runs no kubelet.
	TaintKey = RoleLabel
	// VersionAnnotation carries the firmware/daemon version (nodeInfo.kubeProxyVersion is
	// deprecated and dropped by current API servers).
	VersionAnnotation = "edgegate.dev/version"
	// DashboardCertAnnotation and DashboardSPKIAnnotation publish the dashboard's TLS
	// certificate SHA-256 and public key (SPKI) SHA-256, so an operator can pin them
	// without trusting the network they reach the gateway through.
	DashboardCertAnnotation = "edgegate.dev/dashboard-cert-sha256"
	DashboardSPKIAnnotation = "edgegate.dev/dashboard-spki-sha256"
)

// Condition reasons on the Ready condition.
const (
	ReasonReady         = "EdgegateReady"
	ReasonNotProgrammed = "ProxyNotProgrammed"
	ReasonDraining      = "Draining"
	ReasonShutdown      = "Shutdown"
)

// Kubelet's timings, which the node lifecycle controller's defaults assume.
const (
	DefaultLeaseDuration  = 40 * time.Second
	DefaultRenewInterval  = 10 * time.Second
	DefaultStatusInterval = 5 * time.Minute
)

// Config is the gateway's identity in the cluster.
type Config struct {
	// Name is the Node's name.
	Name string
	// Zone and Region become topology.kubernetes.io/zone and /region when set.
	Zone, Region string
	// InternalIPs are the Node's InternalIP addresses (--node-ip), one per family.
	InternalIPs []netip.Addr
	// Version is the firmware/daemon version.
	Version string
	// Annotations are more annotations the gateway keeps on its Node (the dashboard's
	// fingerprints); an empty value removes the key.
	Annotations map[string]string
	// KernelVersion is reported in nodeInfo; empty means uname -r.
	KernelVersion string
	// LeaseDuration, RenewInterval and StatusInterval default to kubelet's: a 40 s lease
	// renewed every 10 s, and a status posted on every change or at least every 5 min.
	LeaseDuration, RenewInterval, StatusInterval time.Duration
}

func (c *Config) defaults() {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
}

func (c Config) labels() map[string]string {
	l := map[string]string{
		RoleLabel:          "",
		v1.LabelHostname:   c.Name,
		v1.LabelOSStable:   "linux",
		v1.LabelArchStable: runtime.GOARCH,
	}
	if c.Zone != "" {
		l[v1.LabelTopologyZone] = c.Zone
	}
	if c.Region != "" {
		l[v1.LabelTopologyRegion] = c.Region
	}
	return l
}

func (c Config) taint() v1.Taint {
	return v1.Taint{Key: TaintKey, Effect: v1.TaintEffectNoSchedule}
}

// newNode returns the Node the gateway registers.
func newNode(c Config) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.Name}}
	reconcileNode(n, c)
	return n
}

// reconcileNode puts the gateway's labels, annotation and taint on n and reports whether
// anything changed. Labels and taints set by others (an operator's, the node lifecycle
// controller's) stay.
func reconcileNode(n *v1.Node, c Config) bool {
	changed := false
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range c.labels() {
		if cur, ok := n.Labels[k]; !ok || cur != v {
			n.Labels[k] = v
			changed = true
		}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	if n.Annotations[VersionAnnotation] != c.Version {
		n.Annotations[VersionAnnotation] = c.Version
		changed = true
	}
	for k, v := range c.Annotations {
		cur, ok := n.Annotations[k]
		switch {
		case v == "" && ok:
			delete(n.Annotations, k)
			changed = true
		case v != "" && cur != v:
			n.Annotations[k] = v
			changed = true
		}
	}
	want := c.taint()
	if !slices.ContainsFunc(n.Spec.Taints, func(t v1.Taint) bool { return t.MatchTaint(&want) }) {
		n.Spec.Taints = append(n.Spec.Taints, want)
		changed = true
	}
	return changed
}

// setStatus writes the gateway's part of a Node status: the Ready condition (its transition
// time moves only when its status does), addresses, system info, and a pod capacity of zero
// so that DaemonSets tolerating every taint still cannot place pods here.
func setStatus(st *v1.NodeStatus, c Config, ready bool, reason, message string, now time.Time) {
	status := v1.ConditionFalse
	if ready {
		status = v1.ConditionTrue
	}
	cond := v1.NodeCondition{
		Type: v1.NodeReady, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
	}
	i := slices.IndexFunc(st.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady })
	switch {
	case i < 0:
		st.Conditions = append(st.Conditions, cond)
	default:
		if st.Conditions[i].Status == status {
			cond.LastTransitionTime = st.Conditions[i].LastTransitionTime
		}
		st.Conditions[i] = cond
	}
	st.Addresses = nil
	for _, a := range c.InternalIPs {
		st.Addresses = append(st.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a.String()})
	}
	st.Addresses = append(st.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: c.Name})
	st.NodeInfo.OperatingSystem = "linux"
	st.NodeInfo.Architecture = runtime.GOARCH
	st.NodeInfo.KernelVersion = c.KernelVersion
	st.NodeInfo.OSImage = "edgegate " + c.Version
	zero := resource.MustParse("0")
	st.Capacity = v1.ResourceList{v1.ResourcePods: zero}
	st.Allocatable = v1.ResourceList{v1.ResourcePods: zero}
}

// readyStatus returns the status of the Ready condition, or "" when there is none.
func readyStatus(st v1.NodeStatus) v1.ConditionStatus {
	for _, c := range st.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// statusDue reports whether cur needs posting: it differs from what setStatus would make of
// it apart from the heartbeat time, or its heartbeat is StatusInterval old.
func statusDue(cur v1.NodeStatus, c Config, ready bool, reason, message string, now time.Time) bool {
	i := slices.IndexFunc(cur.Conditions, func(c v1.NodeCondition) bool { return c.Type == v1.NodeReady })
	if i < 0 || now.Sub(cur.Conditions[i].LastHeartbeatTime.Time) >= c.StatusInterval {
		return true
	}
	want := cur.DeepCopy()
	setStatus(want, c, ready, reason, message, now)
	want.Conditions[i].LastHeartbeatTime = cur.Conditions[i].LastHeartbeatTime
	return !equality.Semantic.DeepEqual(*want, cur)
}
