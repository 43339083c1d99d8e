package node_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/edgegate/edgegate/daemon/node"
	source "github.com/edgegate/edgegate/daemon/source/cluster"
	"github.com/edgegate/edgegate/lab/cluster"
	"github.com/edgegate/edgegate/lab/cluster/clustertest"
)

const deployDir = "../../deploy"

// deployKinds are the kinds deploy/'s files may hold.
var deployKinds = []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Secret", "ServiceAccount", "Namespace"}

// manifests decodes every document of a deploy/ file strictly into its typed object.
func manifests(t *testing.T, file string) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	for doc := range strings.SplitSeq(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if !slices.Contains(deployKinds, meta.Kind) {
			t.Fatalf("%s: unexpected kind %q", file, meta.Kind)
		}
		o, err := scheme.Scheme.New(meta.GroupVersionKind())
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
			t.Fatalf("%s: %s: %v", file, meta.Kind, err)
		}
		out = append(out, o)
	}
	return out
}

// The example token is well formed and lands in the group the roles are bound to, and the
// ServiceAccount variant binds roles that exist.
func TestDeployManifestsAgree(t *testing.T) {
	roles := map[string]bool{}
	var boundGroups []string
	for _, o := range manifests(t, "rbac.yaml") {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			roles["ClusterRole/"+o.Name] = true
		case *rbacv1.Role:
			// The node Lease in kube-node-lease; the LoadBalancer pools ConfigMap and the
			// allocator's Lease in kube-system (daemon/lb/alloc).
			if o.Namespace != v1.NamespaceNodeLease && o.Namespace != metav1.NamespaceSystem {
				t.Errorf("Role %s is in %q; the gateway's Roles are in %s and %s", o.Name, o.Namespace, v1.NamespaceNodeLease, metav1.NamespaceSystem)
			}
			roles["Role/"+o.Name] = true
		case *rbacv1.ClusterRoleBinding:
			boundGroups = append(boundGroups, o.Subjects[0].Name)
		case *rbacv1.RoleBinding:
			boundGroups = append(boundGroups, o.Subjects[0].Name)
		}
	}
	if len(boundGroups) != 3 || boundGroups[0] != boundGroups[1] || boundGroups[0] != boundGroups[2] {
		t.Fatalf("rbac.yaml binds %v, want one group three times", boundGroups)
	}
	secret := manifests(t, "bootstrap-token.yaml")[0].(*v1.Secret)
	id, sec := secret.StringData["token-id"], secret.StringData["token-secret"]
	if !regexp.MustCompile(`^[a-z0-9]{6}$`).MatchString(id) || !regexp.MustCompile(`^[a-z0-9]{16}$`).MatchString(sec) ||
		secret.Name != "bootstrap-token-"+id || secret.Namespace != "kube-system" || secret.Type != "bootstrap.kubernetes.io/token" {
		t.Errorf("bootstrap token Secret %s/%s type %s id %q secret %q", secret.Namespace, secret.Name, secret.Type, id, sec)
	}
	if g := secret.StringData["auth-extra-groups"]; g != boundGroups[0] {
		t.Errorf("the token's extra group %q is not the bound group %q", g, boundGroups[0])
	}
	for _, o := range manifests(t, "serviceaccount.yaml") {
		var ref rbacv1.RoleRef
		switch o := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			ref = o.RoleRef
		case *rbacv1.RoleBinding:
			ref = o.RoleRef
		default:
			continue
		}
		if !roles[ref.Kind+"/"+ref.Name] {
			t.Errorf("serviceaccount.yaml binds %s/%s, which rbac.yaml does not define", ref.Kind, ref.Name)
		}
	}
}

// create makes deploy/ objects with the admin client.
func create(t *testing.T, cs kubernetes.Interface, objs []any) {
	t.Helper()
	ctx := t.Context()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *v1.Secret:
			_, err = cs.CoreV1().Secrets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *v1.ServiceAccount:
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *v1.Namespace:
			_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
}

// gatewayClient builds the gateway's client the way the daemon does, from a token file and
// the cluster's CA.
func gatewayClient(t *testing.T, c *cluster.Cluster, token string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(gatewayConfig(t, c, token))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// gatewayConfig is the gateway's client configuration exactly as the daemon builds it: API
// server URL, token file, CA.
func gatewayConfig(t *testing.T, c *cluster.Cluster, token string) *rest.Config {
	t.Helper()
	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, c.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := source.Config{APIServer: c.Server, TokenFile: tokenFile, CAFile: caFile}.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestDeployIdentities joins with deploy/'s two identities against a real API server: the
// example bootstrap token Secret and the ServiceAccount. Each can do what the gateway does
// and nothing it does not.
func TestDeployIdentities(t *testing.T) {
	c := clustertest.Start(t, cluster.Options{})
	ctx := t.Context()
	create(t, c.Client, manifests(t, "rbac.yaml"))
	create(t, c.Client, manifests(t, "bootstrap-token.yaml"))
	sa := manifests(t, "serviceaccount.yaml")
	create(t, c.Client, sa)
	secret := manifests(t, "bootstrap-token.yaml")[0].(*v1.Secret)
	bootstrapToken := secret.StringData["token-id"] + "." + secret.StringData["token-secret"]
	// No token controller runs here: ask for a ServiceAccount token directly.
	account := sa[1].(*v1.ServiceAccount)
	tr, err := c.Client.CoreV1().ServiceAccounts(account.Namespace).CreateToken(ctx, account.Name, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, token := range map[string]string{"bootstrap token": bootstrapToken, "service account": tr.Status.Token} {
		t.Run(name, func(t *testing.T) {
			gw := gatewayClient(t, c, token)
			review, err := gw.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			u := review.Status.UserInfo
			if name == "bootstrap token" && (u.Username != "system:bootstrap:"+secret.StringData["token-id"] ||
				!slices.Contains(u.Groups, secret.StringData["auth-extra-groups"])) {
				t.Errorf("the bootstrap token authenticates as %q in %v", u.Username, u.Groups)
			}
			if _, err := gw.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{}); err != nil {
				t.Errorf("list endpointslices: %v", err)
			}
			// The whole membership: register, post status, create and renew the Lease.
			m := node.NewMember(gw, node.Config{Name: "gw-" + strings.ReplaceAll(name, " ", "-"), RenewInterval: 200 * time.Millisecond},
				func() bool { return true }, nil)
			mctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); m.Run(mctx) }()
			deadline := time.Now().Add(20 * time.Second)
			for st := m.Status(); !st.Ready || st.LastLeaseRenew.IsZero() || st.LastError != ""; st = m.Status() {
				if time.Now().After(deadline) {
					t.Errorf("membership with this identity: %+v", st)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			stop()
			<-done
			// What the gateway never needs is refused.
			if _, err := gw.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); err == nil {
				t.Error("the gateway may list Secrets")
			}
			if _, err := gw.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{}); err == nil {
				t.Error("the gateway may list kube-system's Leases (leader election)")
			}
		})
	}
}
