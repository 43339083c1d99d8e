package model

import (
	"hash/maphash"
	"iter"
	"maps"
)

// portShards is how many parts Ports are kept in. A change copies the parts it touches:
// at 10,000 Services, about 40 ports each.
const portShards = 256

var portSeed = maphash.MakeSeed()

func shardOf(n ServicePortName) int { return int(maphash.Comparable(portSeed, n) % portShards) }

// Ports are a snapshot's ServicePorts by name. A value never changes; the snapshots of one
// Tracker share every part the changes between them did not touch. (A Tracker used to copy
// the whole map into each snapshot: at 10,000 Services 1.3 MB for a one-endpoint change,
// which made the garbage collector run every minute or so, in the middle of a sync when
// unlucky.) The zero value holds nothing.
type Ports struct {
	shards *[portShards]map[ServicePortName]*ServicePort
	n      int
}

// Len returns the number of ports.
func (p Ports) Len() int { return p.n }

// Get returns the port of that name.
func (p Ports) Get(n ServicePortName) (*ServicePort, bool) {
	if p.shards == nil {
		return nil, false
	}
	sp, ok := p.shards[shardOf(n)][n]
	return sp, ok
}

// All yields every port, in no particular order.
func (p Ports) All() iter.Seq2[ServicePortName, *ServicePort] {
	return func(yield func(ServicePortName, *ServicePort) bool) {
		if p.shards == nil {
			return
		}
		for _, m := range p.shards {
			for n, sp := range m {
				if !yield(n, sp) {
					return
				}
			}
		}
	}
}

// portTable is a Tracker's mutable Ports: a part handed out in a snapshot is copied before
// its first change after that.
type portTable struct {
	shards [portShards]map[ServicePortName]*ServicePort
	shared [portShards]bool
	n      int
}

func (t *portTable) get(n ServicePortName) (*ServicePort, bool) {
	sp, ok := t.shards[shardOf(n)][n]
	return sp, ok
}

// writable returns the part holding n, copied first if a snapshot has it.
func (t *portTable) writable(n ServicePortName) map[ServicePortName]*ServicePort {
	i := shardOf(n)
	switch {
	case t.shards[i] == nil:
		t.shards[i] = map[ServicePortName]*ServicePort{}
	case t.shared[i]:
		t.shards[i] = maps.Clone(t.shards[i])
	}
	t.shared[i] = false
	return t.shards[i]
}

func (t *portTable) set(sp *ServicePort) {
	m := t.writable(sp.Name)
	if _, had := m[sp.Name]; !had {
		t.n++
	}
	m[sp.Name] = sp
}

func (t *portTable) delete(n ServicePortName) {
	if _, had := t.get(n); !had {
		return
	}
	delete(t.writable(n), n)
	t.n--
}

// snapshot returns the ports as they are now; later changes copy what they touch.
func (t *portTable) snapshot() Ports {
	parts := t.shards
	for i := range t.shared {
		t.shared[i] = true
	}
	return Ports{shards: &parts, n: t.n}
}
