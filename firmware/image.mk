# Bootable disk images (firmware/image, firmware/cmd/mkimage), included by the top-level
# Makefile after board/firmware.mk and firmware/bundle.mk (BOARD, KEYS_DIR, BUNDLE, VERSION).
#
#   make image BOARD=qemu-x86_64   out/firmware/<board>/disk.img: a GPT disk with the EFI
#                                  system partition (systemd-boot, slot A from this
#                                  version's bundle, slot B empty) and the data partition;
#                                  image.json beside it says what went in (the
#                                  systemd-boot-efi version, the bundle's manifest), and
#                                  the layout is printed
#   make deps-image                the tools it runs (Debian packages)
#   make provision PROVISION="-api-server https://10.0.0.1:6443 -token-file token -ca-file ca.crt"
#                                  writes a gateway's identity and configuration into the
#                                  data partition of DISK (default: the board's disk.img; a
#                                  block device the image was written to works too), checked
#                                  with the daemon's own parsers first (egprovision -h)
#
# image builds the firmware and its bundle for the board first, with the key pair in
# out/keys (made when missing, kept when present): the firmware trusts that key, the bundle
# is signed with it, and slot A is written from the bundle after it verified. systemd-boot
# is Debian's systemd-boot-efi of the board's architecture, fetched with apt-get download
# and unpacked with dpkg -x into out/debian, never installed (arm64 boards add the arm64
# dpkg architecture once, which needs root). Nothing is mounted: mkfs.vfat and mtools make
# and fill the ESP, mke2fs the data partition, and the GPT is written in Go.

IMAGE_DIR   = out/firmware/$(BOARD)
IMAGE       = $(IMAGE_DIR)/disk.img
DEBIAN_CACHE := out/debian

DISK        ?= $(IMAGE)

.PHONY: image deps-image provision $(BIN)/egprovision

image: deps-image keys
	$(MAKE) --no-print-directory firmware BOARD=$(BOARD) VERSION=$(VERSION)
	$(MAKE) --no-print-directory bundle BOARD=$(BOARD) VERSION=$(VERSION)
	$(GO) run ./firmware/cmd/mkimage -board $(BOARD) -bundle $(BUNDLE) -pub $(KEYS_DIR)/firmware.pub \
		-cache $(DEBIAN_CACHE) -out $(IMAGE)

deps-image:
	@hack/deps.sh dosfstools:mkfs.vfat mtools:mcopy e2fsprogs:mke2fs e2fsprogs:debugfs

$(BIN)/egprovision:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -o $@ ./firmware/cmd/egprovision

provision: deps-image $(BIN)/egprovision
	$(BIN)/egprovision -disk $(DISK) $(PROVISION)
