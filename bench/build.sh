#!/usr/bin/env bash
# Builds upstream kube-proxy from the version pinned in bench/kubeproxy/go.mod into
# out/bench/<key>/ and prints that directory; hack/gocache.sh keys, locks and caches it, as
# for the test apiserver. The module cache and build cache are the ones hack/apiserver/build.sh
# fills, so after `make cluster-binaries` most of Kubernetes is already compiled.
# Used by bench.mk (make bench-binaries) and by the harness (bench/main.go).
# With -n it builds nothing: it prints the directory if the binary is there, else exits 3.
# Build output goes to stderr, the directory to stdout.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
GO=${GO:-go}
# shellcheck source=../hack/gocache.sh
. "$root/hack/gocache.sh"

built() { [ -x "$1/kube-proxy" ]; }

build() {
	local kube
	kube=$($GO list -m -f '{{.Version}}' k8s.io/kubernetes)
	echo "building kube-proxy $kube into $gocache_dir" >&2
	# Upstream release binaries are static (CGO_ENABLED=0) too.
	CGO_ENABLED=0 nice -n 10 $GO build -trimpath -ldflags "$(gocache_kube_ldflags "$kube")" \
		-o "$1/kube-proxy" k8s.io/kubernetes/cmd/kube-proxy
}

gocache_build "${EDGEGATE_BENCH_CACHE:-$root/out/bench}" "$here/kubeproxy" built build "${1:-}"
