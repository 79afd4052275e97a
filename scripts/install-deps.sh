#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages clkv needs to build, test and run on the CPU
# (PoCL). Idempotent: packages already present are left alone.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  ocl-icd-opencl-dev opencl-headers ocl-icd-libopencl1
  pocl-opencl-icd clinfo
  libclblast-dev
  libcmocka-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=sudo
  else
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run this script as root (or install sudo), e.g.:" >&2
    echo "  su -c 'apt-get update && apt-get install -y ${missing[*]}'" >&2
    exit 1
  fi
else
  SUDO=
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
