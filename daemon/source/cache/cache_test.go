package cache

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mt "github.com/edgegate/edgegate/daemon/model/modeltest"
)

func sampleState() State {
	return State{
		SavedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC),
		Services: []*v1.Service{
			mt.Service("default", "web", "10.96.0.10", mt.Port("http", v1.ProtocolTCP, 80, 8080, 30080)),
		},
		EndpointSlices: []*discovery.EndpointSlice{
			mt.Slice("default", "web-1", "web", "http", v1.ProtocolTCP, 8080, mt.EP("10.244.1.5", mt.OnNode("n1"))),
		},
		Nodes: []*v1.Node{{
			ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec:       v1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24"}},
			Status:     v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.1.11"}}},
		}},
	}
}

func loadsAs(t *testing.T, f *File, want State) {
	t.Helper()
	got, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("loaded state (-saved +loaded):\n%s", diff)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	f := NewFile(filepath.Join(t.TempDir(), "state")) // the directory is created on save
	want := sampleState()
	if err := f.Save(want); err != nil {
		t.Fatal(err)
	}
	loadsAs(t, f, want)
	// Only the cache file is left behind: the temporary file was renamed over it.
	entries, err := os.ReadDir(filepath.Dir(f.Path()))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != FileName {
		t.Errorf("state directory holds %v, want only %s", entries, FileName)
	}
	if fi, _ := os.Stat(f.Path()); fi.Mode().Perm() != 0o600 {
		t.Errorf("cache file mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestFileIsTheEncodersDocument: the file is written in pieces, the state's bytes as
// they are, and reads exactly as json.Encoder would have written the whole document.
func TestFileIsTheEncodersDocument(t *testing.T) {
	f := NewFile(t.TempDir())
	st := sampleState()
	st.Services[0].Annotations = map[string]string{"note": "<a & b>"} // escaped alike
	if err := f.Save(st); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(stateBody{Services: st.Services, EndpointSlices: st.EndpointSlices, Nodes: st.Nodes})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	doc := document{APIVersion: apiVersion, Kind: kind, SavedAt: st.SavedAt, SHA256: checksum(body), State: body}
	if err := json.NewEncoder(&want).Encode(doc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("file:\n%s\njson.Encoder:\n%s", got, want.Bytes())
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := NewFile(t.TempDir()).Load()
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrCorrupt) {
		t.Errorf("Load of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestLoadRefusesDamagedFiles(t *testing.T) {
	f := NewFile(t.TempDir())
	if err := f.Save(sampleState()); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(f.Path())
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func([]byte) []byte{
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
		"empty":     func([]byte) []byte { return nil },
		// A flipped digit in an address still parses as JSON and as an address.
		"bit flip": func(b []byte) []byte { return bytes.Replace(b, []byte("10.244.1.5"), []byte("10.244.1.7"), 1) },
		"wrong kind": func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"kind":"ClusterState"`), []byte(`"kind":"Other"`), 1)
		},
		"not json": func([]byte) []byte { return []byte("\x00\x01garbage") },
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(f.Path(), damage(bytes.Clone(good)), 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := f.Load()
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load: %v, want ErrCorrupt", err)
			}
			if len(st.Services)+len(st.EndpointSlices)+len(st.Nodes) != 0 {
				t.Errorf("a corrupt file returned objects: %+v", st)
			}
		})
	}
}

func TestLoadRefusesNamelessObjects(t *testing.T) {
	f := NewFile(t.TempDir())
	st := sampleState()
	st.Services[0].Name = ""
	if err := f.Save(st); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Load(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "services[0]") {
		t.Errorf("Load: %v, want ErrCorrupt naming services[0]", err)
	}
}

// TestLoadReadsEarlierLayout: builds before the checksum followed the state wrote it first;
// their files load (an update keeps the cache of the build it replaces), and so would this
// build's files with theirs (a rollback).
func TestLoadReadsEarlierLayout(t *testing.T) {
	f := NewFile(t.TempDir())
	want := sampleState()
	body, err := json.Marshal(stateBody{Services: want.Services, EndpointSlices: want.EndpointSlices, Nodes: want.Nodes})
	if err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"savedAt":"2026-03-01T12:00:00Z","sha256":%q,"state":%s}`+"\n", apiVersion, kind, checksum(body), body)
	if err := os.WriteFile(f.Path(), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	loadsAs(t, f, want)
}

// BenchmarkSave is one save of the state make bench's 10,000 Services give; B/op is what a
// save leaves for the garbage collector (the encoding's bytes are written as they come).
func BenchmarkSave(b *testing.B) {
	st := State{SavedAt: time.Now()}
	for _, o := range mt.BenchObjects(10000, 10) {
		switch o := o.(type) {
		case *v1.Service:
			st.Services = append(st.Services, o)
		case *discovery.EndpointSlice:
			st.EndpointSlices = append(st.EndpointSlices, o)
		}
	}
	f := NewFile(b.TempDir())
	b.ReportAllocs()
	for b.Loop() {
		if err := f.Save(st); err != nil {
			b.Fatal(err)
		}
	}
}
