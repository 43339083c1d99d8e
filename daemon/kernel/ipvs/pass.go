package ipvs

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/edgegate/edgegate/daemon/model"
	ipvsplan "github.com/edgegate/edgegate/daemon/plan/ipvs"
)

// applyPass is the virtual server and address work of one Apply.
type applyPass struct {
	a        *Applier
	st       *Stats
	want     map[ipvsplan.VSKey]ipvsplan.VirtualServer
	order    []ipvsplan.VSKey
	wantVIPs map[netip.Addr]bool
	pending  map[ipvsplan.VSKey]bool

	errs      []error
	touched   []ipvsplan.VSKey // created or updated: read back
	deleted   []ipvsplan.VSKey
	destCheck map[ipvsplan.VSKey]map[netip.AddrPort]int // expected weights; -1: removed
}

func (s *applyPass) fail(err error) { s.errs = append(s.errs, err) }

func (s *applyPass) run(full bool) error {
	a := s.a
	s.destCheck = map[ipvsplan.VSKey]map[netip.AddrPort]int{}
	have := a.vips
	if full || have == nil {
		if err := a.Links.EnsureDummy(a.iface()); err != nil {
			return err
		}
		addrs, err := a.Links.Addrs(a.iface())
		if err != nil {
			return err
		}
		have = map[netip.Addr]bool{}
		for _, v := range addrs {
			have[v] = true
		}
	}
	// VIPs first: a virtual server only sees traffic once its address is local.
	for _, v := range sortedAddrs(s.wantVIPs) {
		if !have[v] {
			if err := a.Links.AddAddr(a.iface(), v); err != nil {
				return err
			}
			s.st.Addresses++
		}
	}
	if full {
		s.full(have)
	} else {
		s.partial()
	}
	s.readBack()
	if len(s.errs) > 0 {
		// A virtual server that could not be deleted keeps its address, so that it stays
		// recognisably ours for the next (full) apply.
		return errors.Join(s.errs...)
	}
	for _, v := range sortedAddrs(have) {
		if !s.wantVIPs[v] {
			if err := a.Links.DelAddr(a.iface(), v); err != nil {
				return err
			}
			s.st.Addresses++
		}
	}
	return nil
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func toService(vs ipvsplan.VirtualServer) Service {
	return Service{VSKey: vs.VSKey, Scheduler: vs.Scheduler, Timeout: vs.Timeout}
}

func sameService(s Service, vs ipvsplan.VirtualServer) bool {
	return s.Scheduler == vs.Scheduler && s.Timeout == vs.Timeout
}

// owned reports whether a virtual server in the kernel is edgegate's.
func (a *Applier) owned(k ipvsplan.VSKey, dummy, node map[netip.Addr]bool) bool {
	_, mine := a.applied[k]
	return mine || dummy[k.Addr] || node[k.Addr] && a.nodePorts().Contains(k.Port)
}

// byKey indexes virtual servers read from the kernel by their key.
func byKey(svcs []Service) map[ipvsplan.VSKey]Service {
	m := make(map[ipvsplan.VSKey]Service, len(svcs))
	for _, svc := range svcs {
		m[svc.VSKey] = svc
	}
	return m
}

// full reads every virtual server and repairs the difference.
func (s *applyPass) full(dummy map[netip.Addr]bool) {
	a := s.a
	kernel, err := a.table.GetServices()
	if err != nil {
		s.fail(err)
		return
	}
	have := byKey(kernel)
	for _, k := range s.order {
		vs := s.want[k]
		cur, ok := have[k]
		switch {
		case !ok:
			s.create(vs)
			continue
		case !sameService(cur, vs):
			s.update(vs)
		}
		s.reals(vs, true)
	}
	node := map[netip.Addr]bool{}
	addrs, err := a.Links.NodeAddrs(a.iface())
	if err != nil {
		s.fail(err)
		return
	}
	for _, n := range addrs {
		node[n] = true
	}
	for _, k := range kernel {
		if _, ok := s.want[k.VSKey]; !ok && a.owned(k.VSKey, dummy, node) {
			s.del(k)
		}
	}
}

// partial diffs against the last apply.
func (s *applyPass) partial() {
	a := s.a
	for _, k := range s.order {
		vs := s.want[k]
		prev, ok := a.applied[k]
		switch {
		case !ok:
			s.create(vs)
			continue
		case prev.Scheduler != vs.Scheduler || prev.Timeout != vs.Timeout:
			s.update(vs)
		}
		if !slices.Equal(prev.Reals, vs.Reals) || a.pending[k] {
			s.reals(vs, true)
		}
	}
	for _, k := range sortedKeys(a.applied) {
		if _, ok := s.want[k]; !ok {
			s.del(toService(a.applied[k]))
		}
	}
}

func sortedKeys(m map[ipvsplan.VSKey]ipvsplan.VirtualServer) []ipvsplan.VSKey {
	out := make([]ipvsplan.VSKey, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, ipvsplan.VSKey.Compare)
	return out
}

func (s *applyPass) create(vs ipvsplan.VirtualServer) {
	err := s.a.table.NewService(toService(vs))
	if exists(err) {
		// Left by an earlier run, or made by hand: take it over.
		s.update(vs)
		s.reals(vs, true)
		return
	}
	if err != nil {
		s.fail(schedulerHint(err, vs))
		return
	}
	s.st.Services++
	s.touched = append(s.touched, vs.VSKey)
	s.reals(vs, false)
}

func (s *applyPass) update(vs ipvsplan.VirtualServer) {
	if err := s.a.table.UpdateService(toService(vs)); err != nil {
		s.fail(schedulerHint(err, vs))
		return
	}
	s.st.Services++
	s.touched = append(s.touched, vs.VSKey)
}

func (s *applyPass) del(svc Service) {
	if err := s.a.table.DelService(svc); err != nil && !notFound(err) {
		s.fail(err)
		return
	}
	s.st.Deleted++
	s.deleted = append(s.deleted, svc.VSKey)
}

// schedulerHint explains the kernel's ENOENT for a scheduler it cannot find.
func schedulerHint(err error, vs ipvsplan.VirtualServer) error {
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w (scheduler %s: is kernel module ip_vs_%s loaded?)", err, vs.Scheduler, vs.Scheduler)
	}
	return err
}

