#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite on the default OpenCL device (PoCL's CPU
# when no GPU is present; CLKV_DEVICE picks another). Then rebuilds the host-side tests
# with AddressSanitizer + UndefinedBehaviorSanitizer and runs them (ctest -L sanitize).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

JOBS=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLKV_WERROR=ON
cmake --build build -j "$JOBS"
ctest --test-dir build --output-on-failure -j "$JOBS"

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCLKV_WERROR=ON \
  -DCLKV_SANITIZE=address,undefined -DCLKV_BUILD_TOOLS=OFF
cmake --build build-asan -j "$JOBS"
# PoCL and the ICD loader keep a few process-lifetime allocations; suppress only those.
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
ctest --test-dir build-asan --output-on-failure -L sanitize -j 1
