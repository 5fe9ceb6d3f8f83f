#!/usr/bin/env bash
# Machine set-up for barebench, idempotent: the Rust target and components the build needs, and
# qemu-system-aarch64 >= 9.0 (10.x from Debian bookworm-backports; bookworm's own 7.2 has no raspi4b).
# Also the host tools the tests use (dosfstools, mtools) when asked with --test-tools.
set -euo pipefail

want_test_tools=0
[ "${1:-}" = "--test-tools" ] && want_test_tools=1

log() { printf 'deps: %s\n' "$*" >&2; }

# rust-toolchain.toml pins 1.95.0. A machine whose stable toolchain *is* 1.95.0 but which has no
# toolchain of that name gets a link (rustup cannot download here; only package registries are
# reachable), so that cargo and rustup work inside the repository.
pinned=$(sed -n 's/^channel = "\(.*\)"/\1/p' "$(dirname "$0")/../../rust-toolchain.toml")
if ! RUSTUP_TOOLCHAIN=stable rustup toolchain list | grep -q "^${pinned}"; then
  stable_version=$(RUSTUP_TOOLCHAIN=stable rustc --version | cut -d' ' -f2)
  if [ "$stable_version" = "$pinned" ]; then
    log "linking toolchain ${pinned} to the installed stable ${stable_version}"
    RUSTUP_TOOLCHAIN=stable rustup toolchain link "$pinned" "$(RUSTUP_TOOLCHAIN=stable rustc --print sysroot)"
  else
    log "Rust ${pinned} is not installed (stable is ${stable_version}); trying rustup toolchain install"
    RUSTUP_TOOLCHAIN=stable rustup toolchain install "$pinned" --profile minimal
  fi
fi
# Components and targets go into the stable directory when 1.95.0 is a link to it.
if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-none; then
  log "adding Rust target aarch64-unknown-none"
  rustup target add aarch64-unknown-none 2>/dev/null || RUSTUP_TOOLCHAIN=stable rustup target add aarch64-unknown-none
fi
for component in clippy rustfmt; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^${component}"; then
    log "adding Rust component ${component}"
    rustup component add "${component}" 2>/dev/null || RUSTUP_TOOLCHAIN=stable rustup component add "${component}" || log "could not add ${component} (optional)"
  fi
done

qemu_major() {
  command -v qemu-system-aarch64 >/dev/null 2>&1 || { echo 0; return; }
  qemu-system-aarch64 --version | sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p' | head -n1
}

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_updated=0
apt_update_once() {
  if [ "$apt_updated" -eq 0 ]; then
    $SUDO apt-get update -q >&2
    apt_updated=1
  fi
}

if [ "$(qemu_major)" -lt 9 ]; then
  log "installing qemu-system-arm from bookworm-backports (need qemu-system-aarch64 >= 9.0)"
  backports_file=/etc/apt/sources.list.d/barebench-backports.sources
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    $SUDO tee "$backports_file" >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  apt_update_once
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    -t bookworm-backports qemu-system-arm >&2
  if [ "$(qemu_major)" -lt 9 ]; then
    log "qemu-system-aarch64 is still older than 9.0 after installing; raspi4b needs >= 9.0"
    exit 1
  fi
fi

if [ "$want_test_tools" -eq 1 ]; then
  missing=()
  command -v fsck.fat >/dev/null 2>&1 || missing+=(dosfstools)
  command -v mdir >/dev/null 2>&1 || missing+=(mtools)
  command -v llvm-objcopy >/dev/null 2>&1 || missing+=(llvm)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing test tools: ${missing[*]}"
    apt_update_once
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
  fi
fi
log "ready: $(qemu-system-aarch64 --version | head -n1); rustc $(rustc --version | cut -d' ' -f2)"
