package cluster

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// Labels that take a Service or EndpointSlice away from this proxy, as kube-proxy reads them:
// a Service meant for another proxy implementation, and the slices of headless Services.
const (
	serviceProxyNameLabel = "service.kubernetes.io/service-proxy-name"
	headlessLabel         = v1.IsHeadlessService
)

// lastAppliedAnnotation holds a whole copy of an object applied with kubectl; nothing here
// reads it, and it would double what is kept in memory and in the cache.
const lastAppliedAnnotation = v1.LastAppliedConfigAnnotation

// listWatcher is the list and watch half of a typed client.
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// newInformer returns an informer over api whose requests are reported to link under name.
// Resync is off: handlers get every change as it happens, and a periodic replay of unchanged
// objects would only make the tracker compare them again.
func newInformer[L runtime.Object](api listWatcher[L], link *linkState, name string,
	example runtime.Object, tweak func(*metav1.ListOptions), transform toolscache.TransformFunc) (toolscache.SharedIndexInformer, error) {
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			tweak(&opts)
			obj, err := api.List(ctx, opts)
			link.listed(name, err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			tweak(&opts)
			w, err := api.Watch(ctx, opts)
			link.watchStarted(name, err)
			return w, err
		},
	}
	inf := toolscache.NewSharedIndexInformerWithOptions(listFirst{lw}, example,
		toolscache.SharedIndexInformerOptions{ObjectDescription: name})
	if err := inf.SetTransform(transform); err != nil {
		return nil, err
	}
	err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *toolscache.Reflector, err error) {
		link.watchEnded(name, err)
	})
	if err != nil {
		return nil, err
	}
	return inf, nil
}

// listFirst makes the reflector take the initial state (and any later one, after a watch
// ends in 410 Gone) from a LIST, not from a watch streaming every object as an event
// (client-go's WatchListClient, on by default since 1.35). Against a v1.36 API server
// holding 10,000 Services and their EndpointSlices, informers of both were synced after
// 189-225 ms listing and 293-739 ms (median 366) streaming, five of each alternately; a
// start's first full sync waits for them. Both are served from the API server's watch cache.
type listFirst struct{ *toolscache.ListWatch }

// IsWatchListSemanticsUnSupported tells the reflector not to stream the list.
func (listFirst) IsWatchListSemanticsUnSupported() bool { return true }

// proxySelector excludes what kube-proxy excludes; the API server filters, so those objects
// are never sent.
func proxySelector() string {
	noProxyName, _ := labels.NewRequirement(serviceProxyNameLabel, selection.DoesNotExist, nil)
	noHeadless, _ := labels.NewRequirement(headlessLabel, selection.DoesNotExist, nil)
	return labels.NewSelector().Add(*noProxyName, *noHeadless).String()
}

type informers struct {
	services, slices, nodes, ownNode toolscache.SharedIndexInformer
	// names are the informers' names in the link state, in the order above.
	names []string
}

func newInformers(client kubernetes.Interface, nodeName string, link *linkState) (informers, error) {
	sel := proxySelector()
	byProxy := func(o *metav1.ListOptions) { o.LabelSelector = sel }
	everything := func(*metav1.ListOptions) {}
	ownName := fields.OneTermEqualSelector("metadata.name", nodeName).String()
	byName := func(o *metav1.ListOptions) { o.FieldSelector = ownName }
	is := informers{names: []string{"services", "endpointslices", "nodes", "node/" + nodeName}}
	var err error
	if is.services, err = newInformer(client.CoreV1().Services(""), link, is.names[0], &v1.Service{}, byProxy, slim); err != nil {
		return is, err
	}
	if is.slices, err = newInformer(client.DiscoveryV1().EndpointSlices(""), link, is.names[1], &discovery.EndpointSlice{}, byProxy, slimSlice); err != nil {
		return is, err
	}
	if is.nodes, err = newInformer(client.CoreV1().Nodes(), link, is.names[2], &v1.Node{}, everything, routeNode); err != nil {
		return is, err
	}
	if is.ownNode, err = newInformer(client.CoreV1().Nodes(), link, is.names[3], &v1.Node{}, byName, slim); err != nil {
		return is, err
	}
	return is, nil
}

func (is informers) all() []toolscache.SharedIndexInformer {
	return []toolscache.SharedIndexInformer{is.services, is.slices, is.nodes, is.ownNode}
}

// slim drops the parts of an object nobody here reads: field ownership and kubectl's copy.
func slim(obj any) (any, error) {
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
		if a := o.GetAnnotations(); a[lastAppliedAnnotation] != "" {
			delete(a, lastAppliedAnnotation)
		}
	}
	return obj, nil
}

// slimSlice is slim for an EndpointSlice, which also loses each endpoint's reference to
// its Pod and its hostname: the proxy reads neither, and in a cluster of 100,000 endpoints
// they are megabytes of strings in the informer's cache and in the offline cache. What is
// kept is kept tightly: the decoder grows a slice's endpoints by appending (room for 16
// where there are 10), and gives every endpoint its own copy of its node's and zone's name.
func slimSlice(obj any) (any, error) {
	return sliceNames.slim(obj)
}

// sliceNames shares node and zone names between the endpoints of every slice.
var sliceNames = &sharedNames{m: map[string]*string{}}

// sharedNames hands out one pointer per distinct name. The objects holding them are the
// informer's, read and never written; a name's pointer outlives its place in the map.
type sharedNames struct {
	mu sync.Mutex
	m  map[string]*string
}

// maxSharedNames bounds the map: a cluster has that many nodes and zones at most, and one
// whose nodes come and go starts the map over rather than keep every name it has seen.
const maxSharedNames = 1 << 14

func (n *sharedNames) slim(obj any) (any, error) {
	es, ok := obj.(*discovery.EndpointSlice)
	if !ok {
		return slim(obj)
	}
	if cap(es.Endpoints) > len(es.Endpoints) {
		es.Endpoints = append(make([]discovery.Endpoint, 0, len(es.Endpoints)), es.Endpoints...)
	}
	n.mu.Lock()
	for i := range es.Endpoints {
		e := &es.Endpoints[i]
		e.TargetRef, e.Hostname = nil, nil
		e.NodeName, e.Zone = n.share(e.NodeName), n.share(e.Zone)
	}
	n.mu.Unlock()
	return slim(es)
}

func (n *sharedNames) share(p *string) *string {
	if p == nil {
		return nil
	}
	if q, ok := n.m[*p]; ok {
		return q
	}
	if len(n.m) >= maxSharedNames {
		clear(n.m)
	}
	n.m[*p] = p
	return p
}

// routeNode keeps of a Node what routes and topology need. A Node's status carries images
// and conditions that change with every heartbeat; none of that matters here.
func routeNode(obj any) (any, error) {
	n, ok := obj.(*v1.Node)
	if !ok {
		return obj, nil
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels},
		Spec:       v1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status:     v1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}
