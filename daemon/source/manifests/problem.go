// Package manifests is edgegate's standalone source of desired state: a directory of
// Service and EndpointSlice manifests written the way kubectl writes them (multi-document
// YAML, JSON, kind List), read into the real Kubernetes API types and validated with the
// model's rules. It follows the directory with fsnotify and hands the whole state to a Sink
// on every change.
//
// Bad input loses nothing: an object that fails to decode or validate keeps its last good
// version, a file that cannot be parsed keeps all of its last good objects, and only
// deleting a file (or an object from a file that parses) removes objects. Every problem is
// an *ObjectError naming the file, the object and the field.
package manifests

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
)

var (
	// ErrUnknownKind marks documents that hold something other than the two kinds the proxy
	// reads. They are skipped and lose nothing, since no earlier load could have taken them.
	ErrUnknownKind = errors.New("not a v1 Service or discovery.k8s.io/v1 EndpointSlice, skipped")
	// ErrDuplicate marks an object defined more than once; the first definition in file-name
	// order is used.
	ErrDuplicate = errors.New("defined more than once")
)

// ObjectError is one problem in the manifests directory.
type ObjectError struct {
	File string // file name inside the directory; empty when the directory itself failed
	Line int    // line where the object's document starts; 0 when not known
	Kind string // "Service", "EndpointSlice", ...; empty when the document was unreadable
	// Namespace and Name identify the object; Namespace is "default" when the manifest
	// leaves it out.
	Namespace, Name string
	Field           string // field path such as spec.ports[0].port; empty for the whole object
	Err             error
}

func (e *ObjectError) Error() string {
	var parts []string
	if e.File != "" {
		parts = append(parts, e.File)
	}
	switch {
	case e.Kind != "" && e.Name != "":
		parts = append(parts, e.Kind+" "+e.Object())
	case e.Kind != "" && e.Line > 0:
		parts = append(parts, fmt.Sprintf("%s at line %d", e.Kind, e.Line))
	case e.Kind != "":
		parts = append(parts, e.Kind)
	case e.Line > 0:
		parts = append(parts, fmt.Sprintf("document at line %d", e.Line))
	}
	if e.Field != "" && !namesField(e.Err, e.Field) {
		parts = append(parts, e.Field)
	}
	return strings.Join(append(parts, e.Err.Error()), ": ")
}

func (e *ObjectError) Unwrap() error { return e.Err }

// Object is the object's namespace/name, or "" when the manifest gave no name.
func (e *ObjectError) Object() string {
	if e.Name == "" {
		return ""
	}
	return e.Namespace + "/" + e.Name
}

// namesField reports whether err's own text already starts from or quotes the field path,
// so Error does not print it twice.
func namesField(err error, path string) bool {
	var fe *field.Error
	if errors.As(err, &fe) {
		return fe.Field == path
	}
	var se sigsjson.FieldError
	return errors.As(err, &se) && se.FieldPath() == path
}
