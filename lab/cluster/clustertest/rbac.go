package clustertest

import (
	"net/http"
	"strings"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/edgegate/edgegate/lab/cluster"
)

// Attributes turns a client's request into what RBAC authorizes, names included (roles
// may grant by name): the path's name, or a list's or watch's metadata.name field selector,
// as the API server reads it. Requests that are not for a resource (discovery, /version)
// report false.
func Attributes(req *http.Request) (authzv1.ResourceAttributes, bool) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var a authzv1.ResourceAttributes
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		a.Group, parts = parts[1], parts[3:]
	default:
		return a, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		a.Namespace, parts = parts[1], parts[2:]
	}
	a.Resource = parts[0]
	if len(parts) >= 2 {
		a.Name = parts[1]
	}
	if len(parts) >= 3 {
		a.Subresource = parts[2]
	}
	q := req.URL.Query()
	switch {
	case req.Method == http.MethodGet && q.Get("watch") == "true":
		a.Verb = "watch"
	case req.Method == http.MethodGet && a.Name != "":
		a.Verb = "get"
	case req.Method == http.MethodGet:
		a.Verb = "list"
	case req.Method == http.MethodPost:
		a.Verb = "create"
	case req.Method == http.MethodPut:
		a.Verb = "update"
	case req.Method == http.MethodPatch:
		a.Verb = "patch"
	case req.Method == http.MethodDelete:
		a.Verb = "delete"
	}
	if a.Name == "" && (a.Verb == "list" || a.Verb == "watch") {
		if sel, err := fields.ParseSelector(q.Get("fieldSelector")); err == nil {
			if name, ok := sel.RequiresExactMatch("metadata.name"); ok {
				a.Name = name
			}
		}
	}
	return a, true
}

// GatewayAllowed asks the API server (through admin) whether the gateway's identity,
// cluster.DefaultGatewayUser in group, may do a, and why.
func GatewayAllowed(t testing.TB, admin kubernetes.Interface, group string, a authzv1.ResourceAttributes) (bool, string) {
	t.Helper()
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: cluster.DefaultGatewayUser, Groups: []string{group, "system:authenticated"}, ResourceAttributes: &a,
	}}
	got, err := admin.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Status.Allowed, got.Status.Reason
}

// ApplyFile creates the objects of a manifest file (cluster.ApplyFile) with admin, logs
// what it created and fails t on an error.
func ApplyFile(t testing.TB, admin kubernetes.Interface, file string) {
	t.Helper()
	created, err := cluster.ApplyFile(t.Context(), admin, file)
	if err != nil {
		t.Fatalf("apply %s: %v", file, err)
	}
	t.Logf("applied %s: %s", file, strings.Join(created, ", "))
}
