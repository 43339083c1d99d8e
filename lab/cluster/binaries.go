package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binaries are the two programs a cluster runs.
type Binaries struct {
	APIServer string // kube-apiserver
	Etcd      string // etcd
}

// Environment variables that point at prebuilt binaries instead of hack/apiserver's cache.
const (
	EnvAPIServer = "EDGEGATE_KUBE_APISERVER"
	EnvEtcd      = "EDGEGATE_ETCD"
)

// BuildScript is the one place that knows how the binaries are built and cached (apiserver.mk
// calls it too), relative to the repository root.
const BuildScript = "hack/apiserver/build.sh"

// ErrNotBuilt says the cache holds no binaries for the pinned versions.
var ErrNotBuilt = errors.New("kube-apiserver and etcd are not built yet (make cluster-binaries)")

// CachedBinaries returns hack/apiserver's cached build for the pinned versions under the
// checkout that holds the working directory, without building it: ErrNotBuilt when the
// cache lacks it. (BinariesFromEnv comes first for callers that honour the variables.)
func CachedBinaries(ctx context.Context) (Binaries, error) {
	root, err := repoRoot()
	if err != nil {
		return Binaries{}, err
	}
	return runBuildScript(ctx, root, io.Discard, "-n")
}

// Build returns the binaries for the demo: $EDGEGATE_KUBE_APISERVER and $EDGEGATE_ETCD when
// set, else hack/apiserver's cached build under the checkout that holds the working
// directory, building it first when the pins changed; the build's output goes to w.
func Build(ctx context.Context, w io.Writer) (Binaries, error) {
	if b, ok, err := BinariesFromEnv(); ok {
		return b, err
	}
	root, err := repoRoot()
	if err != nil {
		return Binaries{}, err
	}
	return runBuildScript(ctx, root, w)
}

func runBuildScript(ctx context.Context, root string, w io.Writer, args ...string) (Binaries, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, BuildScript)}, args...)...)
	cmd.Dir = root
	cmd.Stderr = w
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		return Binaries{}, ErrNotBuilt
	}
	if err != nil {
		return Binaries{}, fmt.Errorf("%s: %w", BuildScript, err)
	}
	dir := strings.TrimSpace(string(out))
	return Binaries{
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Etcd:      filepath.Join(dir, "etcd"),
	}, nil
}

// BinariesFromEnv returns the binaries $EDGEGATE_KUBE_APISERVER and $EDGEGATE_ETCD name. It
// reports ok when either variable is set; both must then name executables.
func BinariesFromEnv() (b Binaries, ok bool, err error) {
	b = Binaries{APIServer: os.Getenv(EnvAPIServer), Etcd: os.Getenv(EnvEtcd)}
	if b.APIServer == "" && b.Etcd == "" {
		return b, false, nil
	}
	for _, p := range []struct{ env, path string }{{EnvAPIServer, b.APIServer}, {EnvEtcd, b.Etcd}} {
		if p.path == "" {
			return b, true, fmt.Errorf("%s is set but %s is not", otherEnv(p.env), p.env)
		}
		if fi, err := os.Stat(p.path); err != nil {
			return b, true, fmt.Errorf("%s: %w", p.env, err)
		} else if fi.Mode()&0o111 == 0 {
			return b, true, fmt.Errorf("%s: %s is not executable", p.env, p.path)
		}
	}
	return b, true, nil
}

func otherEnv(env string) string {
	if env == EnvAPIServer {
		return EnvEtcd
	}
	return EnvAPIServer
}

// repoRoot finds the checkout from the working directory (a test runs in its package's
// directory, the demo in the root), by the build script it needs.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, BuildScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s above the working directory", BuildScript)
		}
		dir = parent
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
