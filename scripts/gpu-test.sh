#!/usr/bin/env bash
# Runs on the GPU machine (Ubuntu 24.04, CUDA 13, Python with torch/transformers/tokenizers),
# from a checkout carrying .deps/ (scripts/gpu-machine-deps.sh fetch) and
# third_party/tokenizers/models/. It
#   1. builds everything there with the CUDA part on, and runs the whole ctest suite;
#   2. regenerates the model goldens with the machine's transformers and runs the golden test
#      against those fresh ones too, so a transformers change that moves the reference shows;
#   3. scores the canary model through the server on the GPU (before step 2's goldens), and runs
#      the prefill/decode servers' suite with the servers on the GPU.
# CUDA kernel tests join step 1 as they land (tests/gpu/).
#   scripts/gpu-test.sh [OUT_DIR]     OUT_DIR receives logs (default: out/gpu-test)
#   GPU_ONLY=1 SKIP_FRESH_GOLDENS=1 scripts/gpu-test.sh OUT_DIR   the GPU tests and canaries alone
#   GPU_PARTS="tests" / "canaries pd" / "goldens" scripts/gpu-test.sh OUT_DIR   some parts (default: all):
#     tests = the CPU ctest suite (not with GPU_ONLY), the GPU test binaries (each run once, whole:
#     scripts/gpu-test-binaries.sh; GPU_TESTS='cuda_fp8|gemv' picks some) and the GPU goldens;
#     canaries = the canaries served on the GPU; pd = the PD servers' suite on the GPU; goldens =
#     the fresh CPU goldens. The whole script may not fit one 10-minute call on the GPU machine:
#     run it as two or three calls on one warm machine (each builds incrementally into the same
#     directory).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-out/gpu-test}
mkdir -p "$OUT_DIR"
BUILD_DIR=build-gpu
PARTS=" ${GPU_PARTS:-tests canaries pd goldens} "
[ -n "${SKIP_FRESH_GOLDENS:-}" ] && PARTS=${PARTS/ goldens / }
part() { [[ "$PARTS" == *" $1 "* ]]; }

scripts/gpu-machine-deps.sh install
# GPU_ONLY=1: build and run the GPU tests alone (the binary, tests/gpu_*), when the CPU suite has
# passed elsewhere on the same tree; it saves the CPU tests' build within the machine's time.
if [ -n "${GPU_ONLY:-}" ]; then
  TACHYON_OFFLINE=1 BUILD_DIR=$BUILD_DIR JOBS=$(nproc) CMAKE_ARGS="-DTACHYON_CUDA=ON" BUILD_TARGETS=tachyon_cli \
    scripts/setup.sh > "$OUT_DIR/build.log" 2>&1 || { tail -50 "$OUT_DIR/build.log"; exit 1; }
  gpu_targets=$(ninja -C $BUILD_DIR -t targets all | sed -n 's|^tests/\(gpu_[a-z0-9_]*\): .*|\1|p' | sort -u)
  # shellcheck disable=SC2086
  cmake --build $BUILD_DIR -j "$(nproc)" --target $gpu_targets >> "$OUT_DIR/build.log" 2>&1 \
    || { tail -50 "$OUT_DIR/build.log"; exit 1; }
else
  TACHYON_OFFLINE=1 BUILD_DIR=$BUILD_DIR JOBS=$(nproc) CMAKE_ARGS="-DTACHYON_CUDA=ON" scripts/setup.sh \
    > "$OUT_DIR/build.log" 2>&1 || { tail -50 "$OUT_DIR/build.log"; exit 1; }
fi
echo "== build: ok ($(grep -c 'Building' "$OUT_DIR/build.log") objects)"

fresh=$(mktemp -d)
ctest_rc=0
if part tests; then
  export TACHYON_GPU_GOLDEN_MODELS="$fresh/gpu-models" TACHYON_GPU_GOLDENS="$fresh/gpu-goldens"
  TACHYON=$BUILD_DIR/bin/tachyon tools/make_golden_models.sh "$TACHYON_GPU_GOLDEN_MODELS" \
    tests/data/goldens/gpu_manifest.json > /dev/null
  python3 tools/make_goldens.py --manifest tests/data/goldens/gpu_manifest.json --models "$TACHYON_GPU_GOLDEN_MODELS" \
    --out "$TACHYON_GPU_GOLDENS" --dtype bfloat16 --device cuda > "$OUT_DIR/gpu-goldens.log" 2>&1 \
    || { echo "== GPU goldens: some failed (gpu.hf_goldens will fail for them):"; tail -20 "$OUT_DIR/gpu-goldens.log"; }
  cp tests/data/goldens/gpu_manifest.json "$TACHYON_GPU_GOLDENS/"

  set +e
  # The CPU suite through ctest (CTEST_ARGS narrows it); the GPU binaries each run once, whole
  # (scripts/gpu-test-binaries.sh; GPU_TESTS picks binaries by name, e.g. 'cuda_fp8|gemv').
  if [ -z "${GPU_ONLY:-}" ]; then
    ctest --test-dir $BUILD_DIR -j "$(nproc)" --timeout "${CTEST_TIMEOUT:-600}" --output-on-failure \
      -E '^gpu\.' ${CTEST_ARGS:-} > "$OUT_DIR/ctest.log" 2>&1
    ctest_rc=$?
    grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" "$OUT_DIR/ctest.log" | tail -20
  fi
  scripts/gpu-test-binaries.sh $BUILD_DIR "$OUT_DIR/gpu-tests" "${GPU_TESTS:-.*}" || ctest_rc=1
  set -e
  grep -h "gpu golden\]" "$OUT_DIR"/gpu-tests/gpu_hf_goldens.log 2>/dev/null || true
fi

