#!/usr/bin/env bash
# Fails when git tracks a build output: an executable binary (ELF, Mach-O, PE, or any
# file git marks executable that is not a script), or a file over 1 MB that is not a
# fixture the tests read (hack/large-fixtures.txt lists those, one path a line). A 40 MB
# bench binary was once committed this way.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((1024 * 1024))
allowed=$(grep -v '^#' hack/large-fixtures.txt 2>/dev/null || true)
bad=0
while IFS= read -r -d '' entry; do
	mode=${entry%% *}
	path=${entry#*$'\t'}
	[ -f "$path" ] || continue # deleted in the work tree
	magic=$(head -c 4 "$path" | od -An -tx1 | tr -d ' \n')
	case $magic in
	7f454c46 | cffaedfe | cefaedfe | feedfacf | feedface | 4d5a*)
		echo "tracked executable binary: $path (build outputs belong in bin/ or out/, which git ignores)" >&2
		bad=1
		continue
		;;
	esac
	if [ "$mode" = 100755 ] && [ "$(head -c 2 "$path")" != '#!' ]; then
		echo "tracked executable that is not a script: $path" >&2
		bad=1
	fi
	size=$(stat -c %s "$path")
	if [ "$size" -gt "$limit" ] && ! grep -qxF "$path" <<<"$allowed"; then
		echo "tracked file over 1 MB: $path ($size bytes); if the tests read it, list it in hack/large-fixtures.txt" >&2
		bad=1
	fi
done < <(git ls-files -s -z | sed -z 's/^\([0-9]*\) [0-9a-f]* [0-9]\t/\1 \t/')
exit $bad
