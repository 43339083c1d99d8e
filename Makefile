# edgegate: `make demo` runs the gateway on its embedded default in a lab of network
# namespaces; `make test` runs every test tier. Both install what they need.

GO        ?= go
BIN       := bin
# A release tag's git-describe (v1.2.3-4-gabcdef0[-dirty]); before the first tag, the same
# shape from v0.0.0 and the commit count, so that update bundles can always be ordered.
VERSION   ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || \
	echo "v0.0.0-$$(git rev-list --count HEAD 2>/dev/null || echo 0)-g$$(git rev-parse --short HEAD 2>/dev/null || echo 0000000)$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)")
GOFLAGS   := -trimpath -buildvcs=false
LDFLAGS   := -s -w -X main.version=$(VERSION)
# Executions, not seconds: Go 1.26's fuzz coordinator can fail a target with "context deadline
# exceeded" when a -fuzztime duration ends while a worker is busy (go.dev/issue/75804, fixed in
# 1.27), and it did here on a loaded machine; a count has no deadline to race. 40,000 runs take
# 2-15 s per target on 2 cores.
FUZZTIME  ?= 40000x
# Pure packages: no kernel, run with the race detector.
PURE      := ./daemon/app/... ./daemon/model/... ./daemon/plan/... ./daemon/runner/... ./daemon/metrics/... \
             ./daemon/healthz/... ./daemon/healthcheck/... ./daemon/source/... ./daemon/dashboard/... \
             ./daemon/lb/pool/... ./daemon/update ./firmware/... ./daemon/listener/... ./daemon/view/... \
             ./daemon/internal/layering ./daemon/internal/fault/... ./internal/...
# Real kernel state in network namespaces the tests create (test-netns; lab's cluster part
# is the cluster tier's).
NETNS     := ./daemon/kernel/... ./daemon/proxy/... ./daemon/lb ./daemon/lb/member/... ./daemon/lb/announce/...

.PHONY: all build demo demo-netns test test-unit test-netns fuzz vet deps deps-test clean

all: build

build: $(BIN)/edgegate $(BIN)/labhost $(BIN)/egdemo

# Always rebuilt: go's own cache makes that cheap and never stale.
.PHONY: $(BIN)/edgegate $(BIN)/labhost $(BIN)/egdemo
$(BIN)/edgegate:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -ldflags '$(LDFLAGS)' -o $@ ./daemon

$(BIN)/labhost:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -o $@ ./lab/cmd/labhost

$(BIN)/egdemo:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -o $@ ./lab/cmd/egdemo

# Debian packages the demo and the kernel tests use: iproute2 (ip netns), nftables (nft list
# ruleset, to read back what edgegate wrote), curl (the demo's client).
deps:
	@hack/deps.sh iproute2:ip nftables:nft curl:curl

# The tests also read iptables mode's rules back with Debian's stock iptables-nft tools,
# drive the dashboard in Debian's headless Chromium (the browser tier, lab/labtest/dashboard_test.go),
# and build, damage and check FAT32 images with dosfstools and mtools (firmware/fat, unit tier).
deps-test: deps
	@hack/deps.sh iptables:iptables-nft-save chromium:chromium dosfstools:mkfs.vfat mtools:mcopy

DEMO_ENV = EDGEGATE=$(abspath $(BIN)/edgegate) LABHOST=$(abspath $(BIN)/labhost) EGDEMO=$(abspath $(BIN)/egdemo)

