# A real kube-apiserver and etcd for the cluster tests and the demo (package lab/cluster),
# built from the versions pinned in hack/apiserver/go.mod, a module of its own so that the
# product's module never depends on k8s.io/kubernetes. Included by the top-level Makefile;
# every path is relative to the repository root.
#
# The binaries are cached in out/cluster/<hash of go.mod and go.sum>/ and rebuilt only when the
# pins change: a cold build takes about 6.5 minutes and 1.9 GB of memory on 2 cores, a build
# with a warm Go cache about 25 s, a cached pair nothing. lab/cluster runs the same script
# when a test finds no binaries, so this target only moves the wait out of `go test`.

GO ?= go

.PHONY: cluster-binaries test-cluster cluster-clean

cluster-binaries:
	@GO="$(GO)" hack/apiserver/build.sh >/dev/null

# Everything that needs a real API server: the harness's own tests (objects survive an
# apiserver restart, the gateway's token and kubeconfig, a cluster inside a network
# namespace), the gateway's membership and cache against it with deploy/'s RBAC
# (daemon/node), the fleet rollout of three gateways with deploy/'s CRD and RBAC
# (daemon/update/rollout), and the edgegate binary joined to it in the lab
# (lab/cluster/...). Needs root.
test-cluster: cluster-binaries
	@hack/require-root.sh
	$(GO) test -count=1 -timeout 15m ./daemon/node/... ./daemon/lb/alloc/... ./daemon/update/rollout/... ./lab/cluster/...

cluster-clean:
	rm -rf out/cluster
