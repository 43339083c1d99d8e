// Package byname watches one object of the API by its name, with a metadata.name field
// selector on every list and watch: RBAC matches it against resourceNames, so a gateway
// can follow an object (the pools ConfigMap, the heartbeat key Secret) that it is granted
// by name only.
package byname

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
)

// Resource is a typed client of one kind in one namespace (client.CoreV1().Secrets(ns), ...).
type Resource[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Informer returns an informer of the object called name that r lists and watches; example
// is an object of its kind, what names it in the informer's logs ("secret ns/name").
func Informer[L runtime.Object](client kubernetes.Interface, r Resource[L], name string, example runtime.Object, what string) toolscache.SharedIndexInformer {
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			return r.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			return r.Watch(ctx, opts)
		},
	}
	return toolscache.NewSharedIndexInformerWithOptions(toolscache.ToListWatcherWithWatchListSemantics(lw, client), example,
		toolscache.SharedIndexInformerOptions{ObjectDescription: what})
}
