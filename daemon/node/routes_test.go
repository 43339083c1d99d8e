package node

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgegate/edgegate/daemon/internal/testkit"
	"github.com/edgegate/edgegate/daemon/kernel/route"
)

// Test IP plan: nodes on 192.168.1.0/24 and fd00:1::/64, the gateway gw1 at .2 / ::2;
// node nN at .1N / ::1N with pod CIDRs 10.244.N.0/24 and fd00:244:N::/64.

// mkNode returns a Node with the given addresses ("InternalIP=..." or "ExternalIP=...")
// and pod CIDRs.
func mkNode(name string, addrs []string, podCIDRs ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Spec.PodCIDRs = podCIDRs
	for _, a := range addrs {
		typ, addr, _ := strings.Cut(a, "=")
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: v1.NodeAddressType(typ), Address: addr})
	}
	return n
}

func routeStrings(rs []Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String())
	}
	return out
}

func TestPodRoutes(t *testing.T) {
	legacy := mkNode("n5", []string{"InternalIP=192.168.1.15"})
	legacy.Spec.PodCIDR = "10.244.5.0/24" // set by old controllers, without podCIDRs
	nodes := []*v1.Node{
		mkNode("n2", []string{"InternalIP=192.168.1.12", "InternalIP=fd00:1::12"}, "10.244.2.0/24", "fd00:244:2::/64"),
		mkNode("gw1", []string{"InternalIP=192.168.1.2"}, "10.244.0.0/24"),
		mkNode("n1", []string{"ExternalIP=203.0.113.1", "InternalIP=192.168.1.11"}, "10.244.1.0/24"),
		mkNode("n3", []string{"InternalIP=192.168.1.13"}, "10.244.3.0/24", "fd00:244:3::/64"), // no IPv6 InternalIP
		mkNode("n4", []string{"InternalIP=192.168.1.14"}, "10.244.1.0/24"),                    // n1's CIDR again
		mkNode("n6", []string{"InternalIP=192.168.1.16"}),                                     // no CIDR yet
		mkNode("n7", []string{"InternalIP=192.168.1.17"}, "10.244.7.1/24", "bogus"),
		legacy,
	}
	routes, problems := PodRoutes(nodes, "gw1")
	want := []string{
		"10.244.1.0/24 via 192.168.1.11",
		"10.244.2.0/24 via 192.168.1.12",
		"10.244.3.0/24 via 192.168.1.13",
		"10.244.5.0/24 via 192.168.1.15",
		"10.244.7.0/24 via 192.168.1.17",
		"fd00:244:2::/64 via fd00:1::12",
	}
	if diff := cmp.Diff(want, routeStrings(routes)); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.Error())
	}
	wantProblems := []string{
		"node n3: no InternalIP of the family of pod CIDR fd00:244:3::/64",
		"node n4: pod CIDR 10.244.1.0/24 is also node n1's; routed to n1",
		`node n7: pod CIDR "bogus": netip.ParsePrefix("bogus"): no '/'`,
	}
	if diff := cmp.Diff(wantProblems, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// nodeList is a Nodes function whose answer a test changes.
type nodeList struct {
	mu    sync.Mutex
	nodes []*v1.Node
}

func (l *nodeList) get() []*v1.Node {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nodes
}

func (l *nodeList) set(ns ...*v1.Node) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nodes = ns
}

func runRoutes(t *testing.T, table RouteTable, nodes *nodeList, resync time.Duration) *Routes {
	t.Helper()
	r := NewRoutes(table, "gw1", nodes.get, nil)
	r.resync = resync
	testkit.Go(t, r.Run)
	return r
}

func TestRoutesFollowNodes(t *testing.T) {
	table := route.NewFake()
	nodes := &nodeList{}
	n1 := mkNode("n1", []string{"InternalIP=192.168.1.11"}, "10.244.1.0/24")
	nodes.set(n1)
	r := runRoutes(t, table, nodes, time.Hour)
	waitFor(t, "n1's route", func() bool { return table.Dump() == "10.244.1.0/24 via 192.168.1.11 proto edgegate\n" })

	n1moved := mkNode("n1", []string{"InternalIP=192.168.1.21"}, "10.244.1.0/24")
	n2 := mkNode("n2", []string{"InternalIP=192.168.1.12", "InternalIP=fd00:1::12"}, "10.244.2.0/24", "fd00:244:2::/64")
	nodes.set(n1moved, n2)
	r.Trigger()
	want := "10.244.1.0/24 via 192.168.1.21 proto edgegate\n10.244.2.0/24 via 192.168.1.12 proto edgegate\nfd00:244:2::/64 via fd00:1::12 proto edgegate\n"
	waitFor(t, "moved and added", func() bool { return table.Dump() == want })

	nodes.set(n2)
	r.Trigger()
	waitFor(t, "n1 removed", func() bool { return !strings.Contains(table.Dump(), "10.244.1.0") })
	waitFor(t, "status", func() bool { return len(r.Status().Routes) == 2 })
}

func TestRoutesRetryAndResync(t *testing.T) {
	table := route.NewFake()
	table.FailNext = errors.New("netlink: no buffer space")
	nodes := &nodeList{}
	nodes.set(mkNode("n1", []string{"InternalIP=192.168.1.11"}, "10.244.1.0/24"))
	r := runRoutes(t, table, nodes, 100*time.Millisecond)
	// The first apply fails; the retry (after at most the resync period) succeeds.
	waitFor(t, "the retry", func() bool { return table.Dump() != "" && r.Status().LastError == "" })
	// Without a Trigger the resync applies again, repairing a route removed by hand.
	if err := table.Apply(nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the resync", func() bool { return table.Dump() != "" })
}

func TestRoutesReportForeignRoutes(t *testing.T) {
	table := route.NewFake()
	table.Foreign[netip.MustParsePrefix("10.244.2.0/24")] = true
	nodes := &nodeList{}
	nodes.set(
		mkNode("n1", []string{"InternalIP=192.168.1.11"}, "10.244.1.0/24"),
		mkNode("n2", []string{"InternalIP=192.168.1.12"}, "10.244.2.0/24"),
		mkNode("n3", []string{"InternalIP=192.168.1.13"}, "fd00:244:3::/64"),
	)
	r := runRoutes(t, table, nodes, time.Hour)
	waitFor(t, "the conflict reported", func() bool { return r.Status().LastError != "" })
	st := r.Status()
	if !strings.Contains(st.LastError, "10.244.2.0/24") || len(st.Problems) != 1 {
		t.Errorf("status %+v", st)
	}
	if got := table.Dump(); got != "10.244.1.0/24 via 192.168.1.11 proto edgegate\n" {
		t.Errorf("the routes that could be made were not:\n%s", got)
	}
}