# The gateway is the qemu-x86_64 disk image (make image) booted under QEMU through UEFI,
# provisioned with egprovision; its live update is a release of this same tree stamped as the
# next patch version (v1.2.3[-N-gHASH] -> v1.2.4-demo), built and signed into out/demo.
# demo-netns runs the same edgegate binary as a plain daemon in a namespace instead (no QEMU,
# no kernel download, no update).
DEMO_DIR            := out/demo
DEMO_UPDATE_VERSION  = $(shell echo '$(VERSION)' | awk -F'[v.-]' '{printf "v%d.%d.%d-demo", $$2, $$3, $$4 + 1}')
demo: deps deps-qemu build cluster-binaries $(BIN)/egprovision
	@echo "demo: building the gateway's disk image (make image BOARD=qemu-x86_64, version $(VERSION))"
	@$(MAKE) --no-print-directory image BOARD=qemu-x86_64 VERSION=$(VERSION)
	@echo "demo: building the live update (version $(DEMO_UPDATE_VERSION)) into $(DEMO_DIR)"
	@$(MAKE) --no-print-directory firmware bundle BOARD=qemu-x86_64 VERSION=$(DEMO_UPDATE_VERSION) \
		FIRMWARE_DIR=$(DEMO_DIR) BUNDLE_DIR=$(DEMO_DIR) FIRMWARE_INIT=$(DEMO_DIR)/init
	$(DEMO_ENV) GATEWAY=firmware EGPROVISION=$(abspath $(BIN)/egprovision) DISK=$(abspath out/firmware/qemu-x86_64/disk.img) \
		UPDATE=$(abspath $(DEMO_DIR)/edgegate-qemu-x86_64-$(DEMO_UPDATE_VERSION).bundle) bash lab/demo.sh

demo-netns: deps build cluster-binaries
	$(DEMO_ENV) GATEWAY=netns bash lab/demo.sh

test: deps-test vet test-unit fuzz test-netns test-cluster test-firmware
	@echo "make test: every tier passed"

# ./... skips testdata: the guest test programs the QEMU tests build are vetted by name.
vet:
	$(GO) vet ./... $(addprefix ./,$(wildcard qemu/testdata/*/))
	$(GO) vet -tags egfault ./daemon/internal/fault/...
	# bench/ is a module of its own over this checkout: a change here must not break it.
	cd bench && $(GO) vet ./...
	@out=$$(gofmt -l daemon lab board initramfs qemu firmware bench); if [ -n "$$out" ]; then echo "not gofmt-formatted:"; echo "$$out"; exit 1; fi
	@hack/tracked-files.sh
	@GO="$(GO)" hack/no-testing.sh
	@GO="$(GO)" hack/tiers.sh $(PURE) $(NETNS) ./lab/... ./daemon/node/... ./daemon/lb/alloc/... ./daemon/update/rollout/... ./board/... ./initramfs/... ./daemon/pid1/... ./qemu/...

# The fault hook's injections exist only in test images, built with the tag egfault.
test-unit:
	$(GO) test -race -count=1 $(PURE)
	$(GO) test -race -count=1 -tags egfault ./daemon/internal/fault/...

# Short coverage-guided runs of every fuzz target (their seed corpora also run in test-unit).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME) ./daemon/plan/nft
	$(GO) test -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME) ./daemon/plan/ipt
	$(GO) test -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME) ./daemon/plan/ipvs
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./daemon/source/manifests
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./daemon/lb/pool
	$(GO) test -run '^$$' -fuzz '^FuzzAllocate$$' -fuzztime $(FUZZTIME) ./daemon/lb/pool
	$(GO) test -run '^$$' -fuzz '^FuzzParseARP$$' -fuzztime $(FUZZTIME) ./daemon/kernel/l2
	$(GO) test -run '^$$' -fuzz '^FuzzParseNS$$' -fuzztime $(FUZZTIME) ./daemon/kernel/l2
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) ./firmware/bundle
	$(GO) test -run '^$$' -fuzz '^FuzzGlobMatch$$' -fuzztime $(FUZZTIME) ./daemon/pid1

# Real kernel rules and real TCP/UDP between network namespaces the tests create; needs root.
test-netns: build
	@hack/require-root.sh
	EDGEGATE_BIN=$(abspath $(BIN)/edgegate) $(GO) test -count=1 -timeout 20m $(NETNS) \
		$$($(GO) list ./lab/... | grep -v /lab/cluster)

clean:
	rm -rf $(BIN)

# The cluster tier: a real kube-apiserver and etcd built from hack/apiserver (test-cluster).
include hack/apiserver/apiserver.mk

# The firmware: boards, initramfs, PID 1 and the QEMU boot tests (firmware, test-firmware).
include board/firmware.mk

# Signed update bundles: make keys, make bundle BOARD=...
include firmware/bundle.mk

# Bootable disk images: make image BOARD=...
include firmware/image.mk

# Benchmarks side by side with upstream kube-proxy: make bench (not part of make test).
include bench/bench.mk
