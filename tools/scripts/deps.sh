#!/usr/bin/env bash
# Machine set-up for barebench, idempotent: the Rust targets and components the build needs
# (aarch64-unknown-none; armv7a-none-eabi and rust-src for the 32-bit Pis, whose ARMv6 image builds
# core with -Zbuild-std), and qemu-system-aarch64 >= 9.0 with qemu-system-arm beside it (10.x from
# Debian bookworm-backports; bookworm's own 7.2 has no raspi4b).
# Also the host tools the tests use (dosfstools, mtools, llvm, losetup, fio's fio_jsonplus_clat2csv)
# when asked with --test-tools, and a cached Python virtual environment with fio-plot 1.1.21 from
# PyPI (BAREBENCH_VENV, default ~/.cache/barebench/venv) for the fio-plot end-to-end test, and
# another with labgrid 26.0.1 (BAREBENCH_LABGRID_VENV, default ~/.cache/barebench/labgrid-venv)
# for the board farm (`barebench farm`, `make farm-qemu` and its end-to-end test, docs/farm.md).
#
# System packages are installed only on Debian 12 (bookworm), the system this was written for:
# there it adds a bookworm-backports APT source when none is configured and installs with apt-get.
# On any other system it changes nothing outside the Rust toolchain: it lists exactly what is
# missing and stops (exit status 1), so that the user installs it with their own package manager.
# BAREBENCH_OS_RELEASE names another os-release file (for tests; default /etc/os-release).
set -euo pipefail

want_test_tools=0
[ "${1:-}" = "--test-tools" ] && want_test_tools=1

log() { printf 'deps: %s\n' "$*" >&2; }

# rust-toolchain.toml pins 1.95.0. A machine whose stable toolchain *is* 1.95.0 but which has no
# toolchain of that name gets a link (rustup may not reach its download server where only package
# registries are reachable), so that cargo and rustup work inside the repository.
# Lists are read whole before grep -q looks at them: with pipefail, `rustup ... | grep -q` fails
# at random when grep exits at the first match and rustup then dies of SIGPIPE.
pinned=$(sed -n 's/^channel = "\(.*\)"/\1/p' "$(dirname "$0")/../../rust-toolchain.toml")
toolchains=$(RUSTUP_TOOLCHAIN=stable rustup toolchain list)
if ! grep -q "^${pinned}" <<<"$toolchains"; then
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
installed_targets=$(rustup target list --installed 2>/dev/null || true)
for target in aarch64-unknown-none armv7a-none-eabi; do
  if ! grep -qx "$target" <<<"$installed_targets"; then
    log "adding Rust target $target"
    rustup target add "$target" 2>/dev/null || RUSTUP_TOOLCHAIN=stable rustup target add "$target"
  fi
done
installed_components=$(rustup component list --installed 2>/dev/null || true)
if ! grep -q "^rust-src" <<<"$installed_components"; then
  log "adding Rust component rust-src (the 32-bit Pi image builds core from it)"
  rustup component add rust-src 2>/dev/null || RUSTUP_TOOLCHAIN=stable rustup component add rust-src
fi
for component in clippy rustfmt; do
  if ! grep -q "^${component}" <<<"$installed_components"; then
    log "adding Rust component ${component}"
    rustup component add "${component}" 2>/dev/null || RUSTUP_TOOLCHAIN=stable rustup component add "${component}" || log "could not add ${component} (optional)"
  fi
done

# The first line of `qemu-system-aarch64 --version`, or "none".
qemu_version_line() {
  local text=""
  command -v qemu-system-aarch64 >/dev/null 2>&1 && text=$(qemu-system-aarch64 --version 2>/dev/null || true)
  [ -n "$text" ] || text=none
  printf '%s\n' "${text%%$'\n'*}"
}

