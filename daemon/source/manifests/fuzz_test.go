package manifests

import (
	"io/fs"
	"testing"

	discovery "k8s.io/api/discovery/v1"

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
			if e.slice.Namespace == "" {
				t.Fatalf("slice %s without namespace", e.slice.Name)
			}
			if errs := model.ValidateEndpointSlice(e.slice); len(errs) > 0 {
				t.Fatalf("accepted slice %s fails validation: %v", e.slice.Name, errs)
			}
			eps = append(eps, e.slice)
		}
		for _, e := range r.entries {
			if e.svc == nil {
				continue
			}
			if e.svc.Namespace == "" {
				t.Fatalf("service %s without namespace", e.svc.Name)
			}
			if errs := model.ValidateService(e.svc); len(errs) > 0 {
				t.Fatalf("accepted service %s fails validation: %v", e.svc.Name, errs)
			}
			for _, sp := range model.ServicePorts(e.svc, eps) {
				if sp.Port == 0 {
					t.Fatalf("service %s converted to port 0", e.svc.Name)
				}
			}
		}
	})
}
