package kernelview

import (
	"fmt"
	"net/netip"

	"github.com/edgegate/edgegate/daemon/kernel/ipvs"
	"github.com/edgegate/edgegate/daemon/model"
	"github.com/edgegate/edgegate/daemon/view"
)

// IPVSTraffic is the ipvs mode's traffic: the kernel's own counters of every
// virtual server and real server (what `ipvsadm -Ln --stats` shows), summed per service
// port over its virtual servers (cluster IPs, external IPs, load-balancer IPs, and its node
// port on every node address) and per endpoint over the real servers that are it. IPVS
// counts every packet and byte of a connection, both ways. A real server that is removed
// and added again starts from zero, as ipvsadm shows it.
type IPVSTraffic struct {
	// List reads the IPVS table; nil reads the kernel's.
	List func() ([]ipvs.Entry, error)
}

func listKernelIPVS() ([]ipvs.Entry, error) {
	t, err := ipvs.Open()
	if err != nil {
		return nil, err
	}
	defer t.Close()
	return ipvs.List(t)
}

// Traffic reads the stats of the service ports of snap.
func (t IPVSTraffic) Traffic(snap *model.Snapshot) (map[string]view.ServiceTraffic, error) {
	list := t.List
	if list == nil {
		list = listKernelIPVS
	}
	entries, err := list()
	if err != nil {
		return nil, fmt.Errorf("IPVS counters: %w", err)
	}
	type frontend struct {
		addr  netip.Addr
		proto model.Protocol
		port  uint16
	}
	type nodePort struct {
		proto model.Protocol
		port  uint16
	}
	owner := map[frontend]*model.ServicePort{}
	nodePorts := map[nodePort]*model.ServicePort{}
	vips := map[netip.Addr]bool{}
	sorted := snap.Sorted()
	for _, sp := range sorted {
		proto := sp.Name.Protocol
		addrs := append(append([]netip.Addr{}, sp.ClusterIPs...), sp.ExternalIPs...)
		for _, lb := range sp.LoadBalancerIPs {
			if !lb.Proxy {
				addrs = append(addrs, lb.Addr)
			}
		}
		for _, a := range addrs {
			owner[frontend{a, proto, sp.Port}] = sp
			vips[a] = true
		}
		if sp.NodePort != 0 {
			nodePorts[nodePort{proto, sp.NodePort}] = sp
		}
	}
	sums := map[*model.ServicePort]*view.ServiceTraffic{}
	for _, e := range entries {
		sp := owner[frontend{e.Addr, e.Proto, e.Port}]
		if sp == nil && !vips[e.Addr] {
			// A node port's virtual servers sit on the node's own addresses.
			sp = nodePorts[nodePort{e.Proto, e.Port}]
		}
		if sp == nil {
			continue // not a service of this snapshot (another owner's, or stale)
		}
		st := sums[sp]
		if st == nil {
			st = &view.ServiceTraffic{Backends: map[string]view.BackendTraffic{}}
			sums[sp] = st
		}
		add(&st.BackendTraffic, e.Stats)
		for _, d := range e.Destinations {
			key := d.AddrPort().String()
			b := st.Backends[key]
			add(&b, d.Stats)
			st.Backends[key] = b
		}
	}
	out := make(map[string]view.ServiceTraffic, len(sorted))
	for _, sp := range sorted {
		s := sums[sp]
		if s == nil {
			s = &view.ServiceTraffic{}
		}
		st := view.ServiceTraffic{BackendTraffic: s.BackendTraffic, Backends: map[string]view.BackendTraffic{}}
		for _, e := range sp.Endpoints {
			st.Backends[e.String()] = s.Backends[e.String()]
		}
		out[sp.Name.String()] = st
	}
	return out, nil
}

func add(b *view.BackendTraffic, c ipvs.Counters) {
	b.Connections += uint64(c.Connections)
	b.Packets += uint64(c.PacketsIn) + uint64(c.PacketsOut)
	b.Bytes += c.BytesIn + c.BytesOut
}
