package manifests

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A valid pair in YAML: Service default/web at 10.96.0.10:80 and its slice with one backend.
const webService = `apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 10.96.0.10
  ports:
  - port: 80
    targetPort: 8080
`

const webSlice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- port: 8080
endpoints:
- addresses: [10.200.2.11]
`

// keys lists what a file decoded to, as "Kind ns/name" strings in document order.
func keys(r *fileResult) []string {
	var out []string
	for _, e := range r.entries {
		out = append(out, e.key.kind+" "+e.key.namespace+"/"+e.key.name)
	}
	return out
}

func problemStrings[E error](problems []E) []string {
	var out []string
	for _, p := range problems {
		out = append(out, p.Error())
	}
	return out
}

func TestDecodeFile(t *testing.T) {
	tests := []struct {
		name, file, data string
		want             []string // decoded objects
		problems         []string
		invalid          int // objects identified but refused
		broken           bool
	}{
		{
			name: "multi-document YAML with empty documents and comments",
			file: "web.yaml",
			data: "---\n# the web service\n" + webService + "--- # its endpoints\n" + webSlice + "---\n\n---\n",
			want: []string{"Service default/web", "EndpointSlice default/web-1"},
		},
		{
			name: "namespace kept when given",
			file: "web.yml",
			data: strings.Replace(webService, "name: web\n", "name: web\n  namespace: shop\n", 1),
			want: []string{"Service shop/web"},
		},
		{
			name: "JSON object",
			file: "web.json",
			data: `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
			        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}`,
			want: []string{"Service default/web"},
		},
		{
			name: "JSON stream",
			file: "web.json",
			data: `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}
{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api"}, "spec": {"clusterIP": "10.96.0.11", "ports": [{"port": 80}]}}`,
			want: []string{"Service default/web", "Service default/api"},
		},
		{
			name: "JSON List",
			file: "all.json",
			data: `{"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [
				{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}},
				{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
				 "addressType": "IPv4", "endpoints": [{"addresses": ["10.200.2.11"]}]}]}`,
			want: []string{"Service default/web", "EndpointSlice default/web-1"},
		},
		{
			name: "YAML List as kubectl get -o yaml writes it",
			file: "all.yaml",
			data: "apiVersion: v1\nitems:\n" + indentItem(webService) + indentItem(webSlice) + "kind: List\nmetadata:\n  resourceVersion: \"\"\n",
			want: []string{"Service default/web", "EndpointSlice default/web-1"},
		},
		{
			name:     "unknown field named with its path",
			file:     "services.yaml",
			data:     strings.Replace(webService, "  ports:", "  prots: []\n  ports:", 1),
			problems: []string{`services.yaml: Service default/web: unknown field "spec.prots"`},
			invalid:  1,
		},
		{
			name:     "field names are case-sensitive",
			file:     "services.yaml",
			data:     strings.Replace(webService, "  - port: 80", "  - Port: 80", 1),
			problems: []string{`services.yaml: Service default/web: unknown field "spec.ports[0].Port"`, "services.yaml: Service default/web: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535"},
			invalid:  2,
		},
		{
			name:     "validation error",
			file:     "services.yaml",
			data:     strings.Replace(webService, "port: 80", "port: 0", 1),
			problems: []string{"services.yaml: Service default/web: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535"},
			invalid:  1,
		},
		{
			name:     "wrong type",
			file:     "services.yaml",
			data:     strings.Replace(webService, "port: 80", "port: http", 1),
			problems: []string{"services.yaml: Service default/web: json: cannot unmarshal string into Go struct field ServicePort.spec.ports.port of type int32"},
			invalid:  1,
		},
		{
			name:     "duplicate key is charged to its object with the file's line number",
			file:     "web.yaml",
			data:     webSlice + "---\n" + webService + "    port: 81\n",
			want:     []string{"EndpointSlice default/web-1"},
			problems: []string{`web.yaml: Service default/web: yaml: unmarshal errors: line 22: key "port" already set in map`},
			invalid:  1,
		},
		{
			name:     "syntax error leaves the other documents readable",
			file:     "web.yaml",
			data:     webService + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: api\n   namespace: x\n---\n" + webSlice,
			want:     []string{"Service default/web", "EndpointSlice default/web-1"},
			problems: []string{"web.yaml: document at line 11: yaml: line 15: mapping values are not allowed in this context"},
			broken:   true,
		},
		{
			name:     "unknown kind skipped",
			file:     "mixed.yaml",
			data:     "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec: {}\n---\n" + webService,
			want:     []string{"Service default/web"},
			problems: []string{"mixed.yaml: Deployment default/web: apiVersion apps/v1: not a v1 Service or discovery.k8s.io/v1 EndpointSlice, skipped"},
		},
		{
			name:     "older EndpointSlice API is an unknown kind",
			file:     "old.yaml",
			data:     strings.Replace(webSlice, "discovery.k8s.io/v1", "discovery.k8s.io/v1beta1", 1),
			problems: []string{"old.yaml: EndpointSlice default/web-1: apiVersion discovery.k8s.io/v1beta1: not a v1 Service or discovery.k8s.io/v1 EndpointSlice, skipped"},
		},
		{
			name:     "kind missing",
			file:     "web.yaml",
			data:     strings.Replace(webService, "kind: Service\n", "", 1),
			problems: []string{"web.yaml: document at line 1: apiVersion and kind are required"},
			broken:   true,
		},
		{
			name:     "not an object",
			file:     "web.yaml",
			data:     "- a\n- b\n",
			problems: []string{"web.yaml: document at line 1: document is not an object"},
			broken:   true,
		},
		{
			name:     "misspelled items",
			file:     "all.yaml",
			data:     "apiVersion: v1\nkind: List\nitmes: []\n",
			problems: []string{`all.yaml: List at line 1: unknown field "itmes"`},
			broken:   true,
		},
		{
			name: "JSON syntax error after a good value",
			file: "web.json",
			data: `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}}
{"apiVersion": "v1",
 "kind": "Service",,
}`,
			want:     []string{"Service default/web"},
			problems: []string{"web.json: document at line 2: json: line 3: invalid character ',' looking for beginning of object key string"},
			broken:   true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := decodeFile(tc.file, []byte(tc.data))
			if diff := cmp.Diff(tc.want, keys(r)); diff != "" {
				t.Errorf("objects (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.problems, problemStrings(r.problems)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if len(r.invalid) != tc.invalid || r.broken != tc.broken {
				t.Errorf("invalid %d broken %v, want %d %v", len(r.invalid), r.broken, tc.invalid, tc.broken)
			}
		})
	}
}

