package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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

// buildScript is the one place that knows how the binaries are built and cached (apiserver.mk
// calls it too), relative to the repository root.
const buildScript = "hack/apiserver/build.sh"

// errNotBuilt says the cache holds no binaries for the pinned versions.
var errNotBuilt = errors.New("kube-apiserver and etcd are not built yet (make cluster-binaries)")

// EnsureBinaries returns the binaries for tests: $EDGEGATE_KUBE_APISERVER and $EDGEGATE_ETCD
// when set, else hack/apiserver's cached build, building it first when the pins changed (a
// cold build takes about 6 minutes). With -short it does not start a cold build. A binary
// that cannot be had skips the test, except under CI=true where it fails.
func EnsureBinaries(t testing.TB) Binaries {
	t.Helper()
	if b, ok, err := binariesFromEnv(); ok {
		if err != nil {
			t.Fatalf("cluster binaries: %v", err)
		}
		return b
	}
	root, err := repoRoot()
	if err != nil {
		unavailable(t, err.Error())
	}
	b, err := cachedBinaries(context.Background(), root)
	if errors.Is(err, errNotBuilt) && !testing.Short() {
		t.Logf("building kube-apiserver and etcd (%s); a cold build takes about 6 minutes", buildScript)
		var log bytes.Buffer
		b, err = runBuildScript(context.Background(), root, &log)
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, lastLines(log.String(), 30))
		}
	}
	if err != nil {
		unavailable(t, err.Error())
	}
	return b
}

// Build returns the binaries for the demo: $EDGEGATE_KUBE_APISERVER and $EDGEGATE_ETCD when
// set, else hack/apiserver's cached build under the checkout that holds the working
// directory, building it first when the pins changed; the build's output goes to w.
func Build(ctx context.Context, w io.Writer) (Binaries, error) {
	if b, ok, err := binariesFromEnv(); ok {
		return b, err
	}
	root, err := repoRoot()
	if err != nil {
		return Binaries{}, err
	}
	return runBuildScript(ctx, root, w)
}

func cachedBinaries(ctx context.Context, root string) (Binaries, error) {
	return runBuildScript(ctx, root, io.Discard, "-n")
}

func runBuildScript(ctx context.Context, root string, w io.Writer, args ...string) (Binaries, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, buildScript)}, args...)...)
	cmd.Dir = root
	cmd.Stderr = w
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 {
		return Binaries{}, errNotBuilt
	}
	if err != nil {
		return Binaries{}, fmt.Errorf("%s: %w", buildScript, err)
	}
	dir := strings.TrimSpace(string(out))
	return Binaries{
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Etcd:      filepath.Join(dir, "etcd"),
	}, nil
}

// binariesFromEnv reports ok when either variable is set; both must then name executables.
func binariesFromEnv() (b Binaries, ok bool, err error) {
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
		if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s above the working directory", buildScript)
		}
		dir = parent
	}
}

// unavailable skips, or fails under CI=true where a tier that cannot run is a failure.
func unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("no test cluster (CI=true, so this fails): %s", reason)
	}
	t.Skipf("no test cluster: %s", reason)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
