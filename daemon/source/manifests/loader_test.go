package manifests

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// service returns a valid Service manifest; port picks its version so a test can tell an
// update from a kept last good version.
func service(name, clusterIP, port string) string {
	return "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + name + "\nspec:\n  clusterIP: " + clusterIP +
		"\n  ports:\n  - port: " + port + "\n"
}

func slice(name, svc, addr string) string {
	return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: " + name +
		"\n  labels:\n    kubernetes.io/service-name: " + svc + "\naddressType: IPv4\nendpoints:\n- addresses: [" + addr + "]\n"
}

func docs(ds ...string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(strings.Join(ds, "---\n"))}
}

// state renders a load as "ns/name:port" for Services and "ns/name:address" for slices.
func state(svcs []*v1.Service, eps []*discovery.EndpointSlice) []string {
	var out []string
	for _, s := range svcs {
		out = append(out, "svc "+s.Namespace+"/"+s.Name+":"+strconv.Itoa(int(s.Spec.Ports[0].Port)))
	}
	for _, s := range eps {
		out = append(out, "eps "+s.Namespace+"/"+s.Name+":"+s.Endpoints[0].Addresses[0])
	}
	return out
}

// step is one load of a sequence: the directory's content and what must be in effect after it.
type step struct {
	name     string
	files    fstest.MapFS
	want     []string
	problems []string
}

func runSteps(t *testing.T, steps []step) {
	t.Helper()
	fsys := fstest.MapFS{}
	l := NewLoader(fsys)
	for _, s := range steps {
		clear(fsys)
		for k, v := range s.files {
			fsys[k] = v
		}
		svcs, eps, problems := l.Load()
		if diff := cmp.Diff(s.want, state(svcs, eps)); diff != "" {
			t.Errorf("%s: objects (-want +got):\n%s", s.name, diff)
		}
		if diff := cmp.Diff(s.problems, problemStrings(problems)); diff != "" {
			t.Errorf("%s: problems (-want +got):\n%s", s.name, diff)
		}
	}
}

func TestLoaderKeepsLastGood(t *testing.T) {
	web := service("web", "10.96.0.10", "80")
	api := service("api", "10.96.0.11", "80")
	webSlice := slice("web-1", "web", "10.200.2.11")
	good := step{
		name:  "first load",
		files: fstest.MapFS{"a.yaml": docs(web, webSlice), "b.yaml": docs(api), "notes.txt": docs("not yaml: ["), ".a.yaml.swp": docs("x")},
		want:  []string{"svc default/api:80", "svc default/web:80", "eps default/web-1:10.200.2.11"},
	}
	runSteps(t, []step{
		good,
		{
			name: "invalid object keeps its last good version, its valid neighbour updates",
			files: fstest.MapFS{
				"a.yaml": docs(service("web", "10.96.0.10", "0"), slice("web-1", "web", "10.200.2.12")),
				"b.yaml": docs(api),
			},
			want:     []string{"svc default/api:80", "svc default/web:80", "eps default/web-1:10.200.2.12"},
			problems: []string{"a.yaml: Service default/web: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535"},
		},
		{
			name: "still invalid, still kept",
			files: fstest.MapFS{
				"a.yaml": docs(strings.Replace(web, "ports:", "prots:", 1), slice("web-1", "web", "10.200.2.12")),
				"b.yaml": docs(api),
			},
			want: []string{"svc default/api:80", "svc default/web:80", "eps default/web-1:10.200.2.12"},
			problems: []string{`a.yaml: Service default/web: unknown field "spec.prots"`,
				"a.yaml: Service default/web: spec.ports: Required value: a service with a cluster IP needs at least one port"},
		},
		{
			name:  "fixed: the new version is taken",
			files: fstest.MapFS{"a.yaml": docs(service("web", "10.96.0.10", "81"), webSlice), "b.yaml": docs(api)},
			want:  []string{"svc default/api:80", "svc default/web:81", "eps default/web-1:10.200.2.11"},
		},
		{
			name:     "unparsable file keeps all of its objects",
			files:    fstest.MapFS{"a.yaml": docs("apiVersion: v1\nkind: [Service\n"), "b.yaml": docs(service("api", "10.96.0.11", "82"))},
			want:     []string{"svc default/api:82", "svc default/web:81", "eps default/web-1:10.200.2.11"},
			problems: []string{"a.yaml: document at line 1: yaml: line 2: did not find expected ',' or ']'"},
		},
		{
			name: "one broken document keeps the objects it may hide, the rest update",
			files: fstest.MapFS{
				"a.yaml": docs(service("web", "10.96.0.10", "83"), "kind: Service\nmetadata: {name: web-1}\n"),
				"b.yaml": docs(service("api", "10.96.0.11", "82")),
			},
			want:     []string{"svc default/api:82", "svc default/web:83", "eps default/web-1:10.200.2.11"},
			problems: []string{"a.yaml: Service default/web-1: apiVersion and kind are required"},
		},
		{
			name:  "an object removed from a file that parses is gone",
			files: fstest.MapFS{"a.yaml": docs(service("web", "10.96.0.10", "83")), "b.yaml": docs(service("api", "10.96.0.11", "82"))},
			want:  []string{"svc default/api:82", "svc default/web:83"},
		},
		{
			name:  "a deleted file drops its objects",
			files: fstest.MapFS{"b.yaml": docs(service("api", "10.96.0.11", "82"))},
			want:  []string{"svc default/api:82"},
		},
		{
			name:     "an invalid object never loaded before stays absent",
			files:    fstest.MapFS{"a.yaml": docs(service("web", "10.96.0.10", "0")), "b.yaml": docs(service("api", "10.96.0.11", "82"))},
			want:     []string{"svc default/api:82"},
			problems: []string{"a.yaml: Service default/web: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535"},
		},
	})
}

