package kernelview

import (
	"fmt"
	"strings"
	"sync"

	"github.com/edgegate/edgegate/daemon/kernel/nlbatch"
	"github.com/edgegate/edgegate/daemon/model"
	nftplan "github.com/edgegate/edgegate/daemon/plan/nft"
	"github.com/edgegate/edgegate/daemon/view"
)

// Each proxy mode's view.Source: the rules as the kernel holds them, cached per nftables
// ruleset generation, and the traffic the mode's counters give.

func newCache(render func(t *view.Text) error) *view.Cache {
	return &view.Cache{Generation: nlbatch.Generation, Render: render}
}

// NFTView is the nftables mode's view: the whole nftables ruleset (edgegate's tables, its
// shards, and whatever else the kernel holds) and the rule counters by comment.
type NFTView struct {
	rules    *view.Cache
	traffic  *NFTTraffic
	refusals *NFTTraffic
}

// NewNFTView returns the nftables mode's view of the current network namespace.
func NewNFTView(families []model.Family) *NFTView {
	return &NFTView{
		rules:   newCache(func(t *view.Text) error { return RenderNFT(t, allTables) }),
		traffic: &NFTTraffic{Counters: Kernel{}, Families: families},
		refusals: &NFTTraffic{Counters: Kernel{}, Families: families,
			Tables: func(name string) bool { return name == nftplan.TableName },
			Chains: func(name string) bool { return strings.HasPrefix(name, nftplan.ProtectChainPrefix) }},
	}
}

// Rules implements view.Source.
func (v *NFTView) Rules() (string, error) { return v.rules.Text() }

// Traffic implements view.Source.
func (v *NFTView) Traffic(snap *model.Snapshot) (map[string]view.ServiceTraffic, error) {
	return v.traffic.Traffic(snap)
}

// Refusals implements view.Protected: only the protect chains of the main tables are
// read, so a scrape costs the same at 50 Services as at 50,000.
func (v *NFTView) Refusals(snap *model.Snapshot) (map[string]view.Refusals, error) {
	tr, err := v.refusals.Traffic(snap)
	if err != nil {
		return nil, err
	}
	out := map[string]view.Refusals{}
	for name, st := range tr {
		if st.Refused != nil {
			out[name] = *st.Refused
		}
	}
	return out, nil
}

// IPTView is the iptables mode's view: the iptables tables in iptables-save form. It has
// no traffic view yet.
type IPTView struct{ rules *view.Cache }

// NewIPTView returns the iptables mode's view of the current network namespace.
func NewIPTView() *IPTView { return &IPTView{rules: newCache(RenderIPTables)} }

// Rules implements view.Source.
func (v *IPTView) Rules() (string, error) { return v.rules.Text() }

// Traffic implements view.Source: none (nil).
func (*IPTView) Traffic(*model.Snapshot) (map[string]view.ServiceTraffic, error) { return nil, nil }

// IPVSView is the ipvs mode's view: the IPVS table (ipvsadm -Ln, then --stats), read at
// every call (IPVS changes move no nftables generation), then the nftables ruleset with
// the auxiliary tables, and the IPVS stats as traffic.
type IPVSView struct {
	rules   *view.Cache
	traffic IPVSTraffic
}

// NewIPVSView returns the ipvs mode's view of the current network namespace.
func NewIPVSView() *IPVSView {
	return &IPVSView{rules: newCache(func(t *view.Text) error { return RenderNFT(t, allTables) })}
}

// Rules implements view.Source.
func (v *IPVSView) Rules() (string, error) {
	table, err := Kernel{}.IPVS()
	if err != nil {
		return "", err
	}
	nft, err := v.rules.Text()
	if err != nil {
		nft = "# " + err.Error() + "\n"
	}
	x := view.NewText(0)
	for line := range strings.Lines(table) {
		if x.Printf("%s", line); x.Full() {
			break
		}
	}
	return x.String() + "\n# nftables: the auxiliary tables, and any other\n" + nft, nil
}

