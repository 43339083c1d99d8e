#!/usr/bin/env bash
# Builds upstream kube-proxy from the version pinned in bench/kubeproxy/go.mod into
# out/bench/<key>/ and prints that directory. The key is a hash of go.sum and of go.mod
# without its comments, so the binary is rebuilt only when the pins change; a cached one costs
# one hash to find. The module cache and build cache are the ones hack/apiserver/build.sh
# fills, so after `make cluster-binaries` most of Kubernetes is already compiled.
# Used by bench.mk (make bench-binaries) and by the harness (bench/main.go).
# With -n it builds nothing: it prints the directory if the binary is there, else exits 3.
# Build output goes to stderr, the directory to stdout.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mod=$here/kubeproxy
cache=${EDGEGATE_BENCH_CACHE:-$root/out/bench}
GO=${GO:-go}

key=$({ grep -v '^[[:space:]]*//' "$mod/go.mod"; cat "$mod/go.sum"; } | sha256sum | cut -c1-16)
dir=$cache/$key
built() { [ -x "$dir/kube-proxy" ]; }

if built; then
	echo "$dir"
	exit 0
fi
[ "${1:-}" = -n ] && exit 3

mkdir -p "$cache"
# Two benchmark runs started together may both find the cache empty: one builds, one waits.
exec 9>"$cache/.lock"
flock 9
if ! built; then
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	cd "$mod"
	kube=$($GO list -m -f '{{.Version}}' k8s.io/kubernetes)
	major=${kube#v}; major=${major%%.*}
	minor=${kube#v*.}; minor=${minor%%.*}
	# What Kubernetes' own release build stamps, so kube-proxy's --version and its
	# kubernetes_build_info metric name the real release.
	ldflags="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=$kube -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "building kube-proxy $kube into $dir" >&2
	# Upstream release binaries are static (CGO_ENABLED=0) too.
	CGO_ENABLED=0 nice -n 10 $GO build -trimpath -ldflags "$ldflags" -o "$tmp/kube-proxy" k8s.io/kubernetes/cmd/kube-proxy
	chmod 755 "$tmp"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	trap - EXIT
	# Binaries of earlier pins are garbage once this one exists.
	find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.build.*' -exec rm -rf {} +
fi
echo "$dir"
