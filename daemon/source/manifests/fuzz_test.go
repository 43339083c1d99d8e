package manifests

import (
	"io/fs"
	"testing"

	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/edgegate/edgegate/daemon/model"
)

// FuzzDecode feeds arbitrary bytes to the decoder of one file, as YAML and as JSON. It must
// not panic, every object it accepts must pass validation and convert, and every problem
// must render.
func FuzzDecode(f *testing.F) {
	demo, err := fs.ReadFile(Default(), "demo.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(demo, false)
	f.Add([]byte(webService+"---\n"+webSlice), false)
	f.Add([]byte("apiVersion: v1\nitems:\n"+indentItem(webService)+"kind: List\n"), false)
	f.Add([]byte(`{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
		"spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}]}`), true)
	f.Add([]byte(`{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "s", "labels": {"kubernetes.io/service-name": "web"}},
		"addressType": "IPv6", "endpoints": [{"addresses": ["fd00::1"]}], "ports": [{"port": 80}]}`), true)
	f.Add([]byte("a: [\n---\nkind: Service\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, isJSON bool) {
		name := "f.yaml"
		if isJSON {
			name = "f.json"
		}
		r := decodeFile(name, data)
		for _, p := range r.problems {
			if p.Err == nil || p.Error() == "" {
				t.Fatalf("empty problem %#v", p)
			}
		}
		var eps []*discovery.EndpointSlice
		for _, e := range r.entries {
			if e.slice == nil {
				continue
			}
			checkAccepted(t, "slice", e.slice, model.ValidateEndpointSlice)
			eps = append(eps, e.slice)
		}
		for _, e := range r.entries {
			if e.svc == nil {
				continue
			}
			checkAccepted(t, "service", e.svc, model.ValidateService)
			for _, sp := range model.ServicePorts(e.svc, eps) {
				if sp.Port == 0 {
					t.Fatalf("service %s converted to port 0", e.svc.Name)
				}
			}
		}
	})
}

// checkAccepted fails t unless an object the decoder accepted has a namespace and passes
// validate.
func checkAccepted[T interface {
	GetNamespace() string
	GetName() string
}](t *testing.T, kind string, o T, validate func(T) field.ErrorList) {
	t.Helper()
	if o.GetNamespace() == "" {
		t.Fatalf("%s %s without namespace", kind, o.GetName())
	}
	if errs := validate(o); len(errs) > 0 {
		t.Fatalf("accepted %s %s fails validation: %v", kind, o.GetName(), errs)
	}
}
