#!/usr/bin/env bash
# Runs on the GPU machine after scripts/gpu-test.sh has built build-gpu/: builds the tachyon CLI
# of a base source tree (BASE_SRC: a copy of an earlier commit's src/, e.g. from
# `git archive <commit> src | tar -x -C build-base-src`) beside it and times both with
# scripts/gpu-bench.sh in one call, base first then this tree, each run with the same models and
# the same cached kernel choices, so the two are compared on equal terms.
#   bench/compare_with_base.sh OUT_DIR [run names...]   (default: every run of gpu-bench.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: bench/compare_with_base.sh OUT_DIR [runs...]}
shift
BASE_SRC=${BASE_SRC:-build-base-src/src}
BASE_TREE=/tmp/tachyon-base-tree
rm -rf "$BASE_TREE" && mkdir -p "$BASE_TREE"
cp -r CMakeLists.txt assets bench tests tools "$BASE_TREE"/  # bench/: configure only; its targets are not built
cp -r "$BASE_SRC" "$BASE_TREE/src"
cmake -S "$BASE_TREE" -B /tmp/tachyon-base-build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTACHYON_CUDA=ON \
  -DTACHYON_TESTS=OFF > "$OUT_DIR-base-build.log" 2>&1
cmake --build /tmp/tachyon-base-build -j "$(nproc)" --target tachyon_cli >> "$OUT_DIR-base-build.log" 2>&1
for run in ${*:-8b-b1-decode 1b-b1-decode 8b-prefill-2048 8b-b64-ctx1k}; do
  TACHYON=/tmp/tachyon-base-build/bin/tachyon ONLY=$run scripts/gpu-bench.sh "$OUT_DIR/base" tachyon | tail -n +2
  ONLY=$run scripts/gpu-bench.sh "$OUT_DIR/new" tachyon | tail -n +2
done
