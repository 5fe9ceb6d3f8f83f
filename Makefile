# barebench build and test entry points. `make` builds the kernel images; `make qemu` runs the
# benchmark under QEMU; `make test` runs every test. Both set the machine up first (`make deps`).

CARGO        ?= cargo
TARGET       := aarch64-unknown-none
PROFILE_DIR  := $(or $(CARGO_TARGET_DIR),target)/$(TARGET)/release
BUILD        := build
OBJCOPY      ?= llvm-objcopy

# The 32-bit Pis (Pi 1, Zero, Pi 2): one ARMv6 hard-float image for the ARM1176 and the Cortex-A7.
# armv6-none-eabihf is a tier-3 target without a prebuilt core, so this one build compiles core
# and alloc itself with -Zbuild-std, which a stable compiler allows only with RUSTC_BOOTSTRAP=1:
# an unsupported escape hatch, confined to this build and pinned to rust-toolchain.toml's compiler.
ARM32_TARGET      := armv6-none-eabihf
ARM32_PROFILE_DIR := $(or $(CARGO_TARGET_DIR),target)/$(ARM32_TARGET)/release
ARM32_BUILD       := RUSTC_BOOTSTRAP=1 $(CARGO) build --release -p kernel --target $(ARM32_TARGET) \
                     --bin kernel32 -Zbuild-std=core,alloc -Zbuild-std-features=compiler-builtins-mem
# The portable crates' and the kernel's 32-bit checks use the prebuilt armv7a-none-eabi: same
# target_arch, same 32-bit usize, no -Zbuild-std.
ARM32_CHECK_TARGET := armv7a-none-eabi

.PHONY: all deps kernel profiler qemu farm-qemu compare-linux test test-host test-e2e clippy fmt-check clean

all: kernel profiler

deps:
	@tools/scripts/deps.sh --test-tools

kernel: $(BUILD)/kernel8.img $(BUILD)/kernel-virt.img $(BUILD)/kernel.img $(BUILD)/kernel7.img

# Cargo decides whether anything changed; the images are always re-extracted from its output.
$(BUILD)/kernel8.img $(BUILD)/kernel-virt.img &: FORCE
	@mkdir -p $(BUILD)
	$(CARGO) build --release -p kernel --target $(TARGET) --bin kernel8 --bin kernel-virt
	$(OBJCOPY) -O binary $(PROFILE_DIR)/kernel8 $(BUILD)/kernel8.img
	$(OBJCOPY) -O binary $(PROFILE_DIR)/kernel-virt $(BUILD)/kernel-virt.img
	cp $(PROFILE_DIR)/kernel8 $(BUILD)/kernel8.elf
	cp $(PROFILE_DIR)/kernel-virt $(BUILD)/kernel-virt.elf
	@ls -l $(BUILD)/kernel8.img $(BUILD)/kernel-virt.img

# Pi 1 / Zero load kernel.img, Pi 2 v1.1 kernel7.img: the same bytes under both names, with the
# ELF (what QEMU's raspi0/raspi1ap/raspi2b can also load) beside them.
$(BUILD)/kernel.img $(BUILD)/kernel7.img &: FORCE
	@mkdir -p $(BUILD)
	$(ARM32_BUILD)
	$(OBJCOPY) -O binary $(ARM32_PROFILE_DIR)/kernel32 $(BUILD)/kernel.img
	cp $(BUILD)/kernel.img $(BUILD)/kernel7.img
	cp $(ARM32_PROFILE_DIR)/kernel32 $(BUILD)/kernel.elf
	cp $(ARM32_PROFILE_DIR)/kernel32 $(BUILD)/kernel7.elf
	@ls -l $(BUILD)/kernel.img $(BUILD)/kernel7.img

# The QEMU TCG plugin behind `barebench qemu --profile` (profiler/plugin/, docs/measurement.md §17).
profiler: $(BUILD)/libbarebench_profile.so

$(BUILD)/libbarebench_profile.so: FORCE
	@mkdir -p $(BUILD)
	$(CARGO) build --release -p profile-plugin
	cp $(or $(CARGO_TARGET_DIR),target)/release/libbarebench_profile.so $@

