package manifests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/edgegate/edgegate/daemon/model"
)

// DefaultNamespace is the namespace of objects whose manifest names none, as kubectl applies it.
const DefaultNamespace = "default"

const (
	kindService       = "Service"
	kindEndpointSlice = "EndpointSlice"
	kindList          = "List"
)

// objectKey identifies an object across files and loads.
type objectKey struct{ kind, namespace, name string }

// entry is one object a file contributes: decoded now, or kept from an earlier load.
type entry struct {
	key   objectKey
	line  int
	svc   *v1.Service
	slice *discovery.EndpointSlice
	// refused marks a Service that failed validation, taken only while it has no good
	// version: its addresses refuse everyone (model.Tracker.RefuseService).
	refused bool
}

// fileResult is what decoding one file found.
type fileResult struct {
	file    string
	entries []entry
	// invalid holds objects that could be identified but failed to decode or validate.
	invalid []objectKey
	// refusable holds the Services among them that decoded: what stands for each while it
	// has no good version.
	refusable map[objectKey]entry
	// broken is set when part of the file could not be tied to any object, so any object
	// of the file may be hiding in it.
	broken   bool
	problems []*ObjectError
	// unshown counts the problems beyond maxProblemsPerFile.
	unshown int
}

// maxProblemsPerFile keeps a file full of foreign objects (a whole cluster dumped with
// kubectl get -o yaml) from flooding the log on every load.
const maxProblemsPerFile = 50

func (r *fileResult) report(p *ObjectError) {
	if len(r.problems) == maxProblemsPerFile {
		r.unshown++
		return
	}
	r.problems = append(r.problems, p)
}

// header is what identifies a document, read before the strict decode so that errors
// can name the object.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

func (h *header) key() objectKey {
	ns := h.Metadata.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	return objectKey{h.Kind, ns, h.Metadata.Name}
}

type document struct {
	line int
	data []byte
	json bool // data is JSON already; otherwise YAML
}

// decodeFile decodes every object in one manifest file. Files ending in .json hold one
// JSON value or a stream of them; anything else is multi-document YAML.
func decodeFile(file string, data []byte) *fileResult {
	r := &fileResult{file: file}
	var docs []document
	var streamErr *ObjectError
	if path.Ext(file) == ".json" {
		docs, streamErr = jsonDocuments(data)
	} else {
		docs = yamlDocuments(data)
	}
	for _, d := range docs {
		r.document(d)
	}
	if streamErr != nil {
		streamErr.File = file
		r.broken = true
		r.report(streamErr)
	}
	if r.unshown > 0 {
		r.problems = append(r.problems, &ObjectError{File: file, Err: fmt.Errorf("%d more problems not shown", r.unshown)})
	}
	return r
}

// yamlDocuments splits a YAML stream at "---" lines, as kubectl does, keeping the line each
// document starts on. Splitting first lets one broken document leave the others readable.
func yamlDocuments(data []byte) []document {
	var docs []document
	start, startLine, line := 0, 1, 1
	for off := 0; off < len(data); line++ {
		next := len(data)
		if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
			next = off + i + 1
		}
		if isSeparator(data[off:next]) {
			docs = append(docs, document{line: startLine, data: data[start:off]})
			start, startLine = next, line+1
		}
		off = next
	}
	return append(docs, document{line: startLine, data: data[start:]})
}

func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	rest = bytes.TrimSpace(rest)
	return ok && (len(rest) == 0 || rest[0] == '#')
}

// jsonDocuments splits a stream of JSON values. After a syntax error nothing further can be
// found, so the error is returned with the documents read before it.
func jsonDocuments(data []byte) ([]document, *ObjectError) {
	dec := json.NewDecoder(bytes.NewReader(data))
	lines := lineCounter{data: data, line: 1}
	var docs []document
	for {
		start := int(dec.InputOffset())
		start += len(data[start:]) - len(bytes.TrimLeft(data[start:], " \t\r\n"))
		startLine := lines.at(start)
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			at := start
			var se *json.SyntaxError
			if errors.As(err, &se) {
				at = int(se.Offset)
			}
			return docs, &ObjectError{Line: startLine, Err: fmt.Errorf("json: line %d: %w", lines.at(at), err)}
		}
		docs = append(docs, document{line: startLine, data: raw, json: true})
	}
}

// lineCounter finds line numbers for increasing offsets without rescanning from the start.
type lineCounter struct {
	data []byte
	off  int // counted up to here
	line int // line of off
}

func (c *lineCounter) at(off int) int {
	off = min(max(off, c.off), len(c.data))
	c.line += bytes.Count(c.data[c.off:off], []byte{'\n'})
	c.off = off
	return c.line
}

func (r *fileResult) document(d document) {
	js := d.data
	if !d.json {
		var err error
		if js, err = yaml.YAMLToJSONStrict(d.data); err != nil {
			err = yamlError(err, d.line)
			// Duplicate keys fail only the strict conversion; a lax one still tells whose
			// they are, so the error is charged to that object alone.
			if lax, laxErr := yaml.YAMLToJSON(d.data); laxErr == nil {
				if h, ok := readHeader(lax); ok && h.APIVersion != "" && h.Kind != "" && h.Metadata.Name != "" {
					r.invalidObject(h, d.line, "", err)
					return
				}
			}
			r.brokenDocument(d.line, nil, err)
			return
		}
	}
	r.object(d.line, js, false)
}

// yamlLine finds go-yaml's line numbers, which count from the start of the document.
var yamlLine = regexp.MustCompile(`(?m)(^yaml: |^\s+)line (\d+):`)

