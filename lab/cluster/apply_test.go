package cluster

import (
	"os"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// The deployment's manifests and the demo's Services decode into the typed objects Apply
// creates, comments and all.
func TestDecodeDeployAndDemo(t *testing.T) {
	counts := map[string]int{}
	for _, f := range []string{"../../deploy/rbac.yaml", "../../daemon/source/manifests/default/demo.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *rbacv1.ClusterRole:
				counts["ClusterRole"]++
			case *rbacv1.ClusterRoleBinding, *rbacv1.Role, *rbacv1.RoleBinding:
				counts["binding or role"]++
			case *v1.Service:
				counts["Service"]++
				if o.Name == "web" && len(o.Status.LoadBalancer.Ingress) != 2 {
					t.Errorf("web: status.loadBalancer.ingress = %v, want the two demo IPs", o.Status.LoadBalancer.Ingress)
				}
			case *discovery.EndpointSlice:
				counts["EndpointSlice"]++
			default:
				t.Errorf("%s: unexpected %T", f, o)
			}
		}
	}
	if counts["ClusterRole"] != 1 || counts["Service"] < 2 || counts["EndpointSlice"] < 3 || counts["binding or role"] < 3 {
		t.Errorf("decoded %v", counts)
	}
	if _, err := Decode([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: banana}]}\n")); err == nil {
		t.Error("a Service with a non-numeric port decoded without error")
	}
}
