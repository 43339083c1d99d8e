package node

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/edgegate/edgegate/daemon/kernel/route"
)

// DefaultRouteResync re-applies the routes this often without a change: the kernel drops
// routes through a gateway when its link goes down, and an operator may remove one by hand.
const DefaultRouteResync = time.Minute

// Route is a route to a pod network: Dst via the InternalIP of the Node that holds it.
type Route = route.Route

// RouteTable is the set of routes edgegate owns in the kernel (route.Kernel, or route.Fake
// in tests).
type RouteTable = route.Table

// PodRoutes returns the routes to the pod CIDRs of every Node but self, each via that Node's
// first InternalIP of the CIDR's family, sorted; and a problem for each CIDR that cannot be
// routed (no InternalIP of its family, unparsable, claimed by two Nodes).
func PodRoutes(nodes []*v1.Node, self string) ([]Route, []error) {
	var routes []Route
	var problems []error
	byDst := map[netip.Prefix]string{}
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b *v1.Node) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range sorted {
		if n.Name == self {
			continue
		}
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			dst, err := netip.ParsePrefix(c)
			if err != nil {
				problems = append(problems, fmt.Errorf("node %s: pod CIDR %q: %w", n.Name, c, err))
				continue
			}
			dst = dst.Masked()
			via, ok := internalIP(n, dst.Addr().Is4())
			if !ok {
				problems = append(problems, fmt.Errorf("node %s: no InternalIP of the family of pod CIDR %s", n.Name, dst))
				continue
			}
			if other, dup := byDst[dst]; dup {
				problems = append(problems, fmt.Errorf("node %s: pod CIDR %s is also node %s's; routed to %s", n.Name, dst, other, other))
				continue
			}
			byDst[dst] = n.Name
			routes = append(routes, Route{Dst: dst, Via: via})
		}
	}
	slices.SortFunc(routes, route.Compare)
	return routes, problems
}

func internalIP(n *v1.Node, v4 bool) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != v1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if ip = ip.Unmap(); ip.Is4() == v4 {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

// RouteStatus is the route reconciler's state for the dashboard and metrics.
type RouteStatus struct {
	// Routes are the routes last applied successfully.
	Routes []Route `json:"routes,omitzero"`
	// Problems are the pod CIDRs that could not be routed.
	Problems []string `json:"problems,omitzero"`
	// LastError is the last apply's failure, empty after a success.
	LastError string    `json:"lastError,omitzero"`
	LastApply time.Time `json:"lastApply,omitzero"`
}

// Routes keeps the kernel's pod network routes in line with the Nodes.
type Routes struct {
	table  RouteTable
	self   string
	nodes  func() []*v1.Node
	log    *slog.Logger
	wake   chan struct{}
	resync time.Duration

	mu     sync.Mutex
	status RouteStatus
}

// NewRoutes returns a reconciler that routes to the pod CIDRs of the Nodes nodes returns,
// except self's. A nil log discards.
func NewRoutes(table RouteTable, self string, nodes func() []*v1.Node, log *slog.Logger) *Routes {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Routes{table: table, self: self, nodes: nodes, log: log, wake: make(chan struct{}, 1), resync: DefaultRouteResync}
}

// Trigger says the Nodes changed. It never blocks.
func (r *Routes) Trigger() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Status returns the reconciler's state.
func (r *Routes) Status() RouteStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.status
	st.Routes = slices.Clone(st.Routes)
	st.Problems = slices.Clone(st.Problems)
	return st
}

// Run applies the routes at once, after every Trigger and every resync period, retrying a
// failed apply with backoff, until ctx ends. The routes stay in the kernel after it returns:
// traffic to pods keeps flowing while the daemon restarts.
func (r *Routes) Run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	retryIn := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
		if err := r.apply(); err != nil {
			timer.Reset(min(retryIn, r.resync))
			retryIn = min(2*retryIn, r.resync)
			continue
		}
		retryIn = time.Second
		timer.Reset(r.resync)
	}
}

func (r *Routes) apply() error {
	want, problems := PodRoutes(r.nodes(), r.self)
	var texts []string
	for _, p := range problems {
		texts = append(texts, p.Error())
	}
	err := r.table.Apply(want)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Equal(texts, r.status.Problems) {
		for _, p := range texts {
			r.log.Warn("pod CIDR not routed", "problem", p)
		}
	}
	r.status.Problems = texts
	if err != nil {
		r.status.LastError = err.Error()
		r.log.Warn("applying pod network routes failed; retrying", "err", err)
		return err
	}
	if !slices.Equal(want, r.status.Routes) {
		r.log.Info("pod network routes", "routes", routeList(want))
	}
	r.status.Routes, r.status.LastError, r.status.LastApply = want, "", time.Now()
	return nil
}

func routeList(rs []Route) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
