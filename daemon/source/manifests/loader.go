package manifests

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/edgegate/edgegate/daemon/model"
)

// Sink receives the whole desired state after every load: the Services, those that failed
// validation with no good version to keep (their addresses refuse everyone), and the
// EndpointSlices.
type Sink interface {
	ReplaceAll(services, refused []*v1.Service, slices []*discovery.EndpointSlice)
}

var _ Sink = (*model.Tracker)(nil)

// Loader reads a manifests directory and remembers, per file, the objects it took from it,
// which is what lets bad input keep the last good objects. It is not safe for concurrent use.
type Loader struct {
	fsys fs.FS
	// files holds, per file, the objects it contributed to the last load.
	files map[string][]entry
	// current holds the objects in effect after the last load.
	current map[objectKey]entry
}

// NewLoader returns a Loader for the manifest files at the top of fsys.
func NewLoader(fsys fs.FS) *Loader {
	return &Loader{fsys: fsys, files: map[string][]entry{}, current: map[objectKey]entry{}}
}

// Load re-reads every manifest file and returns the objects in effect, each list sorted by
// namespace and name, and every problem found (all of them *ObjectError). Services that
// failed validation with no good version are left out; Refused returns them.
func (l *Loader) Load() (services []*v1.Service, slices []*discovery.EndpointSlice, problems []error) {
	got, _ := l.load()
	for _, p := range got.problems {
		problems = append(problems, p)
	}
	return got.svcs, got.eps, problems
}

// Refused returns the Services of the last load that failed validation and have no good
// version, sorted by namespace and name.
func (l *Loader) Refused() []*v1.Service {
	_, refused, _ := l.output()
	return refused
}

// load is Load that also says whether the directory itself could be read.
func (l *Loader) load() (loaded, error) {
	names, err := manifestFiles(l.fsys)
	if err != nil {
		// An unreadable directory says nothing about its objects, so all of them stay.
		svcs, refused, eps := l.output()
		return loaded{svcs, refused, eps, []*ObjectError{{Err: fmt.Errorf("read manifests directory: %w", err)}}}, err
	}
	var problems []*ObjectError
	files := map[string][]entry{}
	for _, name := range names {
		data, err := fs.ReadFile(l.fsys, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since the listing
		}
		if err != nil {
			problems = append(problems, &ObjectError{File: name, Err: fmt.Errorf("read: %w", err)})
			if prev, ok := l.files[name]; ok {
				files[name] = prev
			}
			continue
		}
		r := decodeFile(name, data)
		problems = append(problems, r.problems...)
		files[name] = l.keepLastGood(r)
	}
	l.files = files
	problems = append(problems, l.merge(names)...)
	svcs, refused, eps := l.output()
	return loaded{svcs, refused, eps, problems}, nil
}

// keepLastGood returns the objects a file contributes: those that decoded and validated,
// the last good version of each that did not, and, when part of the file was unreadable,
// every earlier object of the file that it no longer shows.
func (l *Loader) keepLastGood(r *fileResult) []entry {
	entries := slices.Clone(r.entries)
	mentioned := map[objectKey]bool{}
	for _, e := range r.entries {
		mentioned[e.key] = true
	}
	before := map[objectKey]entry{}
	for _, e := range l.files[r.file] {
		before[e.key] = e
	}
	for _, k := range r.invalid {
		if mentioned[k] {
			continue
		}
		mentioned[k] = true
		// The version the same file held comes first; then the one in effect from any
		// file, so an object moved to another file and broken on the way is not lost. A
		// Service with no good version is taken refused, as it is now.
		if e, ok := before[k]; ok && !e.refused {
			entries = append(entries, e)
		} else if e, ok := l.current[k]; ok && !e.refused {
			entries = append(entries, e)
		} else if e, ok := r.refusable[k]; ok {
			entries = append(entries, e)
		}
	}
	if r.broken {
		for _, e := range l.files[r.file] {
			if !mentioned[e.key] {
				mentioned[e.key] = true
				entries = append(entries, e)
			}
		}
	}
	return entries
}

// merge makes the objects of all files current; the first definition in file-name order
// wins and every other one is reported.
func (l *Loader) merge(names []string) []*ObjectError {
	var problems []*ObjectError
	current := map[objectKey]entry{}
	owner := map[objectKey]string{}
	for _, name := range names {
		for _, e := range l.files[name] {
			if first, dup := current[e.key]; dup {
				problems = append(problems, &ObjectError{File: name, Line: e.line, Kind: e.key.kind, Namespace: e.key.namespace, Name: e.key.name,
					Err: fmt.Errorf("%w: the definition in %s at line %d is used", ErrDuplicate, owner[e.key], first.line)})
				continue
			}
			current[e.key] = e
			owner[e.key] = name
		}
	}
	l.current = current
	return problems
}

func (l *Loader) output() (svcs, refused []*v1.Service, eps []*discovery.EndpointSlice) {
	keys := make([]objectKey, 0, len(l.current))
	for k := range l.current {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b objectKey) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	for _, k := range keys {
		switch e := l.current[k]; {
		case e.refused:
			refused = append(refused, e.svc)
		case e.svc != nil:
			svcs = append(svcs, e.svc)
		case e.slice != nil:
			eps = append(eps, e.slice)
		}
	}
	return svcs, refused, eps
}

// manifestFiles lists the manifest files at the top of fsys, sorted by name. Hidden files
// are left out: editors keep swap and lock files there (.web.yaml.swp, .#web.yaml).
func manifestFiles(fsys fs.FS) ([]string, error) {
	dirents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range dirents {
		if !d.IsDir() && isManifestName(d.Name()) {
			names = append(names, d.Name())
		}
	}
	return names, nil
}

func isManifestName(name string) bool {
	switch path.Ext(name) {
	case ".yaml", ".yml", ".json":
		return !strings.HasPrefix(name, ".")
	}
	return false
}
