// Package clustertest starts package cluster's control plane from tests, as
// net/http/httptest starts servers: a cluster that is removed when the test ends, binaries
// found or built for it, and a skip (a failure under CI=true) where a cluster cannot run.
package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/edgegate/internal/prereq"
	"github.com/edgegate/edgegate/lab/cluster"
)

// Start launches a cluster for t and removes it in t.Cleanup, printing the ends of the logs
// when t failed. Binaries that cannot be had, or a namespace without root, skip the test,
// except under CI=true where they fail it.
func Start(t testing.TB, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	if opts.Binaries == (cluster.Binaries{}) {
		opts.Binaries = EnsureBinaries(t)
	}
	if opts.NetNS != "" && os.Geteuid() != 0 {
		unavailable(t, "a cluster inside a network namespace needs root")
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	started := time.Now()
	c, err := cluster.Launch(context.Background(), opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails())
		}
		if err := c.Close(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	t.Logf("cluster ready in %v: apiserver %s (netns %q), state in %s",
		time.Since(started).Round(100*time.Millisecond), c.Server, c.NetNS, c.Dir)
	return c
}

// EnsureBinaries returns the binaries for tests: $EDGEGATE_KUBE_APISERVER and $EDGEGATE_ETCD
// when set, else hack/apiserver's cached build, building it first when the pins changed (a
// cold build takes about 6 minutes). With -short it does not start a cold build. A binary
// that cannot be had skips the test, except under CI=true where it fails.
func EnsureBinaries(t testing.TB) cluster.Binaries {
	t.Helper()
	if b, ok, err := cluster.BinariesFromEnv(); ok {
		if err != nil {
			t.Fatalf("cluster binaries: %v", err)
		}
		return b
	}
	b, err := cluster.CachedBinaries(context.Background())
	if errors.Is(err, cluster.ErrNotBuilt) && !testing.Short() {
		t.Logf("building kube-apiserver and etcd (%s); a cold build takes about 6 minutes", cluster.BuildScript)
		var log bytes.Buffer
		b, err = cluster.Build(context.Background(), &log)
		if err != nil {
			lines := strings.Split(strings.TrimRight(log.String(), "\n"), "\n")
			err = fmt.Errorf("%w\n%s", err, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	}
	if err != nil {
		unavailable(t, err.Error())
	}
	return b
}

// unavailable skips, or fails under CI=true where a tier that cannot run is a failure.
func unavailable(t testing.TB, reason string) {
	t.Helper()
	prereq.Missing(t, "no test cluster: %s", reason)
}