// yamlError makes go-yaml's message name lines of the file and fit on one log line.
func yamlError(err error, docLine int) error {
	msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := yamlLine.FindStringSubmatch(m)
		n, convErr := strconv.Atoi(sub[2])
		if convErr != nil {
			return m
		}
		return sub[1] + "line " + strconv.Itoa(n+docLine-1) + ":"
	})
	return errors.New(strings.Join(strings.Fields(msg), " "))
}

func readHeader(js []byte) (*header, bool) {
	var h header
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(js, &h); err != nil {
		return nil, false
	}
	return &h, true
}

func (r *fileResult) object(line int, js []byte, inList bool) {
	trimmed := bytes.TrimSpace(js)
	if bytes.Equal(trimmed, []byte("null")) {
		return // an empty document, such as one left by a trailing "---"
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		r.brokenDocument(line, nil, errors.New("document is not an object"))
		return
	}
	h, ok := readHeader(js)
	if !ok {
		r.brokenDocument(line, nil, errors.New("apiVersion, kind and metadata.name must be strings"))
		return
	}
	if h.APIVersion == "" || h.Kind == "" {
		r.brokenDocument(line, h, errors.New("apiVersion and kind are required"))
		return
	}
	switch {
	case h.APIVersion == "v1" && h.Kind == kindList && !inList:
		r.list(line, js, h)
	case h.APIVersion == "v1" && h.Kind == kindService:
		var svc v1.Service
		if decoded, clean := r.decodeStrict(h, line, js, &svc); decoded {
			defaultNamespace(&svc.ObjectMeta)
			r.add(h, line, entry{svc: &svc}, clean, model.ValidateService(&svc))
		}
	case h.APIVersion == "discovery.k8s.io/v1" && h.Kind == kindEndpointSlice:
		var s discovery.EndpointSlice
		if decoded, clean := r.decodeStrict(h, line, js, &s); decoded {
			defaultNamespace(&s.ObjectMeta)
			r.add(h, line, entry{slice: &s}, clean, model.ValidateEndpointSlice(&s))
		}
	default:
		k := h.key()
		r.report(&ObjectError{File: r.file, Line: line, Kind: h.Kind, Namespace: k.namespace, Name: k.name,
			Err: fmt.Errorf("apiVersion %s: %w", h.APIVersion, ErrUnknownKind)})
	}
}

// list decodes a kind List, as `kubectl get -o yaml` writes it, item by item.
func (r *fileResult) list(line int, js []byte, h *header) {
	var l struct {
		metav1.TypeMeta `json:",inline"`
		Metadata        metav1.ListMeta   `json:"metadata"`
		Items           []json.RawMessage `json:"items"`
	}
	strictErrs, err := sigsjson.UnmarshalStrict(js, &l)
	if err != nil {
		r.brokenDocument(line, h, err)
		return
	}
	for _, e := range strictErrs {
		// A misspelled "items" would hide every object, so the file counts as broken.
		r.brokenDocument(line, h, e)
	}
	for _, item := range l.Items {
		r.object(line, item, true)
	}
}

// decodeStrict decodes into the API type. Unknown and duplicate fields are reported and
// make the object invalid (clean is false), but it is still decoded so that validation can
// report everything else wrong with it in the same pass.
func (r *fileResult) decodeStrict(h *header, line int, js []byte, obj any) (decoded, clean bool) {
	strictErrs, err := sigsjson.UnmarshalStrict(js, obj)
	if err != nil {
		r.invalidObject(h, line, "", err)
		return false, false
	}
	for _, e := range strictErrs {
		var fe sigsjson.FieldError
		path := ""
		if errors.As(e, &fe) {
			path = fe.FieldPath()
		}
		r.invalidObject(h, line, path, e)
	}
	return true, len(strictErrs) == 0
}

func defaultNamespace(meta *metav1.ObjectMeta) {
	if meta.Namespace == "" {
		meta.Namespace = DefaultNamespace
	}
}

// add takes a decoded object if it was clean and validates.
func (r *fileResult) add(h *header, line int, e entry, clean bool, errs field.ErrorList) {
	errs, closing := model.SplitFailClosed(errs)
	for _, fe := range errs {
		r.invalidObject(h, line, fe.Field, fe)
	}
	// A field that fails closed is reported, but the object is taken: its last good version
	// may not restrict what this one does.
	for _, fe := range closing {
		k := h.key()
		r.report(&ObjectError{File: r.file, Line: line, Kind: k.kind, Namespace: k.namespace, Name: k.name, Field: fe.Field, Err: fe})
	}
	e.key, e.line = h.key(), line
	switch {
	case clean && len(errs) == 0:
		r.entries = append(r.entries, e)
	case e.svc != nil:
		if r.refusable == nil {
			r.refusable = map[objectKey]entry{}
		}
		e.refused = true
		r.refusable[e.key] = e
	}
}

func (r *fileResult) invalidObject(h *header, line int, fieldPath string, err error) {
	k := h.key()
	r.report(&ObjectError{File: r.file, Line: line, Kind: k.kind, Namespace: k.namespace, Name: k.name, Field: fieldPath, Err: err})
	r.invalid = append(r.invalid, k)
}

// brokenDocument records a document that cannot be tied to an object. Its header, when
// readable, only helps the operator find it.
func (r *fileResult) brokenDocument(line int, h *header, err error) {
	r.broken = true
	p := &ObjectError{File: r.file, Line: line, Err: err}
	var fe sigsjson.FieldError
	if errors.As(err, &fe) {
		p.Field = fe.FieldPath()
	}
	if h != nil {
		p.Kind = h.Kind
		if h.Metadata.Name != "" {
			k := h.key()
			p.Namespace, p.Name = k.namespace, k.name
		}
	}
	r.report(p)
}