// reals makes a virtual server's real servers match the plan. Weighted ones are added or
// corrected. A terminating one (weight 0 in the plan) or one the plan no longer has is
// drained: set to weight 0 while it has connections, removed once it has none. UDP and
// SCTP have no graceful termination: theirs are removed at once, and expire_nodest_conn
// ends their flows.
func (s *applyPass) reals(vs ipvsplan.VirtualServer, read bool) {
	svc := toService(vs)
	var have []Destination
	if read {
		var err error
		if have, err = s.a.table.GetDestinations(svc); err != nil {
			s.fail(err)
			return
		}
	}
	cur := map[netip.AddrPort]Destination{}
	for _, d := range have {
		cur[d.AddrPort()] = d
	}
	expect := map[netip.AddrPort]int{}
	changed := false
	do := func(op func(Service, Destination) error, d Destination, weight int) {
		if err := op(svc, d); err != nil {
			s.fail(err)
			return
		}
		changed = true
		s.st.Destinations++
		expect[d.AddrPort()] = weight
	}
	drain := func(d Destination) {
		switch {
		case vs.Proto != model.TCP || d.ActiveConns+d.InactiveConns == 0:
			do(s.a.table.DelDestination, d, -1)
		case d.Weight != 0:
			d.Weight = 0
			do(s.a.table.UpdateDestination, d, 0)
			s.draining(vs.VSKey)
		default:
			s.draining(vs.VSKey)
		}
	}
	inPlan := map[netip.AddrPort]bool{}
	for _, r := range vs.Reals {
		inPlan[r.AddrPort()] = true
		d, ok := cur[r.AddrPort()]
		switch {
		case r.Weight == 0 && ok:
			drain(d)
		case r.Weight == 0:
			// Gone already (or never here): a draining real server is never added.
		case !ok:
			do(s.a.table.NewDestination, Destination{Addr: r.Addr, Port: r.Port, Weight: r.Weight, Forward: Masq}, r.Weight)
		case d.Weight != r.Weight || d.Forward != Masq:
			do(s.a.table.UpdateDestination, Destination{Addr: r.Addr, Port: r.Port, Weight: r.Weight, Forward: Masq}, r.Weight)
		}
	}
	for _, d := range have {
		if !inPlan[d.AddrPort()] {
			drain(d)
		}
	}
	if changed {
		s.destCheck[vs.VSKey] = expect
	}
}

func (s *applyPass) draining(k ipvsplan.VSKey) {
	s.pending[k] = true
	s.st.Draining++
}

// readBackDests bounds the virtual servers whose real servers an apply reads back, spread
// evenly over those it changed: a change the kernel does not take fails for all alike
// (ip_vs missing, values stored otherwise), and reading back each of 10,000 was a quarter
// of a full sync's requests, a netlink round trip each.
const readBackDests = 256

// readBack verifies what this apply changed: moby/ipvs reports success for changes that
// never happened when ip_vs is missing, and the kernel may store other values than it was
// given.
func (s *applyPass) readBack() {
	if len(s.touched)+len(s.deleted) > 0 {
		svcs, err := s.a.table.GetServices()
		if err != nil {
			s.fail(fmt.Errorf("read back: %w", err))
			return
		}
		got := byKey(svcs)
		for _, k := range s.touched {
			vs := s.want[k]
			svc, ok := got[k]
			switch {
			case !ok:
				s.fail(fmt.Errorf("virtual server %s (%s): not in the kernel after it was programmed (IPVS ignored the change: is ip_vs loaded?)", k, vs.Service))
			case !sameService(svc, vs):
				s.fail(fmt.Errorf("virtual server %s (%s): read back scheduler %s persistence %ds, want %s %ds", k, vs.Service,
					svc.Scheduler, svc.Timeout, vs.Scheduler, vs.Timeout))
			}
		}
		for _, k := range s.deleted {
			if _, ok := got[k]; ok {
				s.fail(fmt.Errorf("virtual server %s: still in the kernel after it was deleted", k))
			}
		}
	}
	changed := slices.SortedFunc(maps.Keys(s.destCheck), ipvsplan.VSKey.Compare)
	step := max(1, (len(changed)+readBackDests-1)/readBackDests)
	for i := 0; i < len(changed); i += step {
		k := changed[i]
		ds, err := s.a.table.GetDestinations(toService(s.want[k]))
		if err != nil {
			s.fail(fmt.Errorf("read back: %w", err))
			continue
		}
		got := map[netip.AddrPort]int{}
		for _, d := range ds {
			got[d.AddrPort()] = d.Weight
		}
		for ap, w := range s.destCheck[k] {
			gw, ok := got[ap]
			switch {
			case w < 0 && ok:
				s.fail(fmt.Errorf("virtual server %s: real server %s still there after it was removed", k, ap))
			case w >= 0 && !ok:
				s.fail(fmt.Errorf("virtual server %s: real server %s not in the kernel after it was programmed", k, ap))
			case w >= 0 && gw != w:
				s.fail(fmt.Errorf("virtual server %s: real server %s read back weight %d, want %d", k, ap, gw, w))
			}
		}
	}
}
