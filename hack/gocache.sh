# shellcheck shell=bash
# Sourced by the scripts that build binaries from a pinned Go module into a cache directory
# (hack/apiserver/build.sh, bench/build.sh): the cache key, the lock, the build into a
# temporary directory renamed into place, and the release stamps of Kubernetes binaries.
#
# A script sources it and calls
#
#	gocache_build CACHE MODULE_DIR BUILT BUILD [-n]
#
# where BUILT DIR succeeds when DIR holds every binary and BUILD DIR builds them into DIR
# (run from MODULE_DIR, with $gocache_dir naming the cache directory they will end up in,
# for messages). It prints the cache directory on stdout. The key is a hash of
# go.sum and of go.mod without its comments, so the binaries are rebuilt only when the pins
# change; a cached set costs one hash to find. With -n it builds nothing: it prints the
# directory if the binaries are there, else returns 3.

# gocache_key MODULE_DIR prints the module's cache key.
gocache_key() {
	{ grep -v '^[[:space:]]*//' "$1/go.mod"; cat "$1/go.sum"; } | sha256sum | cut -c1-16
}

# gocache_kube_ldflags VERSION prints the -ldflags Kubernetes' own release build stamps a
# binary of release VERSION (v1.36.3) with, so --version, /version and build_info metrics
# name the real release.
gocache_kube_ldflags() {
	local kube=$1 major minor ldflags="-s -w" p
	major=${kube#v}; major=${major%%.*}
	minor=${kube#v*.}; minor=${minor%%.*}
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $p.gitVersion=$kube -X $p.gitMajor=$major -X $p.gitMinor=$minor"
		ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
	done
	echo "$ldflags"
}

gocache_build() {
	local cache=$1 mod=$2 built=$3 build=$4 flag=${5:-}
	local key dir
	key=$(gocache_key "$mod")
	dir=$cache/$key
	gocache_dir=$dir
	if "$built" "$dir"; then
		echo "$dir"
		return 0
	fi
	[ "$flag" = -n ] && return 3

	mkdir -p "$cache"
	# Builds started together (test packages in parallel, two benchmark runs) may all find
	# the cache empty: one builds, the others wait and then find it full.
	exec 9>"$cache/.lock"
	flock 9
	if ! "$built" "$dir"; then
		# Global, not local: the EXIT trap runs after this function's scope is gone.
		gocache_tmp=$(mktemp -d "$cache/.build.XXXXXX")
		trap 'rm -rf "$gocache_tmp"' EXIT
		cd "$mod"
		"$build" "$gocache_tmp"
		chmod 755 "$gocache_tmp"
		rm -rf "$dir"
		mv "$gocache_tmp" "$dir"
		trap - EXIT
		# Binaries of earlier pins are garbage once these exist.
		find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" ! -name '.build.*' -exec rm -rf {} +
	fi
	echo "$dir"
}