qemu_major() {
  local major
  major=$(sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p' <<<"$(qemu_version_line)")
  echo "${major:-0}"
}

# "debian 12" on Debian bookworm; the values of ID and VERSION_ID from os-release(5).
os_release_file=${BAREBENCH_OS_RELEASE:-/etc/os-release}
os_id=""
os_version=""
if [ -r "$os_release_file" ]; then
  os_id=$(sed -n 's/^ID="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$os_release_file" | head -n1)
  os_version=$(sed -n 's/^VERSION_ID="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$os_release_file" | head -n1)
fi
is_debian_12=0
[ "$os_id" = "debian" ] && [ "$os_version" = "12" ] && is_debian_12=1

# What is missing, as "what it is (Debian package)" lines, and the Debian packages to install.
missing=()
debian_packages=()
qemu_from_backports=0
if [ "$(qemu_major)" -lt 9 ] || ! command -v qemu-system-arm >/dev/null 2>&1; then
  missing+=("qemu-system-aarch64 >= 9.0 and qemu-system-arm (raspi0, raspi1ap, raspi2b), found: $(qemu_version_line) (Debian: qemu-system-arm from bookworm-backports; Ubuntu 24.04: qemu-system-arm; Fedora: qemu-system-aarch64)")
  qemu_from_backports=1
fi
if [ "$want_test_tools" -eq 1 ]; then
  if ! command -v fsck.fat >/dev/null 2>&1; then
    missing+=("fsck.fat (package dosfstools)")
    debian_packages+=(dosfstools)
  fi
  if ! command -v mdir >/dev/null 2>&1; then
    missing+=("mdir (package mtools)")
    debian_packages+=(mtools)
  fi
  if ! command -v llvm-objcopy >/dev/null 2>&1; then
    missing+=("llvm-objcopy (package llvm)")
    debian_packages+=(llvm)
  fi
  # The card-writing test attaches a loop device; losetup is in /usr/sbin, off a user's PATH.
  if ! command -v losetup >/dev/null 2>&1 && [ ! -x /usr/sbin/losetup ] && [ ! -x /sbin/losetup ]; then
    missing+=("losetup (package mount; util-linux on other systems)")
    debian_packages+=(mount)
  fi
  # fio's json+ to CSV converter, run on barebench's json+ output by the fio-consumers test.
  if ! command -v fio_jsonplus_clat2csv >/dev/null 2>&1; then
    missing+=("fio_jsonplus_clat2csv (package fio)")
    debian_packages+=(fio)
  fi
  # fio-plot runs in a Python virtual environment: `python3 -m venv` needs ensurepip, which
  # Debian ships in python3-venv (and a minimal system may have no python3 at all).
  if ! command -v python3 >/dev/null 2>&1; then
    missing+=("python3 with its venv module (packages python3, python3-venv)")
    debian_packages+=(python3 python3-venv)
  elif ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
    missing+=("python3 venv module (package python3-venv)")
    debian_packages+=(python3-venv)
  fi
fi

if [ "${#missing[@]}" -gt 0 ] && [ "$is_debian_12" -eq 0 ]; then
  log "this is not Debian 12 (${os_release_file}: ID=${os_id:-?} VERSION_ID=${os_version:-?}), so nothing is installed;"
  log "install these with your package manager, then run make again:"
  for item in "${missing[@]}"; do
    log "  - ${item}"
  done
  exit 1
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_updated=0
apt_update_once() {
  if [ "$apt_updated" -eq 0 ]; then
    $SUDO apt-get update -q >&2
    apt_updated=1
  fi
}

if [ "$qemu_from_backports" -eq 1 ]; then
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

if [ "${#debian_packages[@]}" -gt 0 ]; then
  log "installing test tools: ${debian_packages[*]}"
  apt_update_once
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${debian_packages[@]}" >&2
fi
# fio-plot 1.1.21 (and six for fio_jsonplus_clat2csv) in a virtual environment, made once.
# Best effort: without Python or PyPI the fio-consumers test says what is missing.
venv_dir=${BAREBENCH_VENV:-${HOME:+$HOME/.cache/barebench/venv}}
if [ "$want_test_tools" -eq 1 ] && [ -n "$venv_dir" ] && [ ! -x "$venv_dir/bin/fio-plot" ]; then
  if command -v python3 >/dev/null 2>&1; then
    log "creating ${venv_dir} with fio-plot 1.1.21 from PyPI"
    { python3 -m venv "$venv_dir" && "$venv_dir/bin/pip" install -q 'fio-plot==1.1.21' six >&2; } \
      || log "could not set up fio-plot in ${venv_dir}; the fio-plot test will fail and say so"
  else
    log "no python3: fio-plot is not set up; the fio-plot test will fail and say so"
  fi
fi
# labgrid 26.0.1 in a virtual environment of its own (its pinned dependencies are not
# fio-plot's), made once and remade when it holds another version. Best effort too: without it
# `make farm-qemu` and the farm test say what is missing.
labgrid_version=26.0.1
labgrid_venv=${BAREBENCH_LABGRID_VENV:-${HOME:+$HOME/.cache/barebench/labgrid-venv}}
labgrid_installed() {
  "$labgrid_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("labgrid"))' 2>/dev/null
}
if [ "$want_test_tools" -eq 1 ] && [ -n "$labgrid_venv" ] && [ "$(labgrid_installed)" != "$labgrid_version" ]; then
  if command -v python3 >/dev/null 2>&1; then
    log "creating ${labgrid_venv} with labgrid ${labgrid_version} from PyPI"
    { python3 -m venv "$labgrid_venv" && "$labgrid_venv/bin/pip" install -q "labgrid==${labgrid_version}" >&2; } \
      || log "could not set up labgrid in ${labgrid_venv}; the farm test will fail and say so"
  else
    log "no python3: labgrid is not set up; the farm test will fail and say so"
  fi
fi
log "ready: $(qemu_version_line); rustc $(rustc --version | cut -d' ' -f2)"
