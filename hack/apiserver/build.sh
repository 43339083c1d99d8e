#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the versions pinned in this module into
# out/cluster/<key>/ and prints that directory; hack/gocache.sh keys, locks and caches them.
# The key is a hash of go.sum and of go.mod without its comments, so the binaries are rebuilt
# only when the pins change; a cached pair costs one hash to find.
# Used by apiserver.mk (make cluster-binaries) and by lab/cluster (CachedBinaries, Build).
# With -n it builds nothing: it prints the directory if the binaries are there, else exits 3.
#
# A cold build takes about 6 minutes and 2 GB of memory on 2 cores; it runs under nice so that
# other work on the machine keeps its share. Build output goes to stderr, the directory to stdout.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
# shellcheck source=../gocache.sh
. "$root/hack/gocache.sh"

built() { [ -x "$1/kube-apiserver" ] && [ -x "$1/etcd" ]; }

# progress reads go build -v's output (one package path per line it compiles) and says every
# 20 s how far the build of $1 is, so a cold build is not minutes of silence; every other line
# (a compile error and its # header) is passed on as it comes.
progress() {
	local n=0 start=$SECONDS last=$SECONDS line
	while IFS= read -r line; do
		if [[ $line =~ ^[A-Za-z0-9._~/-]+$ ]]; then
			n=$((n + 1))
		else
			printf '%s\n' "$line" >&2
		fi
		if ((SECONDS - last >= 20)); then
			echo "  $1: $n packages compiled, $((SECONDS - start))s" >&2
			last=$SECONDS
		fi
	done
	echo "  $1: $n packages compiled in $((SECONDS - start))s" >&2
}

build() {
	local kube
	kube=$($GO list -m -f '{{.Version}}' k8s.io/kubernetes)
	echo "building kube-apiserver $kube and etcd $($GO list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3) into $gocache_dir (cold: ~6 min, ~2 GB)" >&2
	CGO_ENABLED=0 nice -n 10 $GO build -v -trimpath -ldflags "$(gocache_kube_ldflags "$kube")" -o "$1/kube-apiserver" \
		k8s.io/kubernetes/cmd/kube-apiserver 2>&1 | progress kube-apiserver
	CGO_ENABLED=0 nice -n 10 $GO build -v -trimpath -ldflags "-s -w" -o "$1/etcd" ./cmd/etcd 2>&1 | progress etcd
}

gocache_build "${EDGEGATE_CLUSTER_CACHE:-$root/out/cluster}" "$here" built build "${1:-}"
