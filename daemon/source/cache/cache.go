// Package cache keeps the cluster state the gateway last synced (Services, EndpointSlices,
// Nodes) in one file on the persistent partition, so that after a reboot with the API server
// out of reach the gateway can program its rules from it until the API answers.
//
// The file is replaced atomically (temporary file, fsync, rename, fsync of the directory), so
// a power cut leaves either the old or the new state, and it carries a checksum of its state,
// so that a file damaged anyway is refused instead of programmed.
package cache

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// FileName is the cache file's name inside the state directory.
const FileName = "cluster-state.json"

// DefaultDir is where the firmware's persistent partition keeps daemon state.
const DefaultDir = "/var/lib/edgegate"

const (
	apiVersion = "edgegate.dev/v1"
	kind       = "ClusterState"
)

// ErrCorrupt marks a cache file that exists but cannot be used; callers log it and carry on
// without the cache.
var ErrCorrupt = errors.New("corrupt cluster state cache")

// State is the cluster state as last synced from the API server.
type State struct {
	// SavedAt is when the state was written (zero before it was).
	SavedAt        time.Time
	Services       []*v1.Service
	EndpointSlices []*discovery.EndpointSlice
	Nodes          []*v1.Node
}

// document is the file's layout. The state is kept as raw bytes so that the checksum covers
// exactly what is on disk. The checksum follows the state, whose bytes it is computed from
// while they are written (files of earlier builds have it before; the order of a JSON
// object's members does not matter to either reader).
type document struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	SavedAt    time.Time       `json:"savedAt"`
	State      json.RawMessage `json:"state"`
	SHA256     string          `json:"sha256"`
}

type stateBody struct {
	Services       []*v1.Service              `json:"services"`
	EndpointSlices []*discovery.EndpointSlice `json:"endpointSlices"`
	Nodes          []*v1.Node                 `json:"nodes"`
}

// File is the cache file in a state directory.
type File struct {
	dir string
}

// NewFile returns the cache file in dir (DefaultDir when empty). Nothing is read or created
// until Load or Save.
func NewFile(dir string) *File {
	if dir == "" {
		dir = DefaultDir
	}
	return &File{dir: dir}
}

// Path returns the cache file's path.
func (f *File) Path() string { return filepath.Join(f.dir, FileName) }

// Load reads the cache. A missing file is an error matching fs.ErrNotExist; a file that
// cannot be used is an error matching ErrCorrupt.
func (f *File) Load() (State, error) {
	b, err := os.ReadFile(f.Path())
	if err != nil {
		return State{}, fmt.Errorf("read cluster state cache: %w", err)
	}
	return decode(b)
}

func decode(b []byte) (State, error) {
	var doc document
	if err := json.Unmarshal(b, &doc); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if doc.APIVersion != apiVersion || doc.Kind != kind {
		return State{}, fmt.Errorf("%w: apiVersion %q kind %q, want %s %s", ErrCorrupt, doc.APIVersion, doc.Kind, apiVersion, kind)
	}
	if sum := checksum(doc.State); sum != doc.SHA256 {
		return State{}, fmt.Errorf("%w: sha256 of the state is %s, the file says %s", ErrCorrupt, sum, doc.SHA256)
	}
	var body stateBody
	if err := json.Unmarshal(doc.State, &body); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if err := body.check(); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return State{SavedAt: doc.SavedAt, Services: body.Services, EndpointSlices: body.EndpointSlices, Nodes: body.Nodes}, nil
}

// check refuses objects the tracker could not key: a checksum proves the bytes are those
// written, not that whoever wrote them wrote sense.
func (b stateBody) check() error {
	for i, s := range b.Services {
		if s == nil || s.Name == "" || s.Namespace == "" {
			return fmt.Errorf("services[%d]: no namespace/name", i)
		}
	}
	for i, s := range b.EndpointSlices {
		if s == nil || s.Name == "" || s.Namespace == "" {
			return fmt.Errorf("endpointSlices[%d]: no namespace/name", i)
		}
	}
	for i, n := range b.Nodes {
		if n == nil || n.Name == "" {
			return fmt.Errorf("nodes[%d]: no name", i)
		}
	}
	return nil
}

func checksum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Save writes the state atomically, with st.SavedAt as its time. The state is encoded one
// object at a time into the file, not into one buffer first: at 10,000 Services it is tens
// of MB, and a save that allocated that much (twice over, with the buffer's growth) made
// the Go runtime collect garbage in the middle of the next rule sync, every 30 s.
func (f *File) Save(st State) error {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("create state directory: %w", err)
	}
	return writeAtomic(f.Path(), func(w io.Writer) error { return writeDocument(w, st) })
}

// writeDocument writes the document json.Encoder would for st (its body as json.Marshal
// encodes the state), the checksum computed on the way.
func writeDocument(w io.Writer, st State) error {
	head, err := json.Marshal(document{APIVersion: apiVersion, Kind: kind, SavedAt: st.SavedAt.UTC(), State: json.RawMessage("null")})
	if err != nil {
		return fmt.Errorf("encode cluster state: %w", err)
	}
	head, ok := bytes.CutSuffix(head, []byte(`null,"sha256":""}`))
	if !ok {
		return fmt.Errorf("encode cluster state: unexpected document head %s", head)
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	sum := sha256.New()
	if err := writeBody(io.MultiWriter(w, sum), st); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, `,"sha256":%q}`+"\n", hex.EncodeToString(sum.Sum(nil)))
	return err
}

// writeBody writes the bytes json.Marshal gives for the state's body, object by object
// through one reused buffer.
func writeBody(w io.Writer, st State) error {
	e := newObjectEncoder(w)
	e.raw(`{"services":`)
	encodeList(e, st.Services)
	e.raw(`,"endpointSlices":`)
	encodeList(e, st.EndpointSlices)
	e.raw(`,"nodes":`)
	encodeList(e, st.Nodes)
	e.raw(`}`)
	return e.err
}

// objectEncoder writes JSON to w piece by piece and keeps the first error.
type objectEncoder struct {
	w   io.Writer
	buf bytes.Buffer
	enc *json.Encoder
	err error
}

func newObjectEncoder(w io.Writer) *objectEncoder {
	e := &objectEncoder{w: w}
	e.enc = json.NewEncoder(&e.buf)
	return e
}

func (e *objectEncoder) raw(s string) {
	if e.err == nil {
		_, e.err = io.WriteString(e.w, s)
	}
}

// object writes v as json.Marshal does: json.Encoder adds a newline, which is dropped.
func (e *objectEncoder) object(v any) {
	if e.err != nil {
		return
	}
	e.buf.Reset()
	if e.err = e.enc.Encode(v); e.err != nil {
		e.err = fmt.Errorf("encode cluster state: %w", e.err)
		return
	}
	_, e.err = e.w.Write(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
}

func encodeList[T any](e *objectEncoder, objs []*T) {
	if objs == nil {
		e.raw("null")
		return
	}
	e.raw("[")
	for i, o := range objs {
		if i > 0 {
			e.raw(",")
		}
		e.object(o)
	}
	e.raw("]")
}

// writeAtomic replaces path with what write writes so that a crash at any point leaves the
// old or the new content: the data reaches the disk before the rename, and the rename before
// returning.
func writeAtomic(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write cluster state cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	bw := bufio.NewWriterSize(tmp, 256<<10)
	if err := write(bw); err == nil {
		err = bw.Flush()
	}
	if err != nil {
		tmp.Close()
		return fmt.Errorf("write cluster state cache: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync cluster state cache: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write cluster state cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace cluster state cache: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync state directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync state directory: %w", err)
	}
	return nil
}
