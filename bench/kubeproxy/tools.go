//go:build tools

// Package kubeproxy pins upstream kube-proxy for the benchmarks. This file is never compiled:
// it keeps kube-proxy's main package (which cannot be imported) in the module graph so that
// `go mod tidy` does not drop k8s.io/kubernetes.
package kubeproxy

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
