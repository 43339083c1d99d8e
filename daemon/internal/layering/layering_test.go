package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the module path; packages are named relative to it below.
const module = "github.com/edgegate/edgegate"

// kernelLibraries talk to the kernel over netlink or open packet (or other raw) sockets.
// Only daemon/kernel/... may import them, so that every such access has an adapter with a
// fake; a new library of the kind (BGP, conntrack, ...) goes on this list.
var kernelLibraries = []string{
	"github.com/vishvananda/netlink",
	"github.com/vishvananda/netns",
	"github.com/mdlayher/netlink",
	"github.com/mdlayher/genetlink",
	"github.com/mdlayher/packet",
	"github.com/mdlayher/socket",
	"github.com/mdlayher/arp", // its Client opens packet sockets
	"github.com/mdlayher/ndp", // its Conn opens ICMPv6 sockets
	"github.com/google/nftables",
	"github.com/moby/ipvs",
	"github.com/ti-mo",
}

// exempt are the test-support packages (and their subpackages), not part of the
// product: the lab and QEMU harnesses, the kernel adapters' test helpers and the
// benchmarks build their own namespaces, links and probes. Test files (_test.go) are
// exempt everywhere, since `go list` reports their imports apart (TestImports).
var exempt = []string{"lab", "qemu", "daemon/kernel/kerneltest", "bench"}

// A rule is one constraint on the import graph: refuses(pkg, imp) reports why package
// pkg (relative to the module, or a full path outside it) may not import imp, or "".
type rule struct {
	name     string
	refuses  func(pkg, imp string) string
	examples []edge // imports the rule must refuse (checked by TestRulesRefuse)
}

type edge struct{ pkg, imp string }

// rules is the table the module's graph is checked against.
var rules = []rule{{
	name:     "only daemon/kernel/... and PID 1's network setup (daemon/pid1) reach the kernel through netlink or raw sockets",
	refuses:  onlyFrom(kernelLibraries, "daemon/kernel", "daemon/pid1"),
	examples: []edge{{"daemon/lb/announce", "github.com/mdlayher/packet"}, {"daemon/proxy", "github.com/ti-mo/conntrack"}},
}, {
	name:     "no package imports one above it in the flow",
	refuses:  layers,
	examples: []edge{{"daemon/kernel/kernelview", "daemon/dashboard"}, {"daemon/model", "daemon/plan/ipvs"}, {"daemon/dashboard", "daemon/app"}},
}}

// layers is the flow from the model up to what the operator sees, and above it the wiring
// (daemon/app) that builds them all; the view types (daemon/view) sit beside the model,
// below everything that produces or shows them.
var layers = flow("daemon/model", "daemon/plan", "daemon/kernel", "daemon/proxy", "daemon/dashboard", "daemon/app")

// TestLayering lists the module's packages with `go list -deps -json ./...` and fails for
// every import that a rule refuses, naming the package, the import and the rule.
func TestLayering(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.Module == nil || !p.Module.Main {
			continue // the standard library and dependencies
		}
		pkg := relative(p.ImportPath)
		if within(pkg, exempt...) {
			continue
		}
		for _, imp := range p.Imports {
			for _, r := range rules {
				if why := r.refuses(pkg, relative(imp)); why != "" {
					t.Errorf("%s imports %s: %s (rule: %s)", pkg, imp, why, r.name)
				}
			}
		}
	}
}

// TestRulesRefuse: each rule refuses its examples, so a rule that can never fail is
// caught here rather than trusted.
func TestRulesRefuse(t *testing.T) {
	for _, r := range rules {
		if len(r.examples) == 0 {
			t.Errorf("rule %q has no example of an import it refuses", r.name)
		}
		for _, e := range r.examples {
			if r.refuses(e.pkg, e.imp) == "" {
				t.Errorf("rule %q lets %s import %s", r.name, e.pkg, e.imp)
			}
		}
	}
	// The flow lets each layer import those below it, and leaves packages outside it free.
	for _, e := range []edge{{"daemon/plan/ipvs", "daemon/model"}, {"daemon/proxy", "daemon/kernel/nft"}, {"daemon/lb", "daemon/dashboard"}} {
		if why := layers(e.pkg, e.imp); why != "" {
			t.Errorf("flow refuses %s importing %s: %s", e.pkg, e.imp, why)
		}
	}
	// And none refuses an adapter its library.
	for _, r := range rules {
		if why := r.refuses("daemon/kernel/nft", "github.com/google/nftables/expr"); why != "" {
			t.Errorf("rule %q refuses daemon/kernel/nft its library: %s", r.name, why)
		}
	}
}

// onlyFrom refuses imports of libraries (and their subpackages) outside the allowed
// packages (and their subpackages).
func onlyFrom(libraries []string, allowed ...string) func(pkg, imp string) string {
	return func(pkg, imp string) string {
		if !within(imp, libraries...) || within(pkg, allowed...) {
			return ""
		}
		return "a kernel library outside " + strings.Join(allowed, ", ")
	}
}

// flow refuses an import from a layer to one above it: layers are listed from the
// bottom up, each a package with its subpackages. Packages in no layer are not
// constrained.
func flow(layers ...string) func(pkg, imp string) string {
	layer := func(path string) int {
		return slices.IndexFunc(layers, func(l string) bool { return within(path, l) })
	}
	return func(pkg, imp string) string {
		from, to := layer(pkg), layer(imp)
		if from < 0 || to <= from {
			return ""
		}
		return layers[to] + " is above " + layers[from] + " in the flow " + strings.Join(layers, " → ")
	}
}

// within reports whether path is one of prefixes or below one.
func within(path string, prefixes ...string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool {
		return path == p || strings.HasPrefix(path, p+"/")
	})
}

// relative names a package of the module by its path in the module; others stay as
// they are.
func relative(importPath string) string {
	if importPath == module {
		return "."
	}
	return strings.TrimPrefix(importPath, module+"/")
}

type listedPackage struct {
	ImportPath string
	Imports    []string
	Module     *struct{ Main bool }
	Error      *struct{ Err string }
}

// listPackages runs `go list -deps -json ./...` at the module's root.
func listPackages(t *testing.T) []listedPackage {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command("go", "list", "-deps", "-json", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -json ./... in %s: %v\n%s", root, err, stderr.String())
	}
	var pkgs []listedPackage
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list listed no package")
	}
	return pkgs
}
