#!/usr/bin/env bash
# soak.sh TARGET RUNS [REV]: runs `make TARGET` RUNS times, each in a fresh clone of REV
# (default HEAD) of this repository with an empty Go build cache, and prints one
# line per run (pass/FAIL, seconds) and the failing tests. A flaky test shows here; it is
# issue 27's reliability check (unit and netns tiers 10 times, cluster and firmware 3).
# The runs share out/kernels and out/cluster with this checkout (downloads and builds that
# are inputs, not what is tested).
set -uo pipefail
target=${1:?usage: hack/soak.sh TARGET RUNS [REV]}
runs=${2:?usage: hack/soak.sh TARGET RUNS [REV]}
rev=${3:-HEAD}
top=$(git rev-parse --show-toplevel)
work=$(mktemp -d /tmp/edgegate-soak.XXXXXX)
cache="$work/gocache"
echo "soak: make $target x$runs at $(git -C "$top" rev-parse --short "$rev") in $work"
pass=0
for i in $(seq 1 "$runs"); do
	dir="$work/run$i"
	git clone -q "$top" "$dir" && git -C "$dir" checkout -q "$rev" || exit 1
	mkdir -p "$dir/out"
	for shared in kernels cluster; do
		[ -e "$top/out/$shared" ] && ln -s "$top/out/$shared" "$dir/out/$shared"
	done
	rm -rf "$cache"
	start=$(date +%s)
	if (cd "$dir" && GOCACHE="$cache" CI=true make "$target") >"$work/run$i.log" 2>&1; then
		pass=$((pass + 1))
		echo "run $i: pass ($(( $(date +%s) - start ))s)"
	else
		echo "run $i: FAIL ($(( $(date +%s) - start ))s), log $work/run$i.log"
		grep -E -- '^(--- FAIL|FAIL|panic:)' "$work/run$i.log" | head -20 | sed 's/^/    /'
	fi
	rm -rf "$dir"
done
echo "soak: make $target: $pass of $runs passed"
[ "$pass" -eq "$runs" ]
