# barebench build and test entry points. `make` builds the kernel images; `make qemu` runs the
# benchmark under QEMU; `make test` runs every test. Both set the machine up first (`make deps`).

CARGO        ?= cargo
TARGET       := aarch64-unknown-none
PROFILE_DIR  := $(or $(CARGO_TARGET_DIR),target)/$(TARGET)/release
BUILD        := build
OBJCOPY      ?= llvm-objcopy

.PHONY: all deps kernel qemu test test-host test-e2e clippy fmt-check clean

all: kernel

deps:
	@tools/scripts/deps.sh --test-tools

kernel: $(BUILD)/kernel8.img $(BUILD)/kernel-virt.img

# Cargo decides whether anything changed; the images are always re-extracted from its output.
$(BUILD)/kernel8.img $(BUILD)/kernel-virt.img &: FORCE
	@mkdir -p $(BUILD)
	$(CARGO) build --release -p kernel --target $(TARGET) --bins
	$(OBJCOPY) -O binary $(PROFILE_DIR)/kernel8 $(BUILD)/kernel8.img
	$(OBJCOPY) -O binary $(PROFILE_DIR)/kernel-virt $(BUILD)/kernel-virt.img
	cp $(PROFILE_DIR)/kernel8 $(BUILD)/kernel8.elf
	cp $(PROFILE_DIR)/kernel-virt $(BUILD)/kernel-virt.elf
	@ls -l $(BUILD)/kernel8.img $(BUILD)/kernel-virt.img

FORCE:

# The main job: the benchmark (preset=quick) on QEMU virt with an emulated NVMe drive and SD card
# (sdhci-pci), both filled with the test pattern. SETTINGS adds or overrides settings, e.g.
# `make qemu SETTINGS="preset=reference"`.
# With `write=` in SETTINGS both images get a marked 256 MiB scratch region (rebuilt every run,
# written in place), e.g. `make qemu SETTINGS="write=nvme0,sd0 preset=randrw"`.
SETTINGS ?=
QEMU_DISK ?= 512M
comma := ,
QEMU_SCRATCH ?= $(if $(findstring write=,$(SETTINGS)),$(comma)scratch=256M)
qemu: deps kernel
	$(CARGO) run --release -q -p tools --bin barebench -- qemu --machine virt \
	  --nvme $(QEMU_DISK):pattern$(QEMU_SCRATCH) --sd $(QEMU_DISK):pattern$(QEMU_SCRATCH) \
	  --timeout 1800 -- preset=quick $(SETTINGS)

test: deps
	$(MAKE) test-host
	$(MAKE) kernel
	$(MAKE) clippy
	$(MAKE) test-e2e

test-host:
	$(CARGO) test --workspace --exclude kernel
	$(CARGO) test -p kernel --lib

test-e2e:
	$(CARGO) test -p tools --features e2e --test '*' -- --test-threads=2

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p kernel -p boot -p drivers -p blockdev -p bench --target $(TARGET) -- -D warnings

fmt-check:
	$(CARGO) fmt --all -- --check

clean:
	rm -rf $(BUILD)
	$(CARGO) clean
