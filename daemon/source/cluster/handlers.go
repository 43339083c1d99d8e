package cluster

import (
	"reflect"
	"slices"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/edgegate/edgegate/daemon/internal/fault"
)

func (s *Source) upsertService(o any) { upsert(s, o, s.sink.UpsertService) }
func (s *Source) deleteService(o any) { remove[*v1.Service](s, o, s.sink.DeleteService) }
func (s *Source) upsertSlice(o any)   { upsert(s, o, s.sink.UpsertSlice) }
func (s *Source) deleteSlice(o any)   { remove[*discovery.EndpointSlice](s, o, s.sink.DeleteSlice) }

// upsert feeds an added or updated object to the sink's apply, when it is a T.
func upsert[T any](s *Source, o any, apply func(T)) {
	fault.Point(fault.ClusterInformer)
	if t, ok := o.(T); ok {
		s.feed(func() { apply(t) })
	}
}

// remove feeds a deleted T (or its tombstone) to the sink's apply.
func remove[T interface {
	GetNamespace() string
	GetName() string
}](s *Source, o any, apply func(ns, name string)) {
	if ns, name, ok := deleted[T](o); ok {
		s.feed(func() { apply(ns, name) })
	}
}

// feed applies one event to the sink once live; before, goLive picks it up from the store.
func (s *Source) feed(apply func()) {
	s.mu.Lock()
	if !s.live {
		s.mu.Unlock()
		return
	}
	apply()
	s.mu.Unlock()
	s.opts.Changed()
	s.saveLater()
}

// deleted returns the namespace and name of a deleted object, also when the informer only
// knows its last key: a delete missed while the watch was down and found by a relist comes
// as a tombstone.
func deleted[T interface {
	GetNamespace() string
	GetName() string
}](o any) (namespace, name string, ok bool) {
	if t, isT := o.(T); isT {
		return t.GetNamespace(), t.GetName(), true
	}
	tomb, isTomb := o.(toolscache.DeletedFinalStateUnknown)
	if !isTomb {
		return "", "", false
	}
	if t, isT := tomb.Obj.(T); isT {
		return t.GetNamespace(), t.GetName(), true
	}
	ns, name, err := toolscache.SplitMetaNamespaceKey(tomb.Key)
	return ns, name, err == nil
}

// nodeHandler calls NodesChanged for changes of the Nodes that mine selects, once the node
// informers are live, and only for changes to what routes and topology read.
func (s *Source) nodeHandler(mine func(*v1.Node) bool) toolscache.ResourceEventHandler {
	notify := func() {
		s.mu.Lock()
		live := s.nodesLive
		s.mu.Unlock()
		if live {
			s.opts.NodesChanged()
			s.saveLater()
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if n, ok := o.(*v1.Node); ok && mine(n) {
				notify()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*v1.Node)
			n, ok2 := newObj.(*v1.Node)
			if ok1 && ok2 && mine(n) && !sameForRoutes(o, n) {
				notify()
			}
		},
		DeleteFunc: func(o any) {
			if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = tomb.Obj
			}
			if n, ok := o.(*v1.Node); !ok || mine(n) {
				notify()
			}
		},
	}
}

// sameForRoutes reports whether two versions of a Node agree on everything routes and
// topology read, and on what marks the gateway's own Node for removal (taints, deletion
// timestamp: draining); heartbeats change nothing of it.
func sameForRoutes(a, b *v1.Node) bool {
	return reflect.DeepEqual(a.Labels, b.Labels) && slices.Equal(a.Spec.PodCIDRs, b.Spec.PodCIDRs) &&
		a.Spec.PodCIDR == b.Spec.PodCIDR && slices.Equal(a.Status.Addresses, b.Status.Addresses) &&
		reflect.DeepEqual(a.Spec.Taints, b.Spec.Taints) && a.DeletionTimestamp.Equal(b.DeletionTimestamp)
}