FORCE:

# The main job: the benchmark (preset=quick) on QEMU virt with an emulated NVMe drive and SD card
# (sdhci-pci), both filled with the test pattern. SETTINGS adds or overrides settings, e.g.
# `make qemu SETTINGS="preset=reference"`; QEMU_DEVICES adds devices, e.g. USB drives:
# `make qemu QEMU_DEVICES="--usb 512M:pattern --uas 512M:pattern"`.
# With `write=` in SETTINGS the NVMe and SD images get a marked 256 MiB scratch region (rebuilt every
# run, written in place), e.g. `make qemu SETTINGS="write=nvme0,sd0 preset=randrw"`.
SETTINGS ?=
QEMU_DISK ?= 512M
QEMU_DEVICES ?=
comma := ,
QEMU_SCRATCH ?= $(if $(findstring write=,$(SETTINGS)),$(comma)scratch=256M)
qemu: deps kernel
	$(CARGO) run --release -q -p tools --bin barebench -- qemu --machine virt \
	  --nvme $(QEMU_DISK):pattern$(QEMU_SCRATCH) --sd $(QEMU_DISK):pattern$(QEMU_SCRATCH) \
	  $(QEMU_DEVICES) --timeout 1800 -- preset=quick $(SETTINGS)

# The board farm on QEMU (docs/farm.md): tools/farm/qemu-lab starts a labgrid coordinator and
# exporter on this machine whose places are QEMU boards, and `barebench farm` runs FARM_SETTINGS on
# FARM_PLACES through them as it would on a rack of Pis: one log per place, the merged report.md and
# charts in build/farm/. Every process the lab starts is stopped at the end, even on failure.
FARM_PLACES   ?= raspi2b,raspi3b,raspi4b,virt
FARM_SETTINGS ?= preset=matrix write=sd0 ramp=0 runtime=2s runs=1
HOST_RELEASE  := $(or $(CARGO_TARGET_DIR),target)/release
farm-qemu: deps kernel
	$(CARGO) build --release -q -p tools --bin barebench
	BAREBENCH=$(HOST_RELEASE)/barebench LG_BAREBENCH_BUILD=$(CURDIR)/$(BUILD) tools/farm/qemu-lab $(BUILD)/farm/lab -- \
	  $(HOST_RELEASE)/barebench farm --env tools/farm/qemu-env.yaml --places $(FARM_PLACES) --output $(BUILD)/farm \
	  --no-firmware --size 64M --scratch 16M --timeout 600 -- $(FARM_SETTINGS)

# Linux + fio against barebench on the same QEMU virt devices (docs/linux-compare.md): downloads
# Debian's arm64 kernel and fio once (about 100 MB, cached), then boots each side once per device.
# Not part of `make test`. COMPARE_OPTIONS passes options on, e.g. `--runs 3 --icount`.
COMPARE_OPTIONS ?=
compare-linux: deps kernel
	$(CARGO) run --release -q -p tools --bin barebench -- compare-linux --output $(BUILD)/compare-linux.md \
	  $(COMPARE_OPTIONS)

test: deps
	$(MAKE) test-host
	$(MAKE) kernel profiler
	$(MAKE) clippy
	$(MAKE) test-e2e

test-host:
	$(CARGO) test --workspace --exclude kernel
	$(CARGO) test -p kernel --lib

test-e2e:
	$(CARGO) test -p tools --features e2e --test '*' -- --test-threads=2

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p tools --features e2e --all-targets -- -D warnings
	$(CARGO) clippy -p kernel -p boot -p hal -p drivers -p blockdev -p bench --target $(TARGET) -- -D warnings
	$(CARGO) clippy -p kernel -p boot -p hal -p drivers -p blockdev -p bench --target $(ARM32_CHECK_TARGET) -- -D warnings

fmt-check:
	$(CARGO) fmt --all -- --check

clean:
	rm -rf $(BUILD)
	$(CARGO) clean
