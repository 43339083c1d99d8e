#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the versions pinned in this module into
# out/cluster/<key>/ and prints that directory. The key is a hash of go.sum and of go.mod
# without its comments, so the binaries are rebuilt only when the pins change; a cached pair
# costs one hash to find.
# Used by apiserver.mk (make cluster-binaries) and by lab/cluster's EnsureBinaries.
# With -n it builds nothing: it prints the directory if the binaries are there, else exits 3.
#
# A cold build takes about 6 minutes and 2 GB of memory on 2 cores; it runs under nice so that
# other work on the machine keeps its share. Build output goes to stderr, the directory to stdout.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${EDGEGATE_CLUSTER_CACHE:-$root/out/cluster}
GO=${GO:-go}

key=$({ grep -v '^[[:space:]]*//' "$here/go.mod"; cat "$here/go.sum"; } | sha256sum | cut -c1-16)
dir=$cache/$key
built() { [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ]; }

if built; then
	echo "$dir"
	exit 0
fi
[ "${1:-}" = -n ] && exit 3

mkdir -p "$cache"
# Test packages run in parallel may all find the cache empty: one builds, the others wait.
exec 9>"$cache/.lock"
flock 9
if ! built; then
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	cd "$here"
	kube=$($GO list -m -f '{{.Version}}' k8s.io/kubernetes)
	major=${kube#v}; major=${major%%.*}
	minor=${kube#v*.}; minor=${minor%%.*}
	# What Kubernetes' own release build stamps, so /version and client-go report the real release.
	ldflags="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=$kube -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "building kube-apiserver $kube and etcd $($GO list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3) into $dir (cold: ~6 min, ~2 GB)" >&2
	CGO_ENABLED=0 nice -n 10 $GO build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
	CGO_ENABLED=0 nice -n 10 $GO build -trimpath -ldflags "-s -w" -o "$tmp/etcd" ./cmd/etcd
	chmod 755 "$tmp"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	trap - EXIT
	# Binaries of earlier pins are 150 MB of garbage once these exist.
	find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.build.*' -exec rm -rf {} +
fi
echo "$dir"