func TestLoaderMovedObject(t *testing.T) {
	runSteps(t, []step{
		{
			name:  "web lives in a.yaml",
			files: fstest.MapFS{"a.yaml": docs(service("web", "10.96.0.10", "80"))},
			want:  []string{"svc default/web:80"},
		},
		{
			name:     "moved to b.yaml and broken on the way: the version in effect stays",
			files:    fstest.MapFS{"b.yaml": docs(service("web", "10.96.0.10", "0"))},
			want:     []string{"svc default/web:80"},
			problems: []string{"b.yaml: Service default/web: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535"},
		},
		{
			name:  "fixed in b.yaml",
			files: fstest.MapFS{"b.yaml": docs(service("web", "10.96.0.10", "81"))},
			want:  []string{"svc default/web:81"},
		},
	})
}

func TestLoaderDuplicates(t *testing.T) {
	runSteps(t, []step{
		{
			name: "the first file by name wins",
			files: fstest.MapFS{
				"b.yaml": docs(service("web", "10.96.0.10", "82")),
				"a.yaml": docs(service("web", "10.96.0.10", "81")),
			},
			want:     []string{"svc default/web:81"},
			problems: []string{"b.yaml: Service default/web: defined more than once: the definition in a.yaml at line 1 is used"},
		},
		{
			name:     "within one file the first document wins",
			files:    fstest.MapFS{"a.yaml": docs(service("web", "10.96.0.10", "81"), service("web", "10.96.0.10", "82"))},
			want:     []string{"svc default/web:81"},
			problems: []string{"a.yaml: Service default/web: defined more than once: the definition in a.yaml at line 1 is used"},
		},
		{
			name: "other namespaces and kinds are other objects",
			files: fstest.MapFS{
				"a.yaml": docs(service("web", "10.96.0.10", "81"), slice("web", "web", "10.200.2.11")),
				"b.yaml": docs(strings.Replace(service("web", "10.96.0.10", "82"), "name: web", "name: web\n  namespace: shop", 1)),
			},
			want: []string{"svc default/web:81", "svc shop/web:82", "eps default/web:10.200.2.11"},
		},
	})
	_, _, problems := NewLoader(fstest.MapFS{"a.yaml": docs(service("web", "10.96.0.10", "81"), service("web", "10.96.0.10", "82"))}).Load()
	if len(problems) != 1 || !errors.Is(problems[0], ErrDuplicate) {
		t.Errorf("duplicate problem %v does not wrap ErrDuplicate", problems)
	}
}

// failingFS fails to open the names in fail with err.
type failingFS struct {
	files fstest.MapFS
	fail  map[string]bool
	err   error
}

