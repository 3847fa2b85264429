#!/usr/bin/env bash
# The test command of the README, and all that CI runs: set up (idempotent), build, run ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# CI has no GPU: the CPU build is the gate; the CUDA part is built and tested on the GPU
# machine by scripts/gpu-test.sh.
CMAKE_ARGS="-DTACHYON_CUDA=OFF ${CMAKE_ARGS:-}" scripts/setup.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" --timeout 600
