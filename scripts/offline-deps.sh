#!/usr/bin/env bash
# Unpacks the libraries clkv builds against that a GPU machine often lacks (CLBlast and
# cmocka, with headers and CMake files) into DIR, without root, for machines that cannot
# reach a package registry: run it on a Debian/Ubuntu machine of the same release, copy DIR
# over, then configure with
#   cmake -S . -B build-gpu -DCMAKE_PREFIX_PATH=DIR/usr -DCLKV_WERROR=ON
# and run with LD_LIBRARY_PATH=DIR/usr/lib/<multiarch> (CLBlast is a shared library).
# The OpenCL headers, ICD loader and the GPU's OpenCL driver must already be there.
#   scripts/offline-deps.sh DIR
set -euo pipefail
if [[ $# -ne 1 || "$1" == -* ]]; then
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
DIR=$1
PACKAGES=(libclblast-dev libclblast1 libcmocka-dev libcmocka0)
mkdir -p "$DIR/debs"
DIR=$(cd "$DIR" && pwd)
# apt-get download writes into the current directory; a subshell keeps ours
(cd "$DIR/debs" && apt-get download "${PACKAGES[@]}")
for deb in "$DIR"/debs/*.deb; do
    dpkg-deb -x "$deb" "$DIR"
done
echo "offline-deps: unpacked ${PACKAGES[*]} into $DIR"
echo "configure with -DCMAKE_PREFIX_PATH=$DIR/usr; run with" \
    "LD_LIBRARY_PATH=$(dirname "$(find "$DIR/usr/lib" -name 'libclblast.so*' | head -1)")"