func indentItem(doc string) string {
	lines := strings.Split(strings.TrimSuffix(doc, "\n"), "\n")
	for i := range lines {
		if i == 0 {
			lines[i] = "- " + lines[i]
		} else {
			lines[i] = "  " + lines[i]
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestObjectErrorFields(t *testing.T) {
	r := decodeFile("services.yaml", []byte(strings.Replace(webService, "port: 80", "port: 70000", 1)))
	if len(r.problems) != 1 {
		t.Fatalf("problems: %v", r.problems)
	}
	got := r.problems[0]
	want := &ObjectError{File: "services.yaml", Line: 1, Kind: "Service", Namespace: "default", Name: "web", Field: "spec.ports[0].port"}
	if got.File != want.File || got.Line != want.Line || got.Kind != want.Kind || got.Namespace != want.Namespace ||
		got.Name != want.Name || got.Field != want.Field || got.Object() != "default/web" {
		t.Errorf("got %+v, want %+v", got, want)
	}
	unknown := decodeFile("x.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"))
	if len(unknown.problems) != 1 || !errors.Is(unknown.problems[0], ErrUnknownKind) {
		t.Errorf("unknown kind problem %v does not wrap ErrUnknownKind", unknown.problems)
	}
}

func TestDecodeCapsProblems(t *testing.T) {
	var dump strings.Builder
	for i := range 60 {
		fmt.Fprintf(&dump, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c%d}\n", i)
	}
	dump.WriteString("---\n" + webService)
	r := decodeFile("dump.yaml", []byte(dump.String()))
	if diff := cmp.Diff([]string{"Service default/web"}, keys(r)); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	if len(r.problems) != maxProblemsPerFile+1 {
		t.Fatalf("got %d problems, want %d", len(r.problems), maxProblemsPerFile+1)
	}
	if got, want := r.problems[maxProblemsPerFile].Error(), "dump.yaml: 10 more problems not shown"; got != want {
		t.Errorf("last problem %q, want %q", got, want)
	}
}
