#!/usr/bin/env bash
# Fails when a command of the module links package testing: testing.T helpers belong in
# _test.go files or in test-support packages (lab/labtest, lab/cluster/clustertest), never
# in what ships (the daemon, the firmware tools) or what the demo runs (lab/cmd/...).
# Checks every main package of ./... (testdata, the guest test programs, is not part of it).
set -euo pipefail
GO=${GO:-go}
status=0
for cmd in $($GO list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./...); do
	if $GO list -deps "$cmd" | grep -qx testing; then
		echo "$cmd links package testing, imported by:" >&2
		$GO list -deps -f '{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}' "$cmd" | grep -E ' testing( |$)' | cut -d: -f1 | sed 's/^/	/' >&2
		status=1
	fi
done
exit $status
