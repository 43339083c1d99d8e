//go:build tools

// Package apiserver pins, for the edgegate tests and demo only, the Kubernetes API server and
// etcd built into out/cluster/ by apiserver.mk. It lives in its own module so that the
// product's module never depends on k8s.io/kubernetes.
//
// This file is never compiled: it keeps kube-apiserver's main package (which cannot be
// imported) in the module graph so that `go mod tidy` does not drop k8s.io/kubernetes.
package apiserver

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
