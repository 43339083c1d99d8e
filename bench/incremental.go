package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The incremental phase: once a second, one endpoint added to or removed from one Service's
// EndpointSlice, each change on another Service, alternating; the time from the write to the
// endpoint's chain appearing in or leaving the kernel is one sample.
const (
	changeEvery   = time.Second
	changeTimeout = 15 * time.Second
)

// extraBase is where added endpoints' addresses start, beyond endpointBase's range.
var extraBase = netip.MustParseAddr("10.128.0.0")

// change is one endpoint change of the incremental phase.
type change struct {
	Service int  // index
	Add     bool // else remove
	Ref     endpointRef
}

// plannedChanges spreads n changes over the services: even ones add a new endpoint, odd ones
// remove the service's last endpoint. Every change touches another Service (as far as there
// are), so no change waits on another's object.
func plannedChanges(services, endpoints, n int) []change {
	if n <= 0 {
		return nil
	}
	out := make([]change, 0, n)
	step := max(1, services/n)
	for i := range n {
		svc := (i * step) % services
		ch := change{Service: svc, Add: i%2 == 0}
		addr := netip.MustParseAddr(endpointIP(svc*endpoints + endpoints - 1))
		if ch.Add {
			addr = offset(extraBase, i)
		}
		ch.Ref = endpointRef{Namespace: benchNamespace, Service: serviceName(svc), Port: portName, Addr: addr, TargetPort: targetPort}
		out = append(out, ch)
	}
	return out
}

func offset(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// apply writes the change, stamping the EndpointSlice with
// endpoints.kubernetes.io/last-change-trigger-time as the EndpointSlice controller does; the
// stamp and the returned time are taken just before the Update call, which is where the
// latency is counted from (both programs' network_programming_duration_seconds count from
// the stamp, too). took is the Update call's own duration: the apiserver's and etcd's part of
// the latency, the same for both programs.
func (ch change) apply(ctx context.Context, c kubernetes.Interface, endpoints int) (at time.Time, took time.Duration, err error) {
	slices := c.DiscoveryV1().EndpointSlices(benchNamespace)
	name := sliceName(ch.Service)
	s, err := slices.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("get EndpointSlice %s/%s: %w", benchNamespace, name, err)
	}
	if ch.Add {
		ready, node := true, otherNode
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{ch.Ref.Addr.String()},
			Conditions: discovery.EndpointConditions{Ready: &ready},
			NodeName:   &node,
		})
	} else {
		s.Endpoints = slicesDeleteAddr(s.Endpoints, ch.Ref.Addr.String())
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	at = time.Now()
	s.Annotations[v1.EndpointsLastChangeTriggerTime] = at.UTC().Format(time.RFC3339Nano)
	if _, err := slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		return time.Time{}, 0, fmt.Errorf("update EndpointSlice %s/%s endpoints: %w", benchNamespace, name, err)
	}
	return at, time.Since(at), nil
}

func slicesDeleteAddr(eps []discovery.Endpoint, addr string) []discovery.Endpoint {
	return slices.DeleteFunc(eps, func(e discovery.Endpoint) bool { return slices.Contains(e.Addresses, addr) })
}

