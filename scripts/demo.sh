#!/usr/bin/env bash
# Sets up, builds and runs `clkv demo` on the default device (PoCL's CPU when no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLKV_BUILD_TESTS=OFF
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target clkv_cli
./build/tools/clkv demo "$@"
