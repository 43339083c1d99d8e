# Firmware for the boards under board/, included by the top-level Makefile (which defines
# GO, GOFLAGS and LDFLAGS).
#
#   make firmware BOARD=qemu-x86_64   kernel + initramfs in out/firmware/<board>/:
#                                     vmlinuz, initramfs.cpio.gz, build.json (what went in);
#                                     the initramfs trusts out/keys/firmware.pub for updates
#                                     (made first by `make keys` when missing)
#   make deps-qemu                    QEMU for both architectures and their UEFI firmware,
#                                     and the disk image tools (Debian packages)
#   make test-firmware                the board, initramfs, PID 1 and QEMU tests: every board
#                                     booted with a stand-in init, and the QEMU boards booted
#                                     with the real firmware (edgegate as PID 1)
#
# The kernel is the Debian package the board names, resolved with apt-cache, fetched with
# apt-get download and unpacked with dpkg -x into out/kernels (never installed on the host;
# reused while Debian's version stays the same). arm64 boards add the arm64 dpkg
# architecture once. Those steps need root the first time.

BOARD          ?= qemu-x86_64
BOARDS         := $(patsubst board/%/board.yaml,%,$(wildcard board/*/board.yaml))
FIRMWARE_DIR   := out/firmware/$(BOARD)
KERNEL_CACHE   := out/kernels
BOARD_ARCH      = $(shell sed -n 's/^arch: *//p' board/$(BOARD)/board.yaml)
FIRMWARE_INIT   = out/bin/linux-$(BOARD_ARCH)/edgegate

.PHONY: firmware deps-qemu test-firmware

# keys keeps an existing key pair: the firmware trusts the key that signs its updates.
firmware: keys
	@if [ ! -f board/$(BOARD)/board.yaml ]; then echo "unknown BOARD=$(BOARD); boards: $(BOARDS)" >&2; exit 1; fi
	CGO_ENABLED=0 GOOS=linux GOARCH=$(BOARD_ARCH) $(GO) build $(GOFLAGS) -ldflags '$(LDFLAGS)' -o $(FIRMWARE_INIT) ./daemon
	$(GO) run ./initramfs/cmd/mkinitramfs -board $(BOARD) -init $(FIRMWARE_INIT) -cache $(KERNEL_CACHE) \
		-update-key $(KEYS_DIR)/firmware.pub -out $(FIRMWARE_DIR)

# The UEFI firmware packages ship files, not commands, so hack/deps.sh cannot check them:
# the boards' qemu.uefi sections name the files (Debian's ovmf and qemu-efi-aarch64).
UEFI_FILES := /usr/share/OVMF/OVMF_CODE_4M.fd:ovmf /usr/share/AAVMF/AAVMF_CODE.fd:qemu-efi-aarch64

deps-qemu: deps-image
	@hack/deps.sh qemu-system-x86:qemu-system-x86_64 qemu-system-arm:qemu-system-aarch64 e2fsprogs:mke2fs fdisk:sfdisk
	@missing=; for fp in $(UEFI_FILES); do [ -f $${fp%%:*} ] || missing="$$missing $${fp#*:}"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" -ne 0 ]; then echo "missing Debian packages:$$missing (run as root, or install them)" >&2; exit 1; fi; \
		echo "installing Debian packages:$$missing"; apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; fi

# TestBootSmoke boots every board with the harness's stand-in PID 1 (every module of the
# board loaded, a Go test binary run in the guest). TestFirmwareBoot boots qemu-x86_64 and
# qemu-arm64 with the real firmware, edgegate as PID 1 on baked standalone manifests, twice
# each (once with the daemon panicking), checks the rules and TCP through a ClusterIP inside
# the guest, and logs boot-to-ready times and initramfs sizes (-v shows them). TestIPVS boots
# both QEMU boards in ipvs mode (the development hosts have no IPVS) and runs package labtest's
# traffic matrix inside the guest: in full on qemu-x86_64, a smoke subset on qemu-arm64, plus
# the schedulers, IPVS counters, graceful termination and switching among the three modes.
# The boards boot side by side: on 2 cores that was faster (43 s) than one after the other
# (60 s); TestIPVS takes about 70 s more. TestDiskImage (qemu/image_test.go) builds disk
# images (make image's) of every board with a test update key and boots them through UEFI
# (OVMF, AAVMF) from the board's kind of disk (virtio; an NVMe SSD on pc-x86_64; a USB stick
# behind xHCI on generic-arm64, whose SCSI disk's driver loads from a device event):
# systemd-boot boots slot A; a slot B on trial that cannot boot is tried once, the machine
# reboots into A by itself and the entry on the disk says edgegate-b+0-1.conf (about 120 s
# for the four boards). TestUpdate (qemu/update_test.go) updates a gateway booted from its disk
# image through the dashboard. On both boards a good update commits and a release that
# panics at boot rolls back by itself, on a disk that records every write; the power-cut
# matrix then replays a cut before every flush of that run on a disk that loses unflushed
# writes and boots 10 of them (qemu/powercut_test.go). On qemu-x86_64 a second gateway,
# beside it, goes through the rest: refused bundles write nothing, a good update survives a
# power cut right after the commit, a release that never becomes healthy rolls back, a
# staged update is activated later (about 9.5 min for all three chains). TestFleetRollout
# (qemu/fleet_test.go) joins three qemu-x86_64 gateways to a real kube-apiserver (the
# cluster tier's build) and rolls FirmwareRollouts out, one gateway's daemon panicking in its
# slot Lease's renewer on the way (about 5 min). TestHardwareGateway (qemu/hardware_test.go)
# brings up a pc-x86_64 and a generic-arm64 gateway from their disk images provisioned by
# egprovision, booted from NVMe and USB with four e1000e NICs on a lab's taps: joined to a real
# kube-apiserver, the traffic matrix's ClusterIP, NodePort and LoadBalancer rows, an update
# committed and a panicking release rolled back (about 3 min each). TestDemo runs `make demo`
# itself, its live update included (about 1 min warm). Under CI=true a
# missing QEMU, UEFI firmware, tool or kernel fails, never skips.
test-firmware: deps-qemu
	@hack/require-root.sh
	$(GO) test -count=1 -timeout 45m ./board/... ./initramfs/... ./daemon/pid1/... ./qemu/...
