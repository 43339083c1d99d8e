# Benchmarks side by side with upstream kube-proxy (issue 10): `make bench` (root; up to 30
# minutes at full size, never part of `make test`). bench/ is a module of its own (the
# harness) and bench/kubeproxy another (upstream kube-proxy, pinned like hack/apiserver).
# Included by the top-level Makefile; every path is relative to the repository root.
#
# kube-proxy is cached in out/bench/<hash of bench/kubeproxy's go.mod and go.sum>/ and rebuilt
# only when the pins change: about 20 s once `make cluster-binaries` has warmed the Go build
# cache (most of Kubernetes is shared), a cached one nothing.

GO ?= go
BENCH_SERVICES  ?= 1000
BENCH_ENDPOINTS ?= 10

.PHONY: bench-binaries bench bench-clean

bench-binaries:
	@GO="$(GO)" bench/build.sh >/dev/null

# One full-sync comparison at BENCH_SERVICES × BENCH_ENDPOINTS; the table is printed and
# written to out/bench/results/.
bench: build cluster-binaries bench-binaries
	@hack/require-root.sh
	cd bench && CGO_ENABLED=0 $(GO) run . -edgegate $(abspath $(BIN)/edgegate) \
		-services $(BENCH_SERVICES) -endpoints $(BENCH_ENDPOINTS) -out $(abspath out/bench/results)

bench-clean:
	rm -rf out/bench