// restore puts the changed EndpointSlices back as createServices made them, so every run of
// a size starts from the same objects.
func restore(ctx context.Context, c kubernetes.Interface, changes []change, endpoints int) error {
	var errs []error
	for _, ch := range changes {
		s, err := c.DiscoveryV1().EndpointSlices(benchNamespace).Get(ctx, sliceName(ch.Service), metav1.GetOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("restore EndpointSlice %s/%s: %w", benchNamespace, sliceName(ch.Service), err))
			continue
		}
		s.Endpoints = endpointsOf(ch.Service, endpoints)
		delete(s.Annotations, v1.EndpointsLastChangeTriggerTime)
		if _, err := c.DiscoveryV1().EndpointSlices(benchNamespace).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("restore EndpointSlice %s/%s endpoints: %w", benchNamespace, s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// phase is what the incremental phase did: the changes made (to restore), the latencies
// seen, the Update calls' own durations and the number of changes timed out.
type phase struct {
	made      []change
	latencies []time.Duration
	writes    []time.Duration
	timeouts  int
}

// incrResult is what the incremental phase measured.
type incrResult struct {
	Changes   int             // made
	Latencies []time.Duration // per change that reached the kernel in time (probe)
	Timeouts  int             // changes not seen within changeTimeout
	Writes    []time.Duration // the Update calls' own durations
	// MetricCount observations of its network_programming_duration_seconds during the
	// phase; MetricP50 and MetricP99 estimate quantiles from the histogram's buckets.
	MetricCount          float64
	MetricP50, MetricP99 quantile
	// Syncs during the phase and their mean duration (its sync_proxy_rules_duration_seconds).
	Syncs, SyncSeconds float64
	Kernel             *float64      // the kernel's part of those syncs, mean (edgegate only)
	CPU                time.Duration // the program's CPU during the phase, children included
}

// incremental runs the phase against a program whose full sync is in the kernel: one change
// every changeEvery for at most dur (len(changes) at most), each write in a goroutine of its
// own so that a slow change delays neither the next one nor the probe. The probe polls the
// generation every pollEvery and, at each new one, checks every change still pending; a change
// not seen changeTimeout after its write is counted as timed out.
func incremental(ctx context.Context, c kubernetes.Interface, p *probe, exited <-chan struct{}, changes []change, endpoints int, dur time.Duration) (phase, error) {
	// The probe must find what exists before trusting its absence: the first change's
	// service still has its last original endpoint whichever the change is.
	if len(changes) > 0 {
		first := changes[0]
		ref := first.Ref
		ref.Addr = netip.MustParseAddr(endpointIP(first.Service*endpoints + endpoints - 1))
		ok, err := p.endpoint(ref)
		if err != nil {
			return phase{}, err
		}
		if !ok {
			return phase{}, fmt.Errorf("probe: %s %s does not dispatch to existing endpoint %s of %s/%s (chain %s; naming changed?)",
				p.tbl.Name, p.kind.PortChain(ref), ref.Addr, ref.Namespace, ref.Service, p.kind.EndpointChain(ref))
		}
	}
	type written struct {
		i    int
		at   time.Time
		took time.Duration
		err  error
	}
	type pending struct {
		ch   change
		at   time.Time // the write's time, once known
		seen time.Time // when the probe first saw it, once seen
	}
	var (
		ph       phase
		pend     = map[int]*pending{}
		results  = make(chan written, len(changes))
		inflight int
	)
	gen, err := p.generation()
	if err != nil {
		return ph, err
	}
	end := time.Now().Add(dur)
	next := 0
	every := time.NewTicker(changeEvery)
	defer every.Stop()
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	// Writes still running when the phase ends are waited for: their changes must be
	// restored.
	defer func() {
		for ; inflight > 0; inflight-- {
			<-results
		}
	}()
	write := func() {
		if next >= len(changes) {
			return
		}
		if time.Now().After(end) {
			next = len(changes) // no more changes; the pending ones finish
			return
		}
		i, ch := next, changes[next]
		next++
		ph.made = append(ph.made, ch)
		pend[i] = &pending{ch: ch}
		inflight++
		go func() {
			at, took, err := ch.apply(ctx, c, endpoints)
			results <- written{i, at, took, err}
		}()
	}
	write() // the first at once, then one a tick
	for next < len(changes) || len(pend) > 0 {
		select {
		case <-ctx.Done():
			return ph, ctx.Err()
		case <-exited:
			return ph, errors.New("exited during the incremental phase")
		case w := <-results:
			inflight--
			if w.err != nil {
				return ph, w.err
			}
			pend[w.i].at = w.at
			ph.writes = append(ph.writes, w.took)
		case <-every.C:
			write()
		case <-poll.C:
			now := time.Now()
			g, err := p.generation()
			if err != nil {
				return ph, err
			}
			if g != gen {
				gen = g
				for _, pe := range pend {
					if !pe.seen.IsZero() {
						continue
					}
					present, err := p.endpoint(pe.ch.Ref)
					if err != nil {
						return ph, err
					}
					if present == pe.ch.Add {
						pe.seen = now
					}
				}
			}
			for i, pe := range pend {
				switch {
				case pe.at.IsZero(): // still writing
				case !pe.seen.IsZero():
					ph.latencies = append(ph.latencies, pe.seen.Sub(pe.at))
					delete(pend, i)
				case now.Sub(pe.at) > changeTimeout:
					ph.timeouts++
					delete(pend, i)
				}
			}
		}
	}
	return ph, nil
}

// quantile is the nearest-rank q-quantile of every change made, those that timed out counted
// as longer than any seen; censored says it fell among those.
func (i *incrResult) quantile(q float64) (d time.Duration, censored bool) {
	all := slices.Clone(i.Latencies)
	for range i.Timeouts {
		all = append(all, math.MaxInt64)
	}
	d = percentile(all, q)
	return d, d == math.MaxInt64
}

// percentile is the nearest-rank percentile of ds (0 when empty).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
