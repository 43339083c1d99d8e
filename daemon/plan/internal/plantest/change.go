package plantest

import (
	"fmt"
	"math/rand"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

// RandomChange upserts or deletes one of a few services or their EndpointSlices.
func RandomChange(r *rand.Rand, tr *model.Tracker) {
	i := r.Intn(6)
	name := fmt.Sprintf("rnd%d", i)
	proto := []v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}[i%3]
	switch r.Intn(5) {
	case 0:
		tr.DeleteService("ns", name)
	case 1, 2:
		mods := []func(*v1.Service){mt.Port("p", proto, int32(80+i), 8080, int32(30100+i)), mt.DualStack(fmt.Sprintf("fd00:96::%x", 0x100+i))}
		switch r.Intn(4) {
		case 0:
			mods = append(mods, mt.LoadBalancerIPs(fmt.Sprintf("203.0.113.%d", 100+i), fmt.Sprintf("2001:db8:113::%x", 0x100+i)))
			if r.Intn(2) == 0 {
				mods = append(mods, mt.SourceRanges("10.0.0.0/8", "2001:db8::/32"))
			}
		case 1:
			mods = append(mods, mt.Type(v1.ServiceTypeNodePort))
		case 2:
			mods = append(mods, mt.ExternalIPs(fmt.Sprintf("198.51.100.%d", 100+i)))
		}
		if r.Intn(3) == 0 {
			mods = append(mods, mt.ExternalLocal(int32(32100+i)))
		}
		if r.Intn(3) == 0 {
			mods = append(mods, mt.Affinity(int32(60*(1+r.Intn(3)))))
		}
		if r.Intn(4) == 0 {
			mods = append(mods, mt.InternalLocal())
		}
		tr.UpsertService(mt.Service("ns", name, fmt.Sprintf("10.96.1.%d", 10+i), mods...))
	default:
		var v4, v6 []discovery.Endpoint
		for e := range 4 {
			if r.Intn(2) == 0 {
				continue
			}
			mods := []func(*discovery.Endpoint){mt.OnNode([]string{"gw", "other"}[r.Intn(2)])}
			if r.Intn(5) == 0 {
				mods = append(mods, mt.Terminating(r.Intn(2) == 0))
			}
			v4 = append(v4, mt.EP(fmt.Sprintf("10.200.%d.%d", 10+i, 10+e), mods...))
			v6 = append(v6, mt.EP(fmt.Sprintf("fd00:200:%x::%x", 0x10+i, 0x10+e), mods...))
		}
		tr.UpsertSlice(mt.Slice("ns", name+"-v4", name, "p", proto, 8080, v4...))
		tr.UpsertSlice(mt.Slice("ns", name+"-v6", name, "p", proto, 8080, v6...))
	}
}
