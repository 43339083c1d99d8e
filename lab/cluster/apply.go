package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// ApplyFile creates every object of a multi-document YAML file (deploy/'s manifests, a
// demo's Services), as `kubectl create -f` would, and returns what it created. Objects that
// exist already are left as they are. The kinds are those the gateway's deployment and the
// demos use: Namespace, ServiceAccount, Secret, RBAC, Service (its status too, so a
// LoadBalancer's ingress IPs survive) and EndpointSlice.
func ApplyFile(ctx context.Context, client kubernetes.Interface, path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	objs, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return Apply(ctx, client, objs...)
}

// Decode reads the typed objects of a multi-document YAML or JSON stream.
func Decode(b []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []runtime.Object
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			// Comment-only documents decode to nothing worth reporting.
			if runtime.IsMissingKind(err) && len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, obj)
	}
}

// Apply creates objs in order (see ApplyFile) and returns their kind/namespace/name.
func Apply(ctx context.Context, client kubernetes.Interface, objs ...runtime.Object) ([]string, error) {
	var created []string
	for _, obj := range objs {
		var err error
		switch o := obj.(type) {
		case *v1.Namespace:
			err = create(ctx, client.CoreV1().Namespaces(), o)
		case *v1.ServiceAccount:
			err = create(ctx, client.CoreV1().ServiceAccounts(o.Namespace), o)
		case *v1.Secret:
			err = create(ctx, client.CoreV1().Secrets(o.Namespace), o)
		case *rbacv1.ClusterRole:
			err = create(ctx, client.RbacV1().ClusterRoles(), o)
		case *rbacv1.ClusterRoleBinding:
			err = create(ctx, client.RbacV1().ClusterRoleBindings(), o)
		case *rbacv1.Role:
			err = create(ctx, client.RbacV1().Roles(o.Namespace), o)
		case *rbacv1.RoleBinding:
			err = create(ctx, client.RbacV1().RoleBindings(o.Namespace), o)
		case *v1.Service:
			err = createService(ctx, client, o)
		case *discovery.EndpointSlice:
			err = create(ctx, client.DiscoveryV1().EndpointSlices(o.Namespace), o)
		default:
			return created, fmt.Errorf("apply: %T is not a kind this helper creates", obj)
		}
		name := describe(obj)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return created, fmt.Errorf("create %s: %w", name, err)
		}
		created = append(created, name)
	}
	return created, nil
}

// create creates o through c, a typed client of o's kind.
func create[T any](ctx context.Context, c interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
}, o T) error {
	_, err := c.Create(ctx, o, metav1.CreateOptions{})
	return err
}

// describe names an object as Apply reports it: its kind, then its namespace/name, or its
// name alone for a cluster-scoped object.
func describe(obj runtime.Object) string {
	o := obj.(metav1.Object)
	name := o.GetName()
	if o.GetNamespace() != "" {
		name = o.GetNamespace() + "/" + name
	}
	return reflect.TypeOf(obj).Elem().Name() + " " + name
}

// createService creates a Service and then writes its status, which a create ignores: a
// LoadBalancer's ingress IPs are what a load-balancer controller would have written.
func createService(ctx context.Context, client kubernetes.Interface, svc *v1.Service) error {
	status := svc.Status
	got, err := client.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil || len(status.LoadBalancer.Ingress) == 0 {
		return err
	}
	got.Status = status
	_, err = client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{})
	return err
}

// stripComments drops the YAML comment lines of a document.
func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}