// Traffic implements view.Source.
func (v *IPVSView) Traffic(snap *model.Snapshot) (map[string]view.ServiceTraffic, error) {
	return v.traffic.Traffic(snap)
}

// NFTCounters reads the counters of the nftables mode's tables of a family (those tables
// accepts: edgegate and the tables a split dispatch is spread over), each under the comment
// of the rule that holds it. Kernel implements it.
type NFTCounters interface {
	Counters(f model.Family, tables, chains func(name string) bool) (map[string]view.BackendTraffic, error)
}

// NFTTraffic is the nftables mode's traffic: the plan gives the first rule of every
// service chain and the DNAT rule of every endpoint a counter, labelled by the rule's
// comment (see plan.Counter, nftplan.EndpointChain). A rule's counter restarts from zero
// whenever its chain is written again (a full sync, a change of that service's endpoints);
// NFTTraffic carries the counts across, so the numbers it reports never go back (what a
// restart loses between two samples stays lost).
type NFTTraffic struct {
	Counters NFTCounters
	Families []model.Family
	// Tables and Chains pick the chains read: by default every chain of the mode's tables.
	Tables, Chains func(name string) bool

	mu   sync.Mutex
	last map[string]view.BackendTraffic // raw kernel values at the previous read
	base map[string]view.BackendTraffic // counts carried over restarts
}

// Traffic reads the counters of the service ports of snap.
func (n *NFTTraffic) Traffic(snap *model.Snapshot) (map[string]view.ServiceTraffic, error) {
	raw := map[string]view.BackendTraffic{}
	for _, f := range n.Families {
		tables, chains := n.Tables, n.Chains
		if tables == nil {
			tables = nftplan.ModeTable
		}
		if chains == nil {
			chains = func(string) bool { return true }
		}
		c, err := n.Counters.Counters(f, tables, chains)
		if err != nil {
			return nil, fmt.Errorf("%s counters of the nftables tables: %w", f, err)
		}
		for name, v := range c {
			raw[f.String()+" "+name] = v
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.base == nil {
		n.last, n.base = map[string]view.BackendTraffic{}, map[string]view.BackendTraffic{}
	}
	for key := range n.last {
		if _, ok := raw[key]; !ok { // the endpoint is gone: forget it
			delete(n.last, key)
			delete(n.base, key)
		}
	}
	all := map[string]view.BackendTraffic{}
	for key, v := range raw {
		if prev, ok := n.last[key]; ok && (v.Packets < prev.Packets || v.Bytes < prev.Bytes) {
			b := n.base[key]
			n.base[key] = view.BackendTraffic{Packets: b.Packets + prev.Packets, Bytes: b.Bytes + prev.Bytes}
		}
		n.last[key] = v
		name := key[strings.IndexByte(key, ' ')+1:]
		s, b := all[name], n.base[key]
		all[name] = view.BackendTraffic{Packets: s.Packets + v.Packets + b.Packets, Bytes: s.Bytes + v.Bytes + b.Bytes}
	}
	out := map[string]view.ServiceTraffic{}
	for _, sp := range snap.Sorted() {
		st := view.ServiceTraffic{BackendTraffic: firstPackets(all["service-"+nftplan.ChainBase(sp.Name)]), Backends: map[string]view.BackendTraffic{}}
		for _, e := range sp.Endpoints {
			st.Backends[e.String()] = firstPackets(all[nftplan.EndpointChain(sp.Name, e)])
		}
		if nftplan.Protected(sp) && sp.Protection.Limits() {
			base := nftplan.ChainBase(sp.Name)
			st.Refused = &view.Refusals{Rate: all[nftplan.RefusedRateCounterPref+base].Packets,
				Conns: all[nftplan.RefusedConnsCounterPref+base].Packets}
		}
		out[sp.Name.String()] = st
	}
	return out, nil
}

// firstPackets is a count of first packets: one per connection.
func firstPackets(c view.BackendTraffic) view.BackendTraffic {
	c.Connections = c.Packets
	return c
}
