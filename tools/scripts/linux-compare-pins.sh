#!/usr/bin/env bash
# Writes tools/src/compare_linux/packages.txt: the Debian bookworm arm64 packages that
# `barebench compare-linux` boots (docs/linux-compare.md): the kernel, busybox-static, fio and the
# packages holding every shared library fio loads, each as `PACKAGE VERSION SHA256` at the
# version APT offers now. Run it when the archive has dropped a pinned version. It uses the
# private arm64 APT root compare-linux keeps in ~/.cache/barebench/linux-compare/apt, made by its
# first download (a run whose pins are out of date still makes it).
#
# usage: tools/scripts/linux-compare-pins.sh KERNEL_PACKAGE=VERSION
#   e.g. tools/scripts/linux-compare-pins.sh linux-image-6.1.0-50-arm64=6.1.176-1
set -euo pipefail
kernel=${1:?usage: $0 linux-image-ABI-arm64=VERSION}
export APT_CONFIG=${APT_CONFIG:-$HOME/.cache/barebench/linux-compare/apt/apt.conf}
out=$(dirname "$0")/../src/compare_linux/packages.txt
apt-get -q update >/dev/null
# The libraries of fio as the host's fio (same Debian release) loads them, as package names.
libs=$(for f in $(ldd /usr/bin/fio | awk '/=>/{print $3} /ld-linux/{print $1}'); do
    dpkg -S "$(readlink -f "$f")" 2>/dev/null || dpkg -S "$f"; done | cut -d: -f1 | sort -u)
{
    sed -n '1,3p' "$out"
    for package in fio busybox-static "$kernel" $libs; do
        apt-cache show --no-all-versions "$package" |
            awk '/^Package:/ { name = $2 } /^Version:/ { version = $2 } /^SHA256:/ { sha = $2 }
                 END { print name, version, sha }'
    done
} > "$out.new"
mv "$out.new" "$out"
echo "wrote $out"
