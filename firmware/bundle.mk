# Signed firmware update bundles (firmware/bundle, firmware/cmd/egbundle), included by the
# top-level Makefile (which defines GO, GOFLAGS, BIN and VERSION; BOARD defaults in
# board/firmware.mk).
#
#   make keys                      a development signing key pair in out/keys (kept if present):
#                                  firmware.key (0600) and firmware.pub
#   make bundle BOARD=qemu-x86_64  out/firmware/<board>/edgegate-<board>-<version>.bundle from
#                                  what `make firmware BOARD=...` left there, signed with
#                                  out/keys/firmware.key
#     EPOCH=n                      its security epoch (default 0): raise it with a security fix;
#                                  a gateway that committed epoch n never installs a bundle of a
#                                  lower one, force or not
#     NEXT_KEYS="a.pub b.pub" KEY_GENERATION=g
#                                  rotate the signing keys: once this firmware commits, gateways
#                                  trust exactly these keys (g above every earlier generation;
#                                  the keys baked into the firmware are generation 0)
#
# The bundle's version is $(VERSION), the one `make firmware` stamps into the binary, so it
# must be a release tag or git describe of one (v0.4.0, v0.4.0-12-gabc1234[-dirty]): with no
# v* tag in the repository git describe prints a bare commit, which egbundle refuses; pass
# VERSION=vX.Y.Z to both make firmware and make bundle then. bundle neither rebuilds the
# firmware nor makes keys behind your back: gateways only accept bundles signed with a key
# they already trust, so a key made on the fly would sign bundles nobody accepts.

KEYS_DIR      ?= out/keys
BUNDLE_DIR     = out/firmware/$(BOARD)
BUNDLE         = $(BUNDLE_DIR)/edgegate-$(BOARD)-$(VERSION).bundle
EPOCH         ?= 0
NEXT_KEYS     ?=
KEY_GENERATION ?=

.PHONY: keys bundle $(BIN)/egbundle

$(BIN)/egbundle:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -o $@ ./firmware/cmd/egbundle

keys: $(BIN)/egbundle
	$(BIN)/egbundle keys -dir $(KEYS_DIR)

bundle: $(BIN)/egbundle
	@for f in $(BUNDLE_DIR)/vmlinuz $(BUNDLE_DIR)/initramfs.cpio.gz; do \
		if [ ! -f $$f ]; then echo "$$f missing: run make firmware BOARD=$(BOARD) first" >&2; exit 1; fi; done
	@if [ ! -f $(KEYS_DIR)/firmware.key ]; then \
		echo "$(KEYS_DIR)/firmware.key missing: run make keys first" >&2; exit 1; fi
	$(BIN)/egbundle make -board $(BOARD) -version $(VERSION) \
		-kernel $(BUNDLE_DIR)/vmlinuz -initramfs $(BUNDLE_DIR)/initramfs.cpio.gz \
		-key $(KEYS_DIR)/firmware.key -out $(BUNDLE) -security-epoch $(EPOCH) \
		$(foreach k,$(NEXT_KEYS),-next-key $(k)) $(if $(KEY_GENERATION),-key-generation $(KEY_GENERATION))