# The accuracy canary through `tachyon serve --device cuda` + `tachyon eval`, as ctest's
# server.canary_accuracy runs it on the CPU (the server is built where cpp-httplib and Boost are found).
canary_rc=0
if ! part canaries; then
  echo "== canaries on the GPU: not run (GPU_PARTS)"
elif "$BUILD_DIR/bin/tachyon" serve --help > /dev/null 2>&1; then
  echo "== canary on the GPU:"
  XDG_CACHE_HOME="$fresh/cache" MIN_ACCURACY=0.97 scripts/canary-eval.sh "$BUILD_DIR/bin/tachyon" - \
    "$OUT_DIR/canary" 200 --device cuda || canary_rc=1
  echo "== canary with online FP8 weights on the GPU:"
  XDG_CACHE_HOME="$fresh/cache" MIN_ACCURACY=0.97 scripts/canary-eval.sh "$BUILD_DIR/bin/tachyon" - \
    "$OUT_DIR/canary-fp8" 200 --device cuda --quantization fp8 || canary_rc=1
  echo "== canary with online FP8 weights and an FP8 KV cache on the GPU:"
  XDG_CACHE_HOME="$fresh/cache" MIN_ACCURACY=0.97 scripts/canary-eval.sh "$BUILD_DIR/bin/tachyon" - \
    "$OUT_DIR/canary-fp8-kv" 200 --device cuda --quantization fp8 --kv-cache-dtype fp8 || canary_rc=1
  echo "== canary with n-gram drafts on the GPU (completions against the plain run's):"
  XDG_CACHE_HOME="$fresh/cache" scripts/canary-speculative.sh "$BUILD_DIR/bin/tachyon" "$OUT_DIR/canary/eval.json" \
    "$OUT_DIR/canary-ngram" 200 --device cuda --speculative-method ngram --num-speculative-tokens 3 --ngram-min 1 \
    --ngram-max 3 || canary_rc=1
else
  echo "== canary on the GPU: not run (no server in this build: cpp-httplib or Boost missing)"
fi
# Prefill/decode disaggregation with the servers on the GPU: the servers' PD suite (CPU in CI), the
# prefill and decode servers sharing the GPU, so the KV moves by reference (CUDA IPC). One test at
# a time: each test's servers share the kernel choices its first server timed (one plan, one set
# of kernels), which a test timing at the same moment could otherwise write over.
if part pd; then
  echo "== PD suite on the GPU:"
  set +e
  pd_tests="router|guards|abort|choice|faults|equivalence|least_loaded|pull_killed|serve_busy|stream_killed"
  pd_tests+="|speculative|options|usage"
  TACHYON_PD_DEVICE=cuda XDG_CACHE_HOME="$fresh/pd-cache" ctest --test-dir $BUILD_DIR -j 1 --timeout 300 \
    --output-on-failure -R "^server\.pd_($pd_tests)\$" > "$OUT_DIR/pd-gpu.log" 2>&1
  pd_rc=$?
  set -e
  grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" "$OUT_DIR/pd-gpu.log" | tail -12
  [ $pd_rc = 0 ] || canary_rc=1
else
  echo "== PD suite on the GPU: not run (GPU_PARTS)"
fi
# Every family's CPU goldens again with this machine's transformers (f32 on its CPU); the fresh
# files land in OUT_DIR/fresh-goldens too, to commit when a family's golden is new or changed.
# SKIP_FRESH_GOLDENS=1 leaves them for a later call (they need no GPU, only the build).
if ! part goldens; then
  echo "== goldens from this machine's transformers: not run (SKIP_FRESH_GOLDENS or GPU_PARTS)"
  [ $ctest_rc = 0 ] && exit $canary_rc
  exit $ctest_rc
fi
: > "$OUT_DIR/goldens.log"
cmake --build $BUILD_DIR -j "$(nproc)" --target model_goldens >> "$OUT_DIR/build.log" 2>&1 \
  || { tail -50 "$OUT_DIR/build.log"; exit 1; }
# Every manifest the golden test reads (tests/model/test_goldens.cpp's kManifests: a missing one
# fails its ManifestsPresent). The FP8 checkpoints load with no GPU visible, where transformers
# dequantizes them into float32, the format's definition (tools/make_goldens.py).
for manifest in manifest moe_manifest deepseek_manifest dsa_manifest glm_manifest mixtral_manifest fp8_manifest; do
  no_gpu=()
  [ $manifest = fp8_manifest ] && no_gpu=(env CUDA_VISIBLE_DEVICES=)
  TACHYON=$BUILD_DIR/bin/tachyon tools/make_golden_models.sh "$fresh/models" "tests/data/goldens/$manifest.json" > /dev/null
  "${no_gpu[@]}" python3 tools/make_goldens.py --manifest "tests/data/goldens/$manifest.json" \
    --models "$fresh/models" --out "$fresh/goldens" >> "$OUT_DIR/goldens.log" 2>&1 || tail -20 "$OUT_DIR/goldens.log"
  cp "tests/data/goldens/$manifest.json" "$fresh/goldens/"
done
mkdir -p "$OUT_DIR/fresh-goldens"
cp "$fresh"/goldens/*.json "$OUT_DIR/fresh-goldens/"
TACHYON_GOLDENS_DIR="$fresh/goldens" $BUILD_DIR/tests/model_goldens \
  > "$OUT_DIR/fresh-goldens.log" 2>&1 \
  && echo "== goldens from this machine's transformers: pass" \
  || { echo "== goldens from this machine's transformers: FAIL"; grep -E "golden\]|FAILED|rror" "$OUT_DIR/fresh-goldens.log"; exit 1; }
grep "golden\]" "$OUT_DIR/fresh-goldens.log"

[ $ctest_rc = 0 ] && exit $canary_rc
exit $ctest_rc
