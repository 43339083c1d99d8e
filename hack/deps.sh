#!/usr/bin/env bash
# Installs the Debian packages named as package:command when the command is missing.
# Used by `make demo` and `make test` so that a fresh Debian 12 machine needs nothing else.
set -euo pipefail
missing=()
for pc in "$@"; do
	pkg=${pc%%:*} cmd=${pc#*:}
	command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	echo "missing Debian packages: ${missing[*]} (run as root, or install them)" >&2
	exit 1
fi
echo "installing Debian packages: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