func (f failingFS) Open(name string) (fs.File, error) {
	if f.fail[name] {
		return nil, &fs.PathError{Op: "open", Path: name, Err: f.err}
	}
	return f.files.Open(name)
}

func TestLoaderReadErrors(t *testing.T) {
	files := fstest.MapFS{"a.yaml": docs(service("web", "10.96.0.10", "80")), "b.yaml": docs(service("api", "10.96.0.11", "80"))}
	fsys := failingFS{files: files, fail: map[string]bool{}, err: fs.ErrPermission}
	l := NewLoader(fsys)
	want := []string{"svc default/api:80", "svc default/web:80"}
	if svcs, eps, problems := l.Load(); !cmp.Equal(want, state(svcs, eps)) || len(problems) != 0 {
		t.Fatalf("first load: %v %v", state(svcs, eps), problems)
	}

	files["b.yaml"] = docs(service("api", "10.96.0.11", "81"))
	fsys.fail["a.yaml"] = true
	svcs, eps, problems := l.Load()
	if diff := cmp.Diff([]string{"svc default/api:81", "svc default/web:80"}, state(svcs, eps)); diff != "" {
		t.Errorf("unreadable file must keep its objects (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a.yaml: read: open a.yaml: permission denied"}, problemStrings(problems)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}

	fsys.fail["."] = true
	svcs, eps, problems = l.Load()
	if diff := cmp.Diff([]string{"svc default/api:81", "svc default/web:80"}, state(svcs, eps)); diff != "" {
		t.Errorf("unreadable directory must keep everything (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"read manifests directory: open .: permission denied"}, problemStrings(problems)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestLoaderDefaultNamespace(t *testing.T) {
	svcs, eps, problems := NewLoader(fstest.MapFS{"a.yaml": docs(service("web", "10.96.0.10", "80"), slice("web-1", "web", "10.200.2.11"))}).Load()
	if len(problems) != 0 || len(svcs) != 1 || len(eps) != 1 {
		t.Fatalf("load: %v %v %v", svcs, eps, problems)
	}
	if svcs[0].Namespace != DefaultNamespace || eps[0].Namespace != DefaultNamespace {
		t.Errorf("namespaces %q %q, want %q", svcs[0].Namespace, eps[0].Namespace, DefaultNamespace)
	}
}

// A Service that fails validation with no good version is not skipped: it is handed on as
// refused (its addresses refuse everyone), until a good version replaces it; a bad version
// of a good Service keeps the good one.
func TestLoaderRefusesServicesWithoutAGoodVersion(t *testing.T) {
	const good = `apiVersion: v1
kind: Service
metadata: {name: web}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: %d}]}
`
	const bad = `apiVersion: v1
kind: Service
metadata: {name: web}
spec: {clusterIP: 10.96.0.10, ports: [{name: HTTP_1, port: %d}]}
`
	fsys := fstest.MapFS{"web.yaml": {Data: fmt.Appendf(nil, bad, 80)}}
	l := NewLoader(fsys)
	load := func() (taken, refused []string) {
		svcs, _, _ := l.Load()
		for _, s := range svcs {
			taken = append(taken, fmt.Sprintf("%s:%d", s.Name, s.Spec.Ports[0].Port))
		}
		for _, s := range l.Refused() {
			refused = append(refused, fmt.Sprintf("%s:%d", s.Name, s.Spec.Ports[0].Port))
		}
		return taken, refused
	}
	steps := []struct {
		data           string
		taken, refused []string
	}{
		{fmt.Sprintf(bad, 80), nil, []string{"web:80"}},
		{fmt.Sprintf(bad, 81), nil, []string{"web:81"}}, // still no good version: the newest bad one
		{fmt.Sprintf(good, 82), []string{"web:82"}, nil},
		{fmt.Sprintf(bad, 83), []string{"web:82"}, nil}, // the last good version stays
	}
	for i, s := range steps {
		fsys["web.yaml"] = &fstest.MapFile{Data: []byte(s.data)}
		taken, refused := load()
		if !slices.Equal(taken, s.taken) || !slices.Equal(refused, s.refused) {
			t.Errorf("step %d: taken %v refused %v, want %v and %v", i, taken, refused, s.taken, s.refused)
		}
	}
}
