package model_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// The convergence test replays random sequences of upserts, deletes and Replaces and
// proves two things: every Snapshot reports exactly the ports that differ from the
// previous one (and shares the rest), and the final Snapshot equals one built fresh from
// the final objects, whatever the path there.

var (
	convServices = []string{"alpha", "beta", "gamma"}
	convSlices   = []string{"s1", "s2", "s3", "s4", "s5"}
	convAddrs    = []string{"10.200.2.11", "10.200.2.12", "10.200.2.13"}
)

// convService builds variant k of a service: ports, type and affinity vary.
func convService(name string, k int) *v1.Service {
	mods := []func(*v1.Service){mt.Port("http", v1.ProtocolTCP, 80, 8080, 30000+int32(k))}
	if k%2 == 1 {
		mods = append(mods, mt.Port("dns", v1.ProtocolUDP, 53, 5353, 0))
	}
	if k >= 2 {
		mods = append(mods, mt.Type(v1.ServiceTypeNodePort), mt.Affinity(int32(60*k)))
	}
	return mt.Service("default", name, fmt.Sprintf("10.96.0.%d", 10+len(name)+k), mods...)
}

// convSlice builds a random slice: owner, port and endpoints with conditions vary.
func convSlice(r *rand.Rand, name string) *discovery.EndpointSlice {
	owner := convServices[r.IntN(len(convServices))]
	port, proto, num := "http", v1.ProtocolTCP, int32(8080)
	if r.IntN(3) == 0 {
		port, proto, num = "dns", v1.ProtocolUDP, 5353
	}
	var eps []discovery.Endpoint
	for _, a := range convAddrs {
		switch r.IntN(4) {
		case 0:
			continue
		case 1:
			eps = append(eps, mt.EP(a, mt.Terminating(r.IntN(2) == 0)))
		default:
			eps = append(eps, mt.EP(a, mt.OnNode(fmt.Sprintf("node-%d", r.IntN(2)))))
		}
	}
	return mt.Slice("default", name, owner, port, proto, num, eps...)
}

func TestTrackerConverges(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x6564676567617465))
			tr := model.NewTracker()
			services := map[string]*v1.Service{}
			slices := map[string]*discovery.EndpointSlice{}
			prev, _ := tr.Snapshot()
			for step := range 40 {
				switch op := r.IntN(10); {
				case op < 3:
					n := convServices[r.IntN(len(convServices))]
					services[n] = convService(n, r.IntN(4))
					tr.UpsertService(services[n])
				case op < 4:
					n := convServices[r.IntN(len(convServices))]
					delete(services, n)
					tr.DeleteService("default", n)
				case op < 7:
					n := convSlices[r.IntN(len(convSlices))]
					slices[n] = convSlice(r, n)
					tr.UpsertSlice(slices[n])
				case op < 8:
					n := convSlices[r.IntN(len(convSlices))]
					delete(slices, n)
					tr.DeleteSlice("default", n)
				case op < 9:
					// A full-state source: keep some objects, rebuild others as equal copies.
					services, slices = replaceSome(r, services, slices)
					tr.Replace(values(services), values(slices))
				default:
					prev = checkSnapshot(t, step, tr, prev)
				}
			}
			final := checkSnapshot(t, 40, tr, prev)

			fresh := model.NewTracker()
			fresh.Replace(values(services), values(slices))
			want, _ := fresh.Snapshot()
			if d := cmp.Diff(maps.Collect(want.Ports.All()), maps.Collect(final.Ports.All()), addrCmp); d != "" {
				t.Errorf("incremental snapshot differs from a fresh one (-fresh +incremental):\n%s", d)
			}
		})
	}
}

// checkSnapshot takes a snapshot and checks its change report against the previous one.
func checkSnapshot(t *testing.T, step int, tr *model.Tracker, prev *model.Snapshot) *model.Snapshot {
	t.Helper()
	snap, ch := tr.Snapshot()
	names := map[model.ServicePortName]bool{}
	for n := range prev.Ports.All() {
		names[n] = true
	}
	for n := range snap.Ports.All() {
		names[n] = true
	}
	for n := range names {
		old, had := prev.Ports.Get(n)
		cur, has := snap.Ports.Get(n)
		differs := had != has || had && !reflect.DeepEqual(old, cur)
		_, reported := ch.Ports[n]
		switch {
		case differs != reported:
			t.Fatalf("step %d: %v differs=%v but reported=%v\nold %+v\nnew %+v", step, n, differs, reported, old, cur)
		case !differs && old != cur:
			t.Fatalf("step %d: unchanged %v was rebuilt instead of shared", step, n)
		}
	}
	if ch.Empty() != (snap.Generation == prev.Generation) {
		t.Fatalf("step %d: generation %d -> %d with changes %v", step, prev.Generation, snap.Generation, ch.Ports)
	}
	return snap
}

// replaceSome drops about a third of the objects and swaps the rest for equal copies,
// which Replace must treat as unchanged.
func replaceSome(r *rand.Rand, services map[string]*v1.Service, slices map[string]*discovery.EndpointSlice) (map[string]*v1.Service, map[string]*discovery.EndpointSlice) {
	svcs := map[string]*v1.Service{}
	for n, s := range services {
		if r.IntN(3) != 0 {
			svcs[n] = s.DeepCopy()
		}
	}
	sls := map[string]*discovery.EndpointSlice{}
	for n, s := range slices {
		if r.IntN(3) != 0 {
			sls[n] = s.DeepCopy()
		}
	}
	return svcs, sls
}

func values[V any](m map[string]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
