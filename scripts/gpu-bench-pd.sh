#!/usr/bin/env bash
# Runs on the GPU machine after a CUDA build: prefill/decode disaggregation on one GPU against one
# server (tools/pd_bench.py says what it measures): the Llama-3.1-8B shape with random weights,
# prompts of 1K, 4K and 16K tokens, the KV copied by reference (CUDA IPC) against a device copy of
# as many bytes, TTFT through the router against the plain server, and decode ITL while 4K-token
# prompts arrive.
#   scripts/gpu-bench-pd.sh OUT_DIR        (TACHYON=build-gpu/bin/tachyon by default)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: scripts/gpu-bench-pd.sh OUT_DIR}
TACHYON=${TACHYON:-build-gpu/bin/tachyon}
MODELS=${MODELS:-/tmp/tachyon-bench-models}
mkdir -p "$OUT_DIR" "$MODELS"
TOKENIZER=${TOKENIZER:-third_party/tokenizers/models/llama3}  # the servers need one
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/tachyon-cache}
[ -f "$MODELS/llama-8b-served/config.json" ] ||
  "$TACHYON" make-model --arch llama --preset llama-3.1-8b --seed 0 --tokenizer "$TOKENIZER" \
    --out "$MODELS/llama-8b-served" > /dev/null
python3 tools/pd_bench.py --tachyon "$TACHYON" --model "$MODELS/llama-8b-served" --out "$OUT_DIR/pd-bench.json" \
  --device cuda --lengths "${LENGTHS:-1024,4096,16384}" --repeats "${REPEATS:-5}" ${PD_BENCH_ARGS:-}
