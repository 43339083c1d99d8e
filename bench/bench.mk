# Benchmarks side by side with upstream kube-proxy (issue 10): `make bench` (root; about 20
# minutes at the default sizes on 2 cores, never part of `make test`). bench/ is a module of
# its own (the harness) and bench/kubeproxy another (upstream kube-proxy, pinned like
# hack/apiserver). Included by the top-level Makefile; every path is relative to the
# repository root. bench/README.md says what is measured and how.
#
# kube-proxy is cached in out/bench/<hash of bench/kubeproxy's go.mod and go.sum>/ and rebuilt
# only when the pins change: about 20 s once `make cluster-binaries` has warmed the Go build
# cache (most of Kubernetes is shared), a cached one nothing.
#
# BENCH_SIZES picks the sizes (Services x endpoints per Service), BENCH_MODES the proxy modes,
# BENCH_PROXIES the programs, e.g. `make bench BENCH_SIZES=1000x10 BENCH_MODES=nftables`;
# BENCH_ARGS passes further flags (go run ./bench -h lists them).

GO ?= go
BENCH_SIZES   ?= 1000x10,10000x10,5000x50
BENCH_MODES   ?= nftables,iptables
BENCH_PROXIES ?= edgegate,kube-proxy
BENCH_ARGS    ?=

.PHONY: bench-binaries bench bench-clean

bench-binaries:
	@GO="$(GO)" bench/build.sh >/dev/null

# Every size, mode and program; the table is printed and written to out/bench/results/.
bench: build cluster-binaries bench-binaries
	@hack/require-root.sh
	cd bench && CGO_ENABLED=0 $(GO) run . -edgegate $(abspath $(BIN)/edgegate) \
		-sizes "$(BENCH_SIZES)" -modes "$(BENCH_MODES)" -proxies "$(BENCH_PROXIES)" \
		-out $(abspath out/bench/results) $(BENCH_ARGS)

bench-clean:
	rm -rf out/bench
