#!/usr/bin/env bash
# Fails when a package with tests belongs to none of the tiers `make test` runs: a new
# package must not fall through (daemon/dashboard once did). Arguments: every tier's
# package patterns.
set -euo pipefail
GO=${GO:-go}
tested=$($GO list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... | sort -u)
tiered=$($GO list "$@" | sort -u)
missing=$(comm -23 <(echo "$tested") <(echo "$tiered"))
if [ -n "$missing" ]; then
	echo "packages with tests that no tier of make test runs (add them to a tier in the Makefile):" >&2
	echo "$missing" >&2
	exit 1
fi
